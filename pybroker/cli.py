"""The ``pybroker`` command: ``serve`` and ``dump-log``."""
import argparse
import logging
import mmap
import os
import sys

from pybroker import core
from pybroker.version import __version__

def serve(args) -> int:
    from pybroker.broker import Broker
    from pybroker.config import BrokerConfig, ConfigError
    from pybroker.errors import BrokerError
    from pybroker.logs import setup_logging
    from pybroker.net.server import run
    try:
        config = BrokerConfig.load(args.properties, args.override)
    except (ConfigError, OSError) as exc:
        print(f"pybroker: invalid configuration: {exc}", file=sys.stderr)
        return 2
    setup_logging(config.log_level)
    _dump_stacks_on_sigusr1()
    if config.ignored:
        logging.getLogger("pybroker.config").info("ignored config keys with no meaning here: %s",
                                                   ", ".join(config.ignored))

    async def main() -> None:
        broker = await Broker(config).start()
        broker.install_signal_handlers()  # before the ready line: a stop right after it is clean
        listener = broker.advertised_listener
        if args.stop_on_stdin_eof:
            _stop_on_stdin_eof()
        if args.ready_file:
            from pybroker.ready import ready_info, write_ready_file
            write_ready_file(args.ready_file, ready_info(broker.servers))
        print(f"pybroker {__version__} listening on {listener.name}://{listener.host}:{broker.port}", flush=True)
        await broker.run_until_signalled()
        if args.ready_file:  # a clean exit only: after a crash the stale file names a dead pid
            from pybroker.ready import remove_ready_file
            remove_ready_file(args.ready_file)

    try:
        run(main())
    except BrokerError as exc:  # e.g. a log dir that cannot be used
        print(f"pybroker: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


def _dump_stacks_on_sigusr1() -> None:
    """``kill -USR1 <pid>`` prints every thread's Python stack to stderr (what jstack is to Kafka):
    for a broker that seems stuck. The broker keeps running."""
    import faulthandler
    import signal
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


def _stop_on_stdin_eof() -> None:
    """SIGTERM ourselves (a clean stop) when stdin, a pipe from the parent, reaches end of file:
    the parent exited or closed it. Used by EmbeddedBroker so that no broker outlives its test run."""
    import asyncio
    import signal
    loop = asyncio.get_running_loop()
    fd = sys.stdin.fileno()

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except (BlockingIOError, InterruptedError):
            return
        if not data:
            loop.remove_reader(fd)
            os.kill(os.getpid(), signal.SIGTERM)
    loop.add_reader(fd, readable)


def dump_log(args) -> int:
    status = 0
    for path in args.files:
        print(f"Dumping {path}")
        try:
            if path.endswith(".log"):
                status |= dump_segment(path, args.index_interval)
            elif path.endswith((".index", ".timeindex")):
                dump_index(path)
            else:
                print("  unknown file type (expected .log, .index or .timeindex)")
                status = 1
        except OSError as exc:
            print(f"  cannot read: {exc}")
            status = 1
    return status


def dump_segment(path: str, index_interval: int) -> int:
    size = os.path.getsize(path)
    if size == 0:
        print("  (empty)")
        return 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as view:
        result = core.batch.scan(view, index_interval=index_interval)
        position = 0
        while position < result.valid_end:
            b = core.batch.parse_header(view, position)
            print(f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.record_count} "
                  f"position: {position} size: {b.size} magic: {b.magic} crc: {b.crc} "
                  f"compresscodec: {b.compression} isTransactional: {b.is_transactional} "
                  f"isControl: {b.is_control} producerId: {b.producer_id} producerEpoch: {b.producer_epoch} "
                  f"baseSequence: {b.base_sequence} partitionLeaderEpoch: {b.partition_leader_epoch} "
                  f"{'LogAppendTime' if b.is_log_append_time else 'CreateTime'}: {b.max_timestamp}")
            position += b.size
    if result.error is not None:
        print(f"  invalid from position {result.valid_end}: {result.error}")
        return 1
    return 0


def dump_index(path: str) -> None:
    base = int(os.path.basename(path).split(".")[0])
    cls = core.index.TimeIndex if path.endswith(".timeindex") else core.index.OffsetIndex
    index = cls(path, base, writable=False)
    try:
        for n in range(index.entries):
            a, b = index.entry(n)
            print(f"timestamp: {a} offset: {b}" if cls is core.index.TimeIndex else f"offset: {a} position: {b}")
        index.sanity_check()
    finally:
        index.close()


def _add_tool_commands(sub) -> None:
    from pybroker.tools import add_commands  # topics, produce, consume
    add_commands(sub)
    from pybroker.tools.acls import add_parser as add_acls_command  # kafka-acls
    add_acls_command(sub)
    from pybroker.tools.transactions import add_parser as add_transactions_command  # kafka-transactions
    add_transactions_command(sub)
    from pybroker.tools.share_groups import add_parser as add_share_groups_command  # kafka-share-groups
    add_share_groups_command(sub)
    from pybroker.tools.schemas import add_parser as add_schemas_command  # the schema registry's REST API
    add_schemas_command(sub)
    from pybroker.tools.iceberg_status import add_parser as add_iceberg_command  # tables' progress and lag
    add_iceberg_command(sub)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="pybroker", description="A Kafka-compatible message broker.")
    parser.add_argument("--version", action="version", version=f"pybroker {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="run a broker")
    p.add_argument("properties", nargs="?", help="a Kafka-style server.properties file")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--ready-file", metavar="PATH",
                   help="once serving, write the bound listeners and pid here as JSON (removed on a clean exit)")
    p.add_argument("--stop-on-stdin-eof", action="store_true",
                   help="stop cleanly when stdin (a pipe) is closed, e.g. because the parent process exited")
    p.set_defaults(func=serve)
    p = sub.add_parser("dump-log", help="print the batches of .log files and the entries of index files")
    p.add_argument("files", nargs="+")
    p.add_argument("--index-interval", type=int, default=4096)
    p.set_defaults(func=dump_log)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] != ["serve"]:  # a broker does not load the tools (nor the client they use): less idle memory
        _add_tool_commands(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

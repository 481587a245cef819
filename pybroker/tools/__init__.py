"""Admin and console commands in the style of Kafka's tools: ``topics``, ``produce``, ``consume``,
``groups``, ``leader-election``, ``reassign-partitions``, ``cluster``, ``log-dirs``, ``verify-replicas``,
``mirror``; and ``dev-cluster``, which runs a local ZooKeeper and N brokers for development.

Option names follow Kafka's scripts (kafka-topics.sh, kafka-console-producer.sh, ...).
The command modules load only when their command runs, so ``pybroker serve`` starts no slower.
"""
import argparse
import sys


def _property(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _runner(module: str):
    def run(args) -> int:
        import importlib
        from pybroker.tools.wire import ToolError, use_command_config
        try:
            use_command_config(getattr(args, "command_config", None))
            return importlib.import_module(f"pybroker.tools.{module}").run(args)
        except ToolError as exc:
            print(f"pybroker {args.command}: error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:  # e.g. piped into head: not an error
            sys.stderr.close()
            return 0
    return run


def add_commands(sub) -> None:
    """Add the tool sub-commands to the ``pybroker`` argument parser."""
    p = sub.add_parser("topics", help="create, list, describe, alter and delete topics (kafka-topics)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    action = p.add_mutually_exclusive_group(required=True)
    for name, doc in (("create", "create a topic"), ("list", "list topic names"),
                      ("describe", "describe topics: partitions, leaders, replicas, ISR, config overrides"),
                      ("delete", "delete a topic"), ("alter", "increase a topic's partition count")):
        action.add_argument(f"--{name}", action="store_true", help=doc)
    p.add_argument("--topic", help="the topic name")
    p.add_argument("--partitions", type=int, help="partition count (create; new count for alter)")
    p.add_argument("--replication-factor", type=int, help="replicas per partition (create)")
    p.add_argument("--config", type=_property, action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config override (create); repeatable")
    p.add_argument("--if-not-exists", action="store_true", help="create: succeed if the topic exists")
    p.add_argument("--if-exists", action="store_true", help="alter/delete/describe: succeed if it does not")
    p.add_argument("--exclude-internal", action="store_true", help="list/describe: skip internal topics")
    health = p.add_mutually_exclusive_group()
    for name, doc in (("under-replicated-partitions", "fewer in-sync replicas than replicas"),
                      ("unavailable-partitions", "no leader, or a leader that is not live"),
                      ("under-min-isr-partitions", "fewer in-sync replicas than min.insync.replicas"),
                      ("at-min-isr-partitions", "exactly min.insync.replicas in-sync replicas")):
        health.add_argument(f"--{name}", action="store_true", help=f"describe: only partitions with {doc}")
    p.add_argument("--command-timeout-ms", type=int, default=30000, metavar="MS",
                   help="timeout for each broker request (default 30000)")
    p.set_defaults(func=_runner("topics"))

    p = sub.add_parser("produce", help="send lines of stdin as records (kafka-console-producer)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, help="send every record to this partition")
    p.add_argument("--acks", default="-1", choices=["-1", "all", "0", "1"],
                   help="acknowledgements the leader waits for (default -1 = all in-sync replicas)")
    p.add_argument("--compression-codec", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--batch-size", type=int, default=500, metavar="N", help="records per batch (default 500)")
    p.add_argument("--request-timeout-ms", type=int, default=30000, metavar="MS")
    p.add_argument("--property", type=_property, action="append", default=[], metavar="KEY=VALUE",
                   help="parse.key=true, key.separator=SEP (default tab), ignore.error=true")
    p.set_defaults(func=_runner("console"), console="produce")

    p = sub.add_parser("consume", help="print a topic's records, one per line (kafka-console-consumer)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, help="read only this partition (default: all)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument("--offset", help="start offset: a number, 'earliest' or 'latest'")
    p.add_argument("--max-messages", type=int, metavar="N", help="exit after printing N records")
    p.add_argument("--timeout-ms", type=int, metavar="MS",
                   help="exit after MS without a new record (default: 30000 when reading up to the end "
                        "observed at start; wait forever when starting at latest)")
    p.add_argument("--property", type=_property, action="append", default=[], metavar="KEY=VALUE",
                   help="print.key, print.offset, print.partition, print.timestamp, print.headers, "
                        "print.value (true/false), key.separator, line.separator")
    p.add_argument("--request-timeout-ms", type=int, default=30000, metavar="MS")
    p.set_defaults(func=_runner("console"), console="consume")

    p = sub.add_parser("groups", help="list, describe and delete consumer groups (kafka-consumer-groups)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list the consumer groups")
    action.add_argument("--describe", action="store_true",
                        help="show each partition's committed offset, log end offset, lag and owner")
    action.add_argument("--delete", action="store_true", help="delete groups that have no active members")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--group", action="append", metavar="GROUP", help="the group id; repeatable")
    which.add_argument("--all-groups", action="store_true", help="describe/delete every consumer group")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="describe: the members instead of offsets")
    view.add_argument("--state", action="store_true", help="describe: coordinator, assignor, state, size")
    p.add_argument("--verbose", action="store_true", help="describe --members: show each assignment")
    p.add_argument("--command-timeout-ms", type=int, default=30000, metavar="MS",
                   help="timeout for each broker request (default 30000)")
    p.set_defaults(func=_runner("groups"))

    p = sub.add_parser("leader-election", help="elect preferred or unclean leaders (kafka-leader-election)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--election-type", required=True, choices=["preferred", "unclean"])
    which = p.add_mutually_exclusive_group()
    which.add_argument("--all-topic-partitions", action="store_true", help="every partition that needs it")
    which.add_argument("--topic", help="with --partition: one partition")
    which.add_argument("--path-to-json-file", metavar="FILE",
                       help='{"partitions": [{"topic": "t", "partition": 0}, ...]}')
    p.add_argument("--partition", type=int)
    p.add_argument("--admin-timeout-ms", type=int, default=60000, metavar="MS")
    p.set_defaults(func=_runner("leader_election"))

    p = sub.add_parser("verify-replicas",
                       help="check that every replica holds the same batches below the high watermark "
                            "(kafka-replica-verification)")
    p.add_argument("--bootstrap-server", "--broker-list", dest="bootstrap_server", required=True,
                   metavar="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--topics-include", default=".*", metavar="REGEX",
                   help="topics to verify: a regular expression matched against whole topic names, "
                        "internal topics included (default .*)")
    p.add_argument("--fetch-size", type=int, default=1 << 20, metavar="BYTES",
                   help="bytes fetched per partition and request (default 1048576)")
    p.add_argument("--max-wait-ms", type=int, default=1000, metavar="MS",
                   help="how long a fetch waits for new data when there is none (default 1000)")
    p.add_argument("--report-interval-ms", type=int, default=30000, metavar="MS",
                   help="with --time-limit-ms: print the max lag this often (default 30000)")
    p.add_argument("--time-limit-ms", type=int, default=0, metavar="MS",
                   help="keep verifying new data for MS; 0 (default): one pass, then exit")
    p.add_argument("--command-timeout-ms", type=int, default=30000, metavar="MS",
                   help="timeout for each broker request (default 30000)")
    p.set_defaults(func=_runner("verify_replicas"))

    p = sub.add_parser("cluster", help="describe the cluster: brokers, controller, partitions, log dir sizes")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--describe", action="store_true", required=True, help="describe the cluster")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    p.add_argument("--command-timeout-ms", type=int, default=30000, metavar="MS",
                   help="timeout for each broker request (default 30000)")
    p.set_defaults(func=_runner("cluster"))

    p = sub.add_parser("log-dirs", help="describe brokers' log dirs as JSON (kafka-log-dirs)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--describe", action="store_true", required=True, help="describe the log dirs")
    p.add_argument("--broker-list", metavar="ID[,ID...]", help="only these brokers (default: all)")
    p.add_argument("--topic-list", metavar="TOPIC[,TOPIC...]", help="only these topics (default: all)")
    p.add_argument("--command-timeout-ms", type=int, default=30000, metavar="MS",
                   help="timeout for each broker request (default 30000)")
    p.set_defaults(func=_runner("log_dirs"))

    p = sub.add_parser("reassign-partitions", help="move partition replicas between brokers "
                                                   "(kafka-reassign-partitions)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true",
                        help="propose a placement of --topics-to-move-json-file on --broker-list")
    action.add_argument("--execute", action="store_true", help="start the moves of --reassignment-json-file")
    action.add_argument("--verify", action="store_true",
                        help="report the moves of --reassignment-json-file; clears throttles once all are done")
    action.add_argument("--cancel", action="store_true", help="revert the moves of --reassignment-json-file")
    action.add_argument("--list", action="store_true", help="list the moves in progress")
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help='{"topics":[{"topic":"t"}],"version":1}')
    p.add_argument("--broker-list", metavar="ID,ID,...", help="generate: the brokers to place the topics on")
    p.add_argument("--reassignment-json-file", metavar="FILE",
                   help='{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}]}')
    p.add_argument("--throttle", type=int, metavar="BYTES/S",
                   help="execute: cap the replication traffic of the moves at this rate per broker")
    p.add_argument("--additional", action="store_true", help="execute: add to the moves already in progress")
    p.add_argument("--preserve-throttles", action="store_true", help="verify/cancel: leave the throttles set")
    p.add_argument("--command-timeout-ms", type=int, default=30000, metavar="MS")
    p.set_defaults(func=_runner("reassign_partitions"))

    p = sub.add_parser("dev-cluster", help="run a local cluster for development: ZooKeeper and N brokers")
    p.add_argument("--brokers", type=int, default=3, metavar="N", help="number of brokers (default 3)")
    p.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                   help="use this ZooKeeper (default: start one from Debian's zookeeper package)")
    p.add_argument("--dir", default="pybroker-cluster",
                   help="data and logs of ZooKeeper and the brokers (default ./pybroker-cluster)")
    p.add_argument("--base-port", type=int, default=9092, metavar="PORT",
                   help="broker i listens on 127.0.0.1:PORT+i-1 (default 9092)")
    p.set_defaults(func=_runner("dev_cluster"))
    _add_mirror(sub)
    _add_configs(sub)
    _add_command_config(sub)


def _add_command_config(sub) -> None:
    """Every command that connects to a cluster takes --command-config: Kafka client properties
    (security.protocol, ssl.truststore.location, ssl.keystore.location, sasl.mechanism,
    sasl.jaas.config, ...) for all its connections."""
    aliases = {"produce": ("--producer.config",), "consume": ("--consumer.config",)}
    done = set()
    for name, p in sub.choices.items():
        dests = {a.dest for a in p._actions}
        if id(p) in done or "bootstrap_server" not in dests or "command_config" in dests:
            continue
        done.add(id(p))
        p.add_argument("--command-config", *aliases.get(name, ()), dest="command_config", metavar="FILE",
                       help="Kafka client properties for the connections: TLS (PEM truststore/keystore) and "
                            "SASL (sasl.mechanism, sasl.jaas.config)")


def _add_configs(sub) -> None:
    p = sub.add_parser("configs", help="describe and alter dynamic topic/broker configs and client quotas "
                                       "(kafka-configs)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--entity-type", action="append", required=True,
                   choices=["topics", "brokers", "clients", "users", "broker-loggers"],
                   help="topics, brokers, clients or users; users and clients may be given together")
    p.add_argument("--entity-name", action="append", default=[], help="the entity's name (in --entity-type order)")
    p.add_argument("--entity-default", action="store_true",
                   help="the default entity (brokers: every broker; clients/users: the default quota)")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show the entity's dynamic configs / quotas")
    action.add_argument("--alter", action="store_true", help="change configs (--add-config, --delete-config)")
    p.add_argument("--add-config", default="", metavar="K=V[,K2=V2]", help="configs to set, comma-separated "
                   "(a value with commas in square brackets: k=[a,b])")
    p.add_argument("--delete-config", default="", metavar="K[,K2]", help="configs to remove, comma-separated")
    p.add_argument("--all", action="store_true", help="describe: every config, not only the dynamic ones")
    p.add_argument("--command-timeout-ms", type=int, default=30000, metavar="MS")
    p.set_defaults(func=_runner("configs"))


def _add_mirror(sub) -> None:
    p = sub.add_parser("mirror", help="keep topics of one cluster copied to another (MirrorMaker)")
    p.add_argument("--source", required=True, metavar="HOST:PORT[,HOST:PORT...]", help="the cluster to copy from")
    p.add_argument("--target", required=True, metavar="HOST:PORT[,HOST:PORT...]", help="the cluster to copy to")
    p.add_argument("--topics", required=True, metavar="REGEX",
                   help="topics to mirror: a Python regular expression matched against whole names "
                        "(topics starting with '__' never are)")
    p.add_argument("--group", default="pybroker-mirror",
                   help="consumer group on the source holding the progress (default pybroker-mirror)")
    p.add_argument("--source-property", type=_property, action="append", default=[], metavar="KEY=VALUE",
                   help="a consumer setting for the source (Kafka name); repeatable")
    p.add_argument("--target-property", type=_property, action="append", default=[], metavar="KEY=VALUE",
                   help="a client setting for the target's admin connection (Kafka name); repeatable")
    p.add_argument("--replication-factor", type=int, metavar="N",
                   help="of topics created on the target (default: the source's, at most the target's broker count)")
    p.add_argument("--commit-interval-ms", type=int, default=1000, metavar="MS",
                   help="commit the source offsets (of what the target acknowledged) this often (default 1000)")
    p.add_argument("--lag-interval-ms", type=int, default=5000, metavar="MS",
                   help="print records copied, rate and lag this often (default 5000)")
    p.add_argument("--metadata-refresh-ms", type=int, default=30000, metavar="MS",
                   help="look for new matching topics and partitions this often (default 30000)")
    p.add_argument("--max-idle-ms", type=int, metavar="MS",
                   help="exit once MS have passed without a new record and nothing is left to copy")
    p.set_defaults(func=_runner("mirror"))

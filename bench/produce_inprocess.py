"""µs per Produce request through the dispatcher, in-process, for bench_produce_versions.py.

Run inside a tree (its directory first on sys.path): a real ReplicaManager and Partition over a log
in a temporary directory, and ``Dispatcher.handle`` on whole request frames: header and body
decode, validation, append, the answer encoded. No network, so timings hold under other load.

    python bench/produce_inprocess.py TREE RUNS MIN_TIME VERSION [VERSION ...]   (prints one JSON line)
"""
import json
import os
import shutil
import statistics
import sys
import tempfile
from types import SimpleNamespace

sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # after the measured tree, which main() puts first
from loop_timing import call_samples_us  # noqa: E402


def per_call_us(fn, runs: int, min_time: float) -> tuple[float, float]:
    """(fastest, median) of ``runs`` timings: the fastest is the least disturbed by other work."""
    samples = call_samples_us(fn, runs, min_time)
    return min(samples), statistics.median(samples)


def measure(runs: int, min_time: float, versions) -> dict:
    from pybroker.api.dispatcher import Dispatcher
    from pybroker.controller.metadata_cache import MetadataCache, PartitionState
    from pybroker.log import LogConfig
    from pybroker.log.manager import LogManager
    from pybroker.protocol import REQUESTS, decode_response, encode_request
    from pybroker.records import build_batch
    from pybroker.replica.manager import ReplicaManager
    tmp = tempfile.mkdtemp(prefix="pybroker-bench-produce-")
    config = LogConfig(retention_ms=-1, segment_bytes=1 << 30)
    logs = LogManager([tmp], config, background=False).startup()
    try:
        rm = ReplicaManager(0, logs)
    except TypeError:  # trees whose replica manager always has a fetcher manager (idle on a single node)
        from pybroker.config import BrokerConfig
        from pybroker.replica.fetcher import ReplicaFetcherManager
        rm = ReplicaManager(0, logs, ReplicaFetcherManager(0, BrokerConfig.load(overrides=[], env={})))
    rm.apply_states(1, [PartitionState("bench", 0, 0, 1, (0,), (0,))], {}, lambda topic: config, {})
    broker = SimpleNamespace(replicas=rm, authorizer=None, metrics=None, transactions=None, quotas=None,
                             metadata=MetadataCache(),
                             config=SimpleNamespace(transaction_partition_verification_enable=False))
    dispatcher = Dispatcher(broker)
    conn = SimpleNamespace(session=None)
    P = REQUESTS[0]
    batch = bytes(build_batch([bytes(100)] * 10))
    req = P(transactional_id=None, acks=1, timeout_ms=30000, topic_data=[P.TopicProduceData(
        name="bench", partition_data=[P.PartitionProduceData(index=0, records=batch)])])
    out = {}
    for version in versions:
        template = bytes(encode_request(version, 1, "bench", req))

        def call():  # a copy per call: the append stamps the base offset into the frame
            return dispatcher.handle(memoryview(bytearray(template)), conn)
        _, answer = decode_response(b"".join(bytes(part) for part in call()), 0, version)
        assert answer.responses[0].partition_responses[0].error_code == 0, answer
        out[f"v{version}"] = per_call_us(call, runs, min_time)
    logs.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    tree, runs, min_time, *versions = sys.argv[1:]
    sys.path.insert(0, tree)
    print(json.dumps(measure(int(runs), float(min_time), [int(v) for v in versions])))

"""A real ``pybroker serve`` on loopback, driven by clients in separate processes.

Per (record size, partitions) case, a fresh broker: produce MB/s and records/s (acks=1, records
spread round-robin over the partitions), consume MB/s (all partitions assigned, from offset 0),
produce latency p50/p99 at a steady 5 MB/s (bench/broker_clients.py, partition 0). Plus the time
for 3 members to join and sync a group (bench/bench_groups.py). Everything is measured once, in
``setup_cache``; the track_* functions report it. The load clients are confluent-kafka
(librdkafka): run as ``python macro_broker.py produce|consume ...``.
"""
import argparse
import json
import sys
import time

MAX_SECONDS = 120  # no client run goes on longer than this
SIZES = [100, 1024, 65536]
PARTITIONS = [1, 16, 100]
QUICK_CASE = (1024, 1)
LATENCY_MB_S, LATENCY_SECONDS = 5, 2


def volume(size: int) -> int:
    """Records per case: a few MB each, so the 9 cases take about a minute together."""
    return {100: 80_000, 1024: 16_000}.get(size, 32 * 1024 * 1024 // size)


# ---- load clients, each in its own process ------------------------------------------------------

def client_produce(args) -> dict:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": args.bootstrap, "acks": "1", "linger.ms": 10,
                  "batch.size": 1048576, "queue.buffering.max.kbytes": 1048576,
                  "queue.buffering.max.messages": 1000000, "compression.type": "none",
                  "enable.idempotence": False})
    value = (bytes(range(256)) * (args.size // 256 + 1))[:args.size]
    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(str(err))

    deadline = time.monotonic() + MAX_SECONDS
    start = time.perf_counter()
    for i in range(args.count):
        while True:
            try:
                p.produce(args.topic, value, partition=i % args.partitions, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.001)
                if time.monotonic() > deadline:
                    raise TimeoutError("producer queue stayed full")
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(MAX_SECONDS)
    seconds = time.perf_counter() - start
    return {"records": args.count - left - len(errors), "seconds": seconds, "errors": errors[:3]}


def client_consume(args) -> dict:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "asv", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100, "queued.max.messages.kbytes": 262144})
    c.assign([TopicPartition(args.topic, p, 0) for p in range(args.partitions)])
    got = nbytes = 0
    deadline = time.monotonic() + MAX_SECONDS
    c.list_topics(args.topic, timeout=10)  # connect and learn the leaders before the clock starts
    start = time.perf_counter()
    while got < args.count and time.monotonic() < deadline:
        for m in c.consume(num_messages=min(10000, args.count - got), timeout=0.5):  # returns once all are in
            if not m.error():
                got += 1
                nbytes += len(m)
    seconds = time.perf_counter() - start
    c.close()
    return {"records": got, "bytes": nbytes, "seconds": seconds}


def client_main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("produce", "consume"))
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=1)
    args = ap.parse_args()
    print(json.dumps((client_produce if args.mode == "produce" else client_consume)(args)), flush=True)


# ---- the asv side --------------------------------------------------------------------------------

def _start_broker(tmp: str, overrides: dict):
    import os
    from tests.broker import BrokerProcess
    from . import INSTALLED
    if INSTALLED:
        os.environ["PYTHONSAFEPATH"] = "1"  # the broker child must run the installed commit, not the work tree
    return BrokerProcess(os.path.join(tmp, "data"), overrides).start()


def _client(mode: str, bootstrap: str, topic: str, **opts) -> dict:
    import subprocess
    args = [sys.executable, __file__, mode, "--bootstrap", bootstrap, "--topic", topic]
    for k, v in opts.items():
        args += [f"--{k}", str(v)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=MAX_SECONDS + 30)
    if out.returncode != 0:
        raise RuntimeError(f"{mode} client failed: {out.stderr[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_case(size: int, parts: int) -> dict:
    """One fresh broker, one topic: produce, consume it all back, then latency."""
    import shutil
    import tempfile
    from . import INSTALLED  # noqa: F401  import paths
    import bench_broker
    from tests.kafka_wire import WireClient
    tmp = tempfile.mkdtemp(prefix="pybroker-asv-")
    broker = _start_broker(tmp, {"log.segment.bytes": 1073741824})
    try:
        with WireClient(broker.port) as w:
            w.create_topic("load", parts)
            w.create_topic("lat", 1)
        count = volume(size)
        r = _client("produce", broker.bootstrap, "load", count=count, size=size, partitions=parts)
        if r["records"] != count:
            raise RuntimeError(f"produced {r['records']} of {count}: {r['errors']}")
        out = {"produce_mb_s": count * size / r["seconds"] / 1e6, "produce_records_s": count / r["seconds"]}
        r = _client("consume", broker.bootstrap, "load", count=count, partitions=parts)
        if r["records"] != count:
            raise RuntimeError(f"consumed {r['records']} of {count}")
        out["consume_mb_s"] = r["bytes"] / r["seconds"] / 1e6
        r = bench_broker.client("latency", broker.bootstrap, "lat", rate_mb=LATENCY_MB_S, size=size,
                                seconds=LATENCY_SECONDS)
        if not r["records"]:
            raise RuntimeError("no record was delivered in the latency run")
        out.update(latency_p50_ms=r["p50_ms"], latency_p99_ms=r["p99_ms"])
        return out
    finally:
        broker.stop()
        broker.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _cases():
    from . import QUICK
    return [QUICK_CASE] if QUICK else [(s, p) for s in SIZES for p in PARTITIONS]


class Broker:
    params = [SIZES, PARTITIONS]
    param_names = ["record_bytes", "partitions"]
    timeout = 60
    rounds = 1
    repeat = 1
    number = 1

    def setup_cache(self):
        results = {}
        for case in _cases():
            try:
                results[case] = measure_case(*case)
            except Exception as exc:  # one failing case must not hide the others
                results[case] = f"{type(exc).__name__}: {exc}"
        return results
    setup_cache.timeout = 900

    def setup(self, results, size, parts):
        got = results.get((size, parts))
        if got is None:
            raise NotImplementedError("case not run (--quick)")  # asv shows it as skipped
        if isinstance(got, str):
            raise RuntimeError(got)
        self.r = got

    def track_produce_mb_s(self, results, size, parts):
        return self.r["produce_mb_s"]
    track_produce_mb_s.unit = "MB/s"

    def track_produce_records_s(self, results, size, parts):
        return self.r["produce_records_s"]
    track_produce_records_s.unit = "records/s"

    def track_consume_mb_s(self, results, size, parts):
        return self.r["consume_mb_s"]
    track_consume_mb_s.unit = "MB/s"

    def track_latency_p50_ms(self, results, size, parts):
        return self.r["latency_p50_ms"]
    track_latency_p50_ms.unit = "ms"

    def track_latency_p99_ms(self, results, size, parts):
        return self.r["latency_p99_ms"]
    track_latency_p99_ms.unit = "ms"


class Group:
    """Last JoinGroup to all 3 members assigned (bench_groups.one_rebalance), median of 3."""
    timeout = 60
    rounds = 1
    repeat = 1
    number = 1

    def setup_cache(self):
        import shutil
        import statistics
        import tempfile
        from . import INSTALLED  # noqa: F401  import paths
        import bench_groups
        tmp = tempfile.mkdtemp(prefix="pybroker-asv-")
        broker = _start_broker(tmp, {"group.initial.rebalance.delay.ms": 0})
        try:
            return statistics.median(bench_groups.one_rebalance(broker.port, f"asv-{i}") for i in range(3))
        except Exception as exc:  # e.g. a commit from before consumer groups
            return f"{type(exc).__name__}: {exc}"
        finally:
            broker.stop()
            broker.close()
            shutil.rmtree(tmp, ignore_errors=True)
    setup_cache.timeout = 120

    def setup(self, ms):
        if isinstance(ms, str):
            raise NotImplementedError(ms)

    def track_group_join_ms(self, ms):
        return ms
    track_group_join_ms.unit = "ms"


if __name__ == "__main__":
    client_main()

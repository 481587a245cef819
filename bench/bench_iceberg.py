"""Topics as Iceberg tables: translation throughput, produce-to-queryable lag, produce throughput with
translation on vs off, and Spark over the table vs over the topic, in one run.

    python bench/bench_iceberg.py [--parts 1,2,3,4] [--out FILE.json]
        part 1: [--translate-megabytes 500] [--translate-runs 3]
        part 2: [--lag-rate-mb 20] [--lag-seconds 120] [--fast-lag-seconds 30]
        part 3: [--megabytes 300] [--runs 5] [--on-target-lag-ms 60000]
        part 4: [--spark-runs 3]
    common:     [--partitions 4] [--size 1024]

Each part starts a fresh ``pybroker serve`` (tests.broker.BrokerProcess: its own data dir, stopped by
PID) with a small "warm" iceberg topic translated first, so the broker's translation worker is running
(and has imported pyiceberg) before anything is timed. The table of topic T is ``kafka.T`` in the
broker's SQLite catalog (<log dir>/iceberg/catalog.db); "the table covers offset o of partition p"
means the current snapshot's summary "pybroker.next-offsets" says more than o for p. Every wait is
bounded. Records are ``--size`` bytes of value, no key, sent round-robin to the partitions by
confluent-kafka producer processes with the knobs in PRODUCER (printed); MB are 10^6 bytes of values.

1. Translation throughput: a topic with iceberg.mode=disabled gets ``--translate-megabytes`` of
   records; pybroker's Consumer.poll_batch (read_committed, every partition assigned from 0, PLAIN_CONSUMER
   knobs, own process, imports done before the clock) reads it all: records/s and MB/s of a plain consume.
   Then IncrementalAlterConfigs sets iceberg.mode=key_value and iceberg.target.lag.ms=1000; the clock
   runs from that request until the table (polled every 100 ms) covers every partition's end offset:
   records/s and MB/s into Parquet (including the broker noticing the change, <= 0.5 s, and the last
   commit's wait). Median of ``--translate-runs``, a fresh topic each run.
2. Produce-to-queryable lag: a producer process paced at ``--lag-rate-mb`` MB/s for ``--lag-seconds``
   (target lag 60000, the default) and ``--fast-lag-seconds`` (target lag 1000) into a key_value topic;
   for every record, the CLOCK_MONOTONIC time its acknowledgement reached the producer's callback vs the
   first time the poller (table's current snapshot read every 100 ms) saw the table cover its offset.
   p50 / p99 / max over all timed records.
3. Broker produce throughput with translation off (iceberg.mode=disabled) and on (iceberg.mode=key_value,
   target lag ``--on-target-lag-ms``, default the topic default 60000): ``--megabytes`` from one
   confluent-kafka producer process per round, a fresh topic per round, rounds alternating off/on/on/off...
   MB/s is the producer's own clock (after one acknowledged warm-up record per partition). CPU seconds
   per GB produced from /proc/<pid>/stat utime+stime of the broker and of its worker process, over the
   producer's life ("during produce") and, for "on" rounds, until the table covers the whole topic
   ("to caught up"); the next round starts only then. Medians of ``--runs`` each; ratio on/off.
4. Spark (local[2]): count() and where(length(value) > 100).groupBy(partition).count() over the table
   (the pybroker source's table mode) and over the topic (topic mode, read_committed), median of
   ``--spark-runs`` each after one untimed warm-up of each, one session. Uses part 1's last topic (or
   translates one of ``--translate-megabytes`` first). Skipped with a message without table mode.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
SPARK_SOURCE = os.path.join(ROOT, "spark_source")
for _path in (ROOT, BENCH):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from cluster_clients import delivery_tally, send_blocking  # noqa: E402
from measure import PRODUCER, cpu_seconds, in_turn, run_json  # noqa: E402
from scratch_broker import ScratchBroker  # noqa: E402

PARTITIONS = 4
RECORD = 1024
NAMESPACE = "kafka"
PROGRESS_KEY = "pybroker.next-offsets"
POLL_S = 0.1  # how often the table's current snapshot is read
FAST_LAG_MS = 1000
DEFAULT_LAG_MS = 60000  # iceberg.target.lag.ms when the topic does not set it
WAIT_S = 600  # bound on any wait for the table to catch up
# pybroker's Consumer as the translation worker configures it (Kafka's consumer defaults), read_committed
PLAIN_CONSUMER = {"isolation.level": "read_committed", "enable.auto.commit": False, "fetch.min.bytes": 1,
                  "fetch.max.wait.ms": 500, "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 1048576}
BROKER_OVERRIDES: dict = {}  # the broker's defaults, but for log.dirs and an ephemeral listener port
WARM_TOPIC = "bench-warm"
POOL_BYTES = 64 << 20  # random bytes the record values are cut from


# ---- the broker, its worker and its catalog ------------------------------------------------------

class Broker(ScratchBroker):
    """A fresh broker with its translation worker running (a warm topic translated)."""

    def __init__(self):
        super().__init__("pybroker-bench-iceberg-", BROKER_OVERRIDES)
        self.catalog = None
        self.worker = None

    def ready(self) -> None:
        from tests.icebergutil import catalog
        self.catalog = catalog(self.data_dir)
        create_topic(self.bootstrap, WARM_TOPIC, 1, {"iceberg.mode": "key_value",
                                                     "iceberg.target.lag.ms": str(FAST_LAG_MS)})
        produce_few(self.bootstrap, WARM_TOPIC, 1)
        if wait_covered(self.progress(WARM_TOPIC), {0: 1}, 120) is None:
            raise RuntimeError(f"the warm topic's table did not appear; broker stderr: {self.stderr()}")
        self.worker = worker_pid(self.pid)

    def stderr(self) -> str:
        return self.proc.stderr()[-2000:]

    def progress(self, topic: str) -> "TableProgress":
        return TableProgress(self.catalog, topic)

    def cpu(self) -> tuple[float, float]:
        """(broker, worker) CPU seconds so far; the worker must still be the one found at start."""
        if worker_pid(self.pid) != self.worker:
            raise RuntimeError("the translation worker was restarted during the measurement")
        return cpu_seconds(self.pid), cpu_seconds(self.worker)


def worker_pid(broker_pid: int) -> int:
    """The broker's child process running pybroker.iceberg.worker."""
    from tests.icebergutil import worker_pids
    found = worker_pids(broker_pid)
    if len(found) != 1:
        raise RuntimeError(f"expected one translation worker under broker {broker_pid}, found {found}")
    return found[0]


class TableProgress:
    """The progress of table kafka.<topic>: its current snapshot's "pybroker.next-offsets"."""

    def __init__(self, catalog, topic: str):
        self.catalog = catalog
        self.identifier = (NAMESPACE, topic)

    def read(self) -> dict[int, int]:
        from pyiceberg.exceptions import NoSuchTableError
        try:
            snapshot = self.catalog.load_table(self.identifier).current_snapshot()
        except NoSuchTableError:
            return {}
        text = snapshot.summary.additional_properties.get(PROGRESS_KEY) if snapshot is not None else None
        return {int(p): int(o) for p, o in json.loads(text).items()} if text else {}

    def table_summary(self) -> dict:
        snapshot = self.catalog.load_table(self.identifier).current_snapshot()
        return dict(snapshot.summary.additional_properties)


def covers(progress: dict, ends: dict) -> bool:
    return all(progress.get(p, 0) >= end for p, end in ends.items())


def wait_covered(progress: TableProgress, ends: dict, timeout: float) -> float | None:
    """Poll every POLL_S until the table covers ``ends``: the monotonic time it was seen; None on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        seen = progress.read()
        now = time.monotonic()
        if covers(seen, ends):
            return now
        if now > deadline:
            return None
        time.sleep(max(0.0, POLL_S - (time.monotonic() - now)))


# ---- topics and clients ------------------------------------------------------------------------

def create_topic(bootstrap: str, topic: str, partitions: int, configs: dict) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})  # no info lines on stderr
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(60)
    deadline = time.monotonic() + 60
    while True:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} has no leader on every partition")
        time.sleep(0.1)


def alter_topic(bootstrap: str, topic: str, configs: dict) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})  # no info lines on stderr
    change = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([change])[change].result(60)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-iceberg-offsets"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        c.close()


def produce_few(bootstrap: str, topic: str, partitions: int) -> None:
    """One record per partition, acknowledged."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
    for part in range(partitions):
        p.produce(topic, b"w" * RECORD, partition=part)
    if p.flush(60):
        raise RuntimeError(f"warm-up records to {topic} not acknowledged")


def produce(bootstrap: str, topic: str, megabytes: float, args) -> dict:
    """``megabytes`` of ``--size`` records from one confluent-kafka producer process (its own clock)."""
    count = int(megabytes * 1e6) // args.size
    r = run_json(__file__, "_produce", "--bootstrap", bootstrap, "--topic", topic, "--partitions",
                 str(args.partitions), "--records", str(count), "--size", str(args.size), timeout=WAIT_S + 60)
    if r["errors"] or r["records"] != count:
        raise RuntimeError(f"producing to {topic}: {r['records']} of {count} acknowledged, "
                           f"{r['errors']} errors ({r['first_error']})")
    return {**r, "mb_s": r["bytes"] / r["seconds"] / 1e6}


# ---- child processes ---------------------------------------------------------------------------

class Values:
    """Incompressible record values: consecutive slices of a random buffer larger than any compressor's
    window or Parquet dictionary page, so the table's files hold every byte."""

    def __init__(self, size: int):
        self.size = size
        self.buf = os.urandom(POOL_BYTES)
        self.slots = (POOL_BYTES - size) // size

    def __getitem__(self, i: int) -> bytes:
        o = (i % self.slots) * self.size
        return self.buf[o:o + self.size]


def _producer(args):
    """A confluent-kafka producer with PRODUCER's knobs, its connections and metadata warmed up by one
    acknowledged record per partition (untimed)."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": args.bootstrap, **PRODUCER})
    for part in range(args.partitions):
        send_blocking(p, args.topic, b"w" * args.size, part, None, time.monotonic() + 60)
    if p.flush(60):
        raise RuntimeError("warm-up records not acknowledged")
    return p


def produce_role(args) -> dict:
    """``--records`` records as fast as they are taken, round-robin over the partitions."""
    values = Values(args.size)
    p = _producer(args)
    state, delivered = delivery_tally()

    deadline = time.monotonic() + WAIT_S
    start = time.perf_counter()
    for i in range(args.records):
        send_blocking(p, args.topic, values[i], i % args.partitions, delivered, deadline)
        if i % 10000 == 0:
            p.poll(0)
    p.flush(max(1.0, deadline - time.monotonic()))
    seconds = time.perf_counter() - start
    return {"records": state["ok"], "bytes": state["ok"] * args.size, "seconds": seconds,
            "errors": state["failed"], "first_error": state["first_error"]}


def plain_consume_role(bootstrap: str, topic: str, ends: dict) -> dict:
    """Read every partition from 0 to its end offset with pybroker's Consumer.poll_batch."""
    import pyarrow.compute as pc

    from pybroker.client import Consumer
    warm = Consumer({"bootstrap.servers": bootstrap, **PLAIN_CONSUMER})  # imports, first connection: untimed
    warm.assign([(WARM_TOPIC, 0, 0)])
    deadline = time.monotonic() + 60
    while warm.poll_batch(500).num_rows == 0 and time.monotonic() < deadline:
        pass
    warm.close()
    want = sum(ends.values())
    got = nbytes = 0
    deadline = time.monotonic() + WAIT_S
    start, cpu = time.perf_counter(), time.process_time()
    c = Consumer({"bootstrap.servers": bootstrap, **PLAIN_CONSUMER})
    c.assign([(topic, p, 0) for p in ends])
    while got < want and time.monotonic() < deadline:
        b = c.poll_batch(1000)
        if b.num_rows:
            got += b.num_rows
            nbytes += pc.sum(pc.binary_length(b.column("value"))).as_py()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    c.close()
    return {"records": got, "bytes": nbytes, "seconds": seconds, "cpu_seconds": cpu}


def paced_produce_role(args) -> dict:
    """Send ``--rate-mb`` MB/s of ``--size`` records for ``--seconds``; write each acknowledged record's
    (partition, offset, CLOCK_MONOTONIC time of its delivery callback) to ``--acks-file`` (.npz)."""
    from array import array

    import numpy as np
    values = Values(args.size)
    p = _producer(args)
    parts, offsets, acked = array("i"), array("q"), array("d")
    failed = []
    clock = time.monotonic

    def delivered(err, msg):
        if err is None:
            parts.append(msg.partition())
            offsets.append(msg.offset())
            acked.append(clock())
        else:
            failed.append(str(err))

    per_second = args.rate_mb * 1e6 / args.size
    start = time.monotonic()
    sent = 0
    while (elapsed := time.monotonic() - start) < args.seconds:
        due = int(per_second * elapsed) - sent  # paced by elapsed time: sleeps that overshoot catch up
        for _ in range(max(due, 0)):
            send_blocking(p, args.topic, values[sent], sent % args.partitions, delivered, start + args.seconds + 60)
            sent += 1
        p.poll(0)
        time.sleep(0.0005)
    offered = time.monotonic() - start
    left = p.flush(120)
    np.savez(args.acks_file, partition=np.frombuffer(parts, np.int32), offset=np.frombuffer(offsets, np.int64),
             acked=np.frombuffer(acked, np.float64))
    return {"sent": sent, "acked": len(acked), "unacknowledged": left, "errors": len(failed),
            "first_error": failed[0] if failed else "", "offered_mb_s": sent * args.size / offered / 1e6,
            "start": start, "seconds": offered}


# ---- part 1: translation throughput ------------------------------------------------------------

def translate(b: Broker, topic: str, ends: dict) -> dict:
    """Turn the topic's table on (target lag 1 s) and time it until the table covers ``ends``."""
    progress = b.progress(topic)
    cpu0 = b.cpu()
    t0 = time.monotonic()
    alter_topic(b.bootstrap, topic, {"iceberg.mode": "key_value", "iceberg.target.lag.ms": str(FAST_LAG_MS)})
    done = wait_covered(progress, ends, WAIT_S)
    if done is None:
        raise RuntimeError(f"{topic}: the table did not cover {ends} in {WAIT_S} s; broker: {b.stderr()}")
    cpu1 = b.cpu()
    summary = progress.table_summary()
    return {"seconds": done - t0, "broker_cpu_s": cpu1[0] - cpu0[0], "worker_cpu_s": cpu1[1] - cpu0[1],
            "table_records": int(summary.get("total-records", 0)),
            "table_files": int(summary.get("total-data-files", 0)),
            "parquet_bytes": int(summary.get("total-files-size", 0))}


def part1(b: Broker, args) -> tuple[dict, str]:
    runs = []
    topic = None
    for run in range(args.translate_runs):
        topic = f"translate-{run}"
        create_topic(b.bootstrap, topic, args.partitions, {"iceberg.mode": "disabled"})
        p = produce(b.bootstrap, topic, args.translate_megabytes, args)
        ends = end_offsets(b.bootstrap, topic, args.partitions)
        records = sum(ends.values())
        nbytes = records * args.size
        c = run_json(__file__, "_plain_consume", "--bootstrap", b.bootstrap, "--topic", topic,
                     "--ends", json.dumps(ends), timeout=WAIT_S + 60)
        if c["records"] != records:
            raise RuntimeError(f"{topic}: the plain consume read {c['records']} of {records} records")
        t = translate(b, topic, ends)
        if t["table_records"] != records:
            raise RuntimeError(f"{topic}: the table holds {t['table_records']} rows, the topic {records}")
        r = {"topic": topic, "records": records, "bytes": nbytes, "load": os.getloadavg()[0],
             "produce_mb_s": p["mb_s"],
             "consume_seconds": c["seconds"], "consume_records_s": records / c["seconds"],
             "consume_mb_s": nbytes / c["seconds"] / 1e6, "consume_cpu_s": c["cpu_seconds"],
             "translate_records_s": records / t["seconds"], "translate_mb_s": nbytes / t["seconds"] / 1e6,
             **{f"translate_{k}": v for k, v in t.items() if k != "table_records"}}
        runs.append(r)
        print(f"  1 run {run + 1}: {records} records; plain consume {r['consume_records_s']:,.0f} rec/s "
              f"{r['consume_mb_s']:.1f} MB/s; translation {r['translate_records_s']:,.0f} rec/s "
              f"{r['translate_mb_s']:.1f} MB/s ({t['seconds']:.2f} s, {t['table_files']} files, "
              f"{t['parquet_bytes'] / 1e6:.0f} MB Parquet, worker {t['worker_cpu_s']:.1f} CPU s, "
              f"broker {t['broker_cpu_s']:.1f} CPU s); load {r['load']:.2f}", flush=True)
    med = {k: statistics.median(r[k] for r in runs) for k in
           ("translate_records_s", "translate_mb_s", "consume_records_s", "consume_mb_s", "translate_seconds",
            "translate_worker_cpu_s", "translate_broker_cpu_s")}
    med["translate_over_consume"] = med["translate_records_s"] / med["consume_records_s"]
    return {"runs": runs, "medians": med}, topic


# ---- part 2: produce-to-queryable lag ----------------------------------------------------------

def lag_run(b: Broker, target_ms: int, seconds: float, args) -> dict:
    import numpy as np
    topic = f"lag-{target_ms}"
    create_topic(b.bootstrap, topic, args.partitions, {"iceberg.mode": "key_value",
                                                      "iceberg.target.lag.ms": str(target_ms)})
    produce_few(b.bootstrap, topic, args.partitions)  # the table exists and the worker reads the topic
    progress = b.progress(topic)
    if wait_covered(progress, {p: 1 for p in range(args.partitions)}, target_ms / 1000 + 120) is None:
        raise RuntimeError(f"{topic}: the warm-up records never reached the table")
    acks_file = os.path.join(b.tmp, f"acks-{target_ms}.npz")
    child = subprocess.Popen(
        [sys.executable, __file__, "_paced_produce", "--bootstrap", b.bootstrap, "--topic", topic,
         "--partitions", str(args.partitions), "--size", str(args.size), "--rate-mb", str(args.lag_rate_mb),
         "--seconds", str(seconds), "--acks-file", acks_file],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen_t, seen = [], []  # when the progress changed, and to what

    def poll_once():
        now_progress = progress.read()
        now = time.monotonic()
        if not seen or now_progress != seen[-1]:
            seen_t.append(now)
            seen.append(now_progress)
        time.sleep(max(0.0, POLL_S - (time.monotonic() - now)))

    try:
        deadline = time.monotonic() + seconds + 300
        while child.poll() is None and time.monotonic() < deadline:
            poll_once()
        out, err = child.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode:
        raise RuntimeError(f"the paced producer failed: {err[-2000:]}")
    produced = json.loads(out.strip().splitlines()[-1])
    acks = np.load(acks_file)
    parts, offsets, acked = acks["partition"], acks["offset"], acks["acked"]
    ends = {int(p): int(offsets[parts == p].max()) + 1 for p in np.unique(parts)}
    deadline = time.monotonic() + 2 * target_ms / 1000 + 120
    while not covers(seen[-1] if seen else {}, ends) and time.monotonic() < deadline:
        poll_once()
    queryable = np.full(len(offsets), np.inf)
    for p in ends:  # each record: the first time the progress seen was above its offset
        mask = parts == p
        nexts = np.array([s.get(p, 0) for s in seen], np.int64)
        times = np.array(seen_t)
        nexts = np.maximum.accumulate(nexts)
        idx = np.searchsorted(nexts, offsets[mask], side="right")
        found = idx < len(nexts)
        q = np.full(mask.sum(), np.inf)
        q[found] = times[idx[found]]
        queryable[mask] = q
    lag = np.sort(queryable - acked)
    uncovered = int(np.isinf(lag).sum())

    def pick(q):
        v = float(lag[min(len(lag) - 1, int(q * len(lag)))]) if len(lag) else float("inf")
        return None if v == float("inf") else v

    r = {"topic": topic, "target_lag_ms": target_ms, "seconds": seconds, "records": int(len(lag)),
         "sent": produced["sent"], "errors": produced["errors"], "offered_mb_s": produced["offered_mb_s"],
         "commits_seen": len(seen) - 1, "never_queryable": uncovered,
         "p50_s": pick(0.50), "p99_s": pick(0.99), "max_s": pick(1.0), "load": os.getloadavg()[0]}
    fmt = lambda v: "never" if v is None else f"{v:.3f} s"  # noqa: E731
    print(f"  2 target lag {target_ms} ms: {r['records']} records at {r['offered_mb_s']:.1f} MB/s for "
          f"{seconds:.0f} s; produce-to-queryable p50 {fmt(r['p50_s'])}, p99 {fmt(r['p99_s'])}, "
          f"max {fmt(r['max_s'])}; {r['commits_seen']} progress changes seen, {uncovered} never queryable; "
          f"load {r['load']:.2f}", flush=True)
    return r


def part2(b: Broker, args) -> dict:
    return {str(ms): lag_run(b, ms, s, args) for ms, s in ((DEFAULT_LAG_MS, args.lag_seconds),
                                                          (FAST_LAG_MS, args.fast_lag_seconds))}


# ---- part 3: produce throughput, translation on vs off -----------------------------------------

def produce_round(b: Broker, run: int, on: bool, args) -> dict:
    topic = f"produce-{run}-{'on' if on else 'off'}"
    configs = {"iceberg.mode": "key_value"} if on else {"iceberg.mode": "disabled"}
    if on and args.on_target_lag_ms != DEFAULT_LAG_MS:
        configs["iceberg.target.lag.ms"] = str(args.on_target_lag_ms)
    create_topic(b.bootstrap, topic, args.partitions, configs)
    load = os.getloadavg()[0]
    cpu0 = b.cpu()
    p = produce(b.bootstrap, topic, args.megabytes, args)
    cpu1 = b.cpu()
    produced = time.monotonic()
    gb = p["bytes"] / 1e9
    r = {"on": on, "topic": topic, "load": load, "mb_s": p["mb_s"], "records": p["records"],
         "seconds": p["seconds"], "broker_cpu_s_per_gb": (cpu1[0] - cpu0[0]) / gb,
         "worker_cpu_s_per_gb": (cpu1[1] - cpu0[1]) / gb}
    if on:
        ends = end_offsets(b.bootstrap, topic, args.partitions)
        done = wait_covered(b.progress(topic), ends, WAIT_S)
        if done is None:
            raise RuntimeError(f"{topic}: the table did not catch up in {WAIT_S} s")
        cpu2 = b.cpu()
        r["caught_up_after_s"] = done - produced  # the table's wait after the producer finished
        r["broker_cpu_s_per_gb_caught_up"] = (cpu2[0] - cpu0[0]) / gb
        r["worker_cpu_s_per_gb_caught_up"] = (cpu2[1] - cpu0[1]) / gb
    return r


def part3(b: Broker, args) -> dict:
    runs = []
    for i in range(args.runs):
        for on in in_turn((False, True), i):
            r = produce_round(b, i, on, args)
            runs.append(r)
            extra = (f", to caught up: broker {r['broker_cpu_s_per_gb_caught_up']:.2f}, worker "
                     f"{r['worker_cpu_s_per_gb_caught_up']:.2f} CPU s/GB" if on else "")
            print(f"  3 run {i + 1} {'on ' if on else 'off'}: {r['mb_s']:7.1f} MB/s; during produce: broker "
                  f"{r['broker_cpu_s_per_gb']:.2f}, worker {r['worker_cpu_s_per_gb']:.2f} CPU s/GB{extra}; "
                  f"load {r['load']:.2f}", flush=True)
    med = {}
    for on, name in ((False, "off"), (True, "on")):
        xs = [r for r in runs if r["on"] == on]
        for k in ("mb_s", "broker_cpu_s_per_gb", "worker_cpu_s_per_gb") + (
                ("broker_cpu_s_per_gb_caught_up", "worker_cpu_s_per_gb_caught_up") if on else ()):
            med[f"{name}_{k}"] = statistics.median(x[k] for x in xs)
    med["on_over_off"] = med["on_mb_s"] / med["off_mb_s"]
    return {"runs": runs, "medians": med}


# ---- part 4: Spark over the table vs over the topic --------------------------------------------

def table_mode_missing() -> str | None:
    """Why the data source's table mode cannot be used here (None: it can)."""
    if not os.path.exists(os.path.join(SPARK_SOURCE, "pyspark_pybroker", "table.py")):
        return "spark_source/pyspark_pybroker/table.py is not there yet"
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed"
    return None


def spark_role(args) -> dict:
    """count() and a filtered aggregate through the table mode and the topic mode, in one session."""
    parts = [SPARK_SOURCE, ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))  # Spark's Python workers import from here
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    spark = (SparkSession.builder.master("local[2]").appName("bench-iceberg")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    reads = {
        "table": lambda: (spark.read.format("pybroker").option("table", f"{NAMESPACE}.{args.topic}")
                          .option("catalog.uri", f"sqlite:///{args.data_dir}/iceberg/catalog.db")
                          .option("warehouse", f"file://{args.data_dir}/iceberg/warehouse").load()),
        "topic": lambda: (spark.read.format("pybroker").option("kafka.bootstrap.servers", args.bootstrap)
                          .option("subscribe", args.topic).option("kafka.isolation.level", "read_committed")
                          .load()),
    }
    partition_of = {"table": lambda: F.col("kafka.partition"), "topic": lambda: F.col("partition")}

    def count(mode):
        return reads[mode]().count()

    def aggregate(mode):
        rows = (reads[mode]().where(F.length("value") > 100).groupBy(partition_of[mode]().alias("p"))
                .count().collect())
        return sorted((r["p"], r["count"]) for r in rows)

    queries = {"count": count, "aggregate": aggregate}
    times = {f"{q} {mode}": [] for q in queries for mode in reads}
    try:
        want = {}
        for q, fn in queries.items():  # untimed warm-up (Python workers, JIT); both modes must agree
            got = {mode: fn(mode) for mode in reads}
            if got["table"] != got["topic"]:
                raise RuntimeError(f"{q}: table {got['table']} != topic {got['topic']}")
            want[q] = got["table"]
        if want["count"] != args.records:
            raise RuntimeError(f"count {want['count']} != {args.records} records")
        for run in range(args.spark_runs):
            for mode in in_turn(tuple(reads), run):
                for q, fn in queries.items():
                    t0 = time.perf_counter()
                    got = fn(mode)
                    times[f"{q} {mode}"].append(time.perf_counter() - t0)
                    if got != want[q]:
                        raise RuntimeError(f"{q} {mode}: {got} != {want[q]}")
    finally:
        spark.stop()
    return {"records": args.records, "aggregate": want["aggregate"], "seconds": times,
            "medians": {k: statistics.median(v) for k, v in times.items()}}


def part4(b: Broker, topic: str, args) -> dict:
    records = sum(end_offsets(b.bootstrap, topic, args.partitions).values())
    r = run_json(__file__, "_spark", "--bootstrap", b.bootstrap, "--data-dir", b.data_dir, "--topic", topic,
                 "--records", str(records), "--spark-runs", str(args.spark_runs), timeout=3 * WAIT_S)
    for k, v in r["medians"].items():
        print(f"  4 {k:16}: median {v:.2f} s ({records / v:,.0f} rows/s) of {[round(x, 2) for x in r['seconds'][k]]}",
              flush=True)
    return {**r, "topic": topic}


def table_topic(b: Broker, args) -> str:
    """Part 4 alone: a topic of --translate-megabytes translated with target lag 1 s."""
    topic = "spark"
    create_topic(b.bootstrap, topic, args.partitions, {"iceberg.mode": "key_value",
                                                      "iceberg.target.lag.ms": str(FAST_LAG_MS)})
    produce(b.bootstrap, topic, args.translate_megabytes, args)
    if wait_covered(b.progress(topic), end_offsets(b.bootstrap, topic, args.partitions), WAIT_S) is None:
        raise RuntimeError(f"{topic}: the table did not catch up")
    return topic


# ---- the run -----------------------------------------------------------------------------------

def summary(results: dict, args) -> list[str]:
    """The figures as a table."""
    lines = [f"{'figure':58} {'value':>44}"]

    def row(name, value):
        lines.append(f"{name:58} {value:>44}")

    if "part1" in results:
        m = results["part1"]["medians"]
        row(f"1 translation into Parquet, {args.translate_megabytes} MB (median of {args.translate_runs})",
            f"{m['translate_records_s']:,.0f} rec/s {m['translate_mb_s']:7.1f} MB/s")
        row("1 plain consume, Consumer.poll_batch read_committed",
            f"{m['consume_records_s']:,.0f} rec/s {m['consume_mb_s']:7.1f} MB/s")
        row("1 translation / plain consume", f"{m['translate_over_consume']:.3f}")
        row("1 translation: worker / broker CPU s (median)",
            f"{m['translate_worker_cpu_s']:.1f} / {m['translate_broker_cpu_s']:.1f}")
    for ms, r in results.get("part2", {}).items():
        fmt = lambda v: "never" if v is None else f"{v:.2f}"  # noqa: E731
        row(f"2 produce-to-queryable, target lag {ms} ms, {r['offered_mb_s']:.1f} MB/s {r['seconds']:.0f} s",
            f"p50 {fmt(r['p50_s'])} s  p99 {fmt(r['p99_s'])} s  max {fmt(r['max_s'])} s")
    if "part3" in results:
        m = results["part3"]["medians"]
        row(f"3 produce, translation off ({args.megabytes} MB, median of {args.runs})",
            f"{m['off_mb_s']:7.1f} MB/s broker {m['off_broker_cpu_s_per_gb']:.2f} CPU s/GB")
        row(f"3 produce, translation on (target lag {args.on_target_lag_ms} ms)",
            f"{m['on_mb_s']:7.1f} MB/s broker {m['on_broker_cpu_s_per_gb']:.2f} CPU s/GB")
        row("3 produce on / off", f"{m['on_over_off']:.3f}")
        row("3 on: worker CPU s/GB during produce / to caught up",
            f"{m['on_worker_cpu_s_per_gb']:.2f} / {m['on_worker_cpu_s_per_gb_caught_up']:.2f}")
        row("3 on: broker CPU s/GB to caught up", f"{m['on_broker_cpu_s_per_gb_caught_up']:.2f}")
    if "part4" in results:
        r = results["part4"]
        if "skipped" in r:
            row("4 Spark", "skipped: " + r["skipped"])
        else:
            m, n = r["medians"], r["records"]
            for q in ("count", "aggregate"):
                row(f"4 Spark {q}: table / topic (s, median of {args.spark_runs})",
                    f"{m[f'{q} table']:.2f} / {m[f'{q} topic']:.2f} ({n / m[f'{q} table']:,.0f} / "
                    f"{n / m[f'{q} topic']:,.0f} rows/s)")
                row(f"4 Spark {q}: topic time / table time", f"{m[f'{q} topic'] / m[f'{q} table']:.2f}")
    return lines


def knobs(args) -> dict:
    return {"producer": PRODUCER, "record_bytes": args.size, "values": "random bytes (incompressible)",
            "keys": "none", "partitions": args.partitions,
            "plain_consumer": PLAIN_CONSUMER, "broker_overrides": BROKER_OVERRIDES, "table_poll_s": POLL_S,
            "translation_target_lag_ms": FAST_LAG_MS, "cpus": os.cpu_count()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="1,2,3,4")
    ap.add_argument("--out", default=None, help="write every run's figures and the medians to this JSON file")
    ap.add_argument("--partitions", type=int, default=PARTITIONS)
    ap.add_argument("--size", type=int, default=RECORD, help="record value bytes")
    ap.add_argument("--translate-megabytes", type=float, default=500, help="part 1 (and 4 alone)")
    ap.add_argument("--translate-runs", type=int, default=3, help="part 1")
    ap.add_argument("--lag-rate-mb", type=float, default=20, help="part 2: MB/s offered")
    ap.add_argument("--lag-seconds", type=float, default=120, help="part 2, target lag 60000 ms")
    ap.add_argument("--fast-lag-seconds", type=float, default=30, help="part 2, target lag 1000 ms")
    ap.add_argument("--megabytes", type=float, default=300, help="part 3, per round")
    ap.add_argument("--runs", type=int, default=5, help="part 3: rounds of each of off and on")
    ap.add_argument("--on-target-lag-ms", type=int, default=DEFAULT_LAG_MS, help="part 3 'on' topics")
    ap.add_argument("--spark-runs", type=int, default=3, help="part 4")
    # child processes
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--ends", help=argparse.SUPPRESS)
    ap.add_argument("--rate-mb", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--acks-file", help=argparse.SUPPRESS)
    ap.add_argument("--data-dir", help=argparse.SUPPRESS)
    ap.add_argument("--records", type=int, help=argparse.SUPPRESS)
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        role = sys.argv.pop(1)
        args = ap.parse_args()
        if role == "_plain_consume":
            out = plain_consume_role(args.bootstrap, args.topic, {int(p): e for p, e in json.loads(args.ends).items()})
        elif role == "_produce":
            out = produce_role(args)
        elif role == "_paced_produce":
            out = paced_produce_role(args)
        else:
            out = spark_role(args)
        print(json.dumps(out), flush=True)
        return
    args = ap.parse_args()
    parts = {int(p) for p in args.parts.split(",") if p}
    results = {"args": vars(args), "knobs": knobs(args)}
    print(f"load {os.getloadavg()}; {os.cpu_count()} CPUs; parts {sorted(parts)}")
    print(f"producer (confluent-kafka, every part): {PRODUCER}; record value {args.size} B of random bytes "
          f"(incompressible), no key, {args.partitions} partitions round-robin")
    print(f"plain consumer (pybroker Consumer.poll_batch, part 1): {PLAIN_CONSUMER}")
    print(f"broker: defaults{' + ' + str(BROKER_OVERRIDES) if BROKER_OVERRIDES else ''}; table polled every "
          f"{POLL_S * 1000:.0f} ms", flush=True)

    def save():
        if args.out:
            with open(args.out, "w") as f:
                json.dump(results, f, indent=2)

    if parts & {1, 4}:
        with Broker() as b:
            if 1 in parts:
                results["part1"], topic = part1(b, args)
                save()
            if 4 in parts:
                missing = table_mode_missing()
                if missing:
                    print(f"  4 skipped: {missing}", flush=True)
                    results["part4"] = {"skipped": missing}
                else:
                    results["part4"] = part4(b, topic if 1 in parts else table_topic(b, args), args)
                save()
    if 2 in parts:
        with Broker() as b:
            results["part2"] = part2(b, args)
        save()
    if 3 in parts:
        with Broker() as b:
            results["part3"] = part3(b, args)
        save()
    print(f"\nload average now {os.getloadavg()[0]:.2f}")
    print("\n".join(summary(results, args)))


if __name__ == "__main__":
    main()

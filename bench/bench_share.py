"""Share groups (KIP-932) next to a KIP-848 consumer group: throughput, delivery latency and the broker's
CPU per 1 000 records, in one run against one fresh ``pybroker serve``.

    python bench/bench_share.py [--records 200000] [--size 100] [--runs 3] [--share 1,4,16] [--group 1,4,16]
                                [--latency-rate 1000] [--latency-seconds 20] [--latency-runs 1]
                                [--latency-consumers 4] [--run-timeout 180] [--broker-override KEY=VALUE ...]
                                [--out bench/results/share.json]
    python bench/bench_share.py --smoke      (or BENCH_SHARE_SMOKE=1): tiny sizes, to check the tool runs

The broker is tests.broker.BrokerProcess (its own data dir, an ephemeral port, stopped by PID) with
BROKER_OVERRIDES: both group kinds heartbeat every second (instead of 5 s) so groups settle quickly
between runs, and /metrics is on so the broker's own share-partition counters can be read. Every
consumer is its own process (confluent-kafka 2.16 / librdkafka: ``ShareConsumer`` for the share group,
``Consumer`` with ``group.protocol=consumer`` for the consumer group), with the knobs in SHARE_CONSUMER
and GROUP_CONSUMER (printed, and in the JSON); both read committed records only (librdkafka's default
for a consumer; the share group gets ``share.isolation.level=read_committed`` and
``share.auto.offset.reset=earliest``, SHARE_GROUP_CONFIG). A share consumer's loop is ``poll(POLL_S)``; a
consumer-group member's ``consume(MAX_POLL, 0)``, else ``poll(POLL_S)`` (consume() with a timeout waits
to fill its batch, which would add up to POLL_S to every latency).

Each run has a fresh topic of 4 partitions and a fresh group; its consumers subscribe, poll, and the
group settles (share: ShareGroupDescribe says Stable, every member holding partitions, every partition
held; consumer group: every partition held by one member as its callbacks say, none holding more than
its share, ConsumerGroupDescribe Stable with every member) before there is anything to read. Then "go".

1. Throughput: before the consumers start, a producer process (PRODUCER knobs) writes ``--records``
   records of ``--size`` bytes round-robin in ONE transaction, flushed but not committed; at "go" it
   commits, and every record becomes readable at once (the markers wake the waiting fetches). So the
   records are all in the log before the clock starts, yet no client can fetch early; gating on the
   client side (pause, seek) left librdkafka's consumers starting up to a second apart. Records/s =
   records / (last record received - first record received, over all consumers, CLOCK_REALTIME in each
   process); "go->last" is from "go". Each run checks that every (partition, offset) was received
   exactly once and, for share groups, reads the broker's counters (/metrics: acquisitions,
   acknowledged, releases, archivals) after every consumer has committed its last acknowledgements
   (implicit mode: a poll's records are accepted with the next ShareFetch, the last poll's by
   ``commit_sync``). Consumer-group members commit their offsets synchronously at the end. 16 members
   of a consumer group leave 12 idle (4 partitions). Medians of ``--runs`` runs per (kind, consumers);
   the configurations take turns within each run.
2. Latency: from "go", a producer process sends ``--latency-rate`` records/s for ``--latency-seconds``
   (LATENCY_PRODUCER knobs, round-robin, no transaction), each value starting with its CLOCK_REALTIME
   send time; ``--latency-consumers`` consumers of a share group and of a consumer group (in turns)
   note, per record, the time its poll returned minus that. p50/p99/max over the records sent from one
   second after "go" on.
3. Broker CPU: /proc/<broker pid>/stat utime+stime from "go" until every consumer of a run has
   committed, per 1 000 records acknowledged (share group: the broker's acknowledged counter) or
   consumed (consumer group). Its 10 ms ticks are coarse next to a consumer group's few tens of ms per
   run, so the sum of the broker threads' /proc/<pid>/task/*/schedstat run times (ns) is shown too.
   For the latency runs the broker's CPU includes taking the produced records.
Anything odd is counted and shown, not hidden ("anomalies"): duplicate or missing records, redeliveries
(delivery count > 1), ShareFetch responses librdkafka could not parse and dropped (counted in its
stderr), client errors; and each run's longest gap between two records received by one consumer.
"""
import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from array import array

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
for _path in (ROOT, BENCH):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from measure import cpu_seconds, in_turn, run_json  # noqa: E402
from scratch_broker import ScratchBroker  # noqa: E402

CLIENTS = os.path.join(BENCH, "cluster_clients.py")
PARTITIONS = 4
HEARTBEAT_MS = 1000
BROKER_OVERRIDES = {"group.consumer.heartbeat.interval.ms": HEARTBEAT_MS,
                    "group.consumer.min.heartbeat.interval.ms": HEARTBEAT_MS,
                    "group.share.heartbeat.interval.ms": HEARTBEAT_MS,
                    "group.share.min.heartbeat.interval.ms": HEARTBEAT_MS}  # + log.dirs, listener, metrics.listener
# the pre-fill, one transaction: Kafka's default batch size (16 KB: about 140 records of 100 B a batch)
PRODUCER = {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "batch.size": 16384,
            "batch.num.messages": 10000, "compression.type": "none", "queue.buffering.max.kbytes": 1048576,
            "queue.buffering.max.messages": 1000000}  # + transactional.id
LATENCY_PRODUCER = {**PRODUCER, "enable.idempotence": False, "linger.ms": 0}  # each record sent when it is due
FETCH = {"fetch.wait.max.ms": 500, "fetch.min.bytes": 1, "fetch.max.bytes": 52428800,
         "max.partition.fetch.bytes": 1048576}
MAX_POLL = 500  # records a poll returns at most, both kinds
SHARE_CONSUMER = {**FETCH, "max.poll.records": MAX_POLL, "share.acknowledgement.mode": "implicit"}
SHARE_GROUP_CONFIG = {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"}
# fetch.queue.backoff.ms 0: else librdkafka (2.x default 1000) waits a whole second before fetching again a
# partition whose local queue went over its thresholds while the Python loop lagged (a ShareConsumer has no
# such queue and refuses the key)
GROUP_CONSUMER = {**FETCH, "group.protocol": "consumer", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": True, "auto.commit.interval.ms": 5000,
                  "fetch.queue.backoff.ms": 0}
POLL_S = 0.1  # poll timeout in the consumer loops (consumer group: consume(MAX_POLL, 0), else poll(POLL_S))
SETTLE_S = 60  # bound on a group settling
LATENCY_WARMUP_S = 1.0  # records sent in the first second are left out of the latency figures
PARSE_FAILURE = "response parse failure"  # librdkafka's log line when it drops a ShareFetch response
SMOKE = {"records": 2000, "runs": 1, "share": "1,2", "group": "1,2", "latency_rate": 200, "latency_seconds": 2.0,
         "latency_runs": 1, "latency_consumers": 2}


# ---- the broker --------------------------------------------------------------------------------

class Broker(ScratchBroker):
    """A fresh ``pybroker serve`` with /metrics on."""

    def __init__(self, extra: dict):
        from tests.cluster import free_ports
        self.metrics_port = free_ports(1)[0]
        self.overrides = {**BROKER_OVERRIDES, **extra}
        super().__init__("pybroker-bench-share-", {
            **self.overrides, "metrics.listener": f"http://127.0.0.1:{self.metrics_port}"})

    def cpu(self) -> tuple[float, float]:
        """(utime+stime from /proc/<pid>/stat, in 10 ms ticks; the sum of its threads' schedstat run times,
        to the nanosecond but missing threads that ended in between), in seconds."""
        pid = self.pid
        ns = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    ns += int(f.read().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                pass
        return cpu_seconds(pid), ns / 1e9

    def share_counters(self, group: str) -> dict:
        """The group's share-partition counters on /metrics, summed over its partitions."""
        from tests.broker.test_metrics import scrape
        out = {}
        for (name, labels), value in scrape(self.metrics_port).items():
            if name.startswith("pybroker_share_partition_") and dict(labels).get("group") == group:
                key = name[len("pybroker_share_partition_"):]
                out[key] = out.get(key, 0) + int(value)
        return out

    def share_group_settled(self, group: str, members: int) -> bool | None:
        """Every member joined, holds partitions, all partitions held, group Stable (ShareGroupDescribe);
        None: the broker does not serve ShareGroupDescribe."""
        from pybroker.protocol.messages import REQUESTS
        from tests.kafka_wire import WireClient
        with WireClient(self.port) as w:
            if 77 not in {k.api_key for k in w.api_versions().api_keys}:
                return None
            g = w.request(REQUESTS[77](group_ids=[group], include_authorized_operations=False), 1).groups[0]
        held = {p for m in g.members for t in m.assignment.topic_partitions for p in t.partitions}
        # member epochs are not compared: a member whose assignment did not change keeps its older epoch
        return (g.error_code == 0 and g.group_state == "Stable" and g.group_epoch == g.assignment_epoch
                and len(g.members) == members and all(m.assignment.topic_partitions for m in g.members)
                and held == set(range(PARTITIONS)))


def create_topic(b: Broker, topic: str) -> None:
    run_json(CLIENTS, "create-topic", "--bootstrap", b.bootstrap, "--topic", topic, "--partitions", str(PARTITIONS))


def start_fill(b: Broker, topic: str, args, workdir: str) -> "Child":
    """A producer process that writes ``--records`` records in one transaction and commits it when told."""
    filler = Child(["_fill", "--bootstrap", b.bootstrap, "--topic", topic, "--records", str(args.records),
                    "--size", str(args.size)], workdir, "fill")
    if not wait_until([filler], lambda: filler.state.get("filled") is not None, 300, "filling"):
        raise RuntimeError(f"the pre-fill of {topic} did not finish in 300 s")
    f = filler.state["filled"]
    if f["errors"] or f["n"] != args.records:
        raise RuntimeError(f"pre-fill: {f['n']} of {args.records} acknowledged, {f['errors']} errors "
                           f"({f['first_error']})")
    return filler


# ---- consumer processes, seen from here --------------------------------------------------------

class Child:
    """A consumer (or the filling producer) process: JSON lines out (its events), words in (go, stop,
    close; commit)."""

    def __init__(self, argv: list, workdir: str, name: str):
        self.stderr_path = os.path.join(workdir, name + ".stderr")
        self.prefix = os.path.join(workdir, name)
        self._err = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([sys.executable, __file__, *argv, "--files", self.prefix],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True)
        self.state = {"event": "starting", "n": 0, "partitions": None, "result": None, "stopped": None,
                      "subscribed": None}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            kind = e["event"]
            if kind == "assigned":
                self.state["partitions"] = e["partitions"]
            elif kind != "progress":
                self.state[kind] = e
            if "n" in e:
                self.state["n"] = e["n"]

    def send(self, word: str) -> None:
        try:
            self.proc.stdin.write(word + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def failed(self) -> str | None:
        if self.proc.poll() not in (None, 0):
            return f"{os.path.basename(self.prefix)} exited with {self.proc.returncode}: {self.stderr()[-2000:]}"
        return None

    def stderr(self) -> str:
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def read_array(self, suffix: str, code: str) -> array:
        a = array(code)
        path = self.prefix + suffix
        with open(path, "rb") as f:
            a.frombytes(f.read())
        return a

    def finish(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        self._err.close()


def wait_until(children: list, done, timeout: float, what: str) -> bool:
    """Poll ``done()`` every 20 ms until it holds; raise if a child died; False on timeout."""
    deadline = time.monotonic() + timeout
    while not done():
        for c in children:
            if (why := c.failed()) is not None:
                raise RuntimeError(f"{what}: {why}")
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def group_settled(b: Broker, group: str, children: list) -> bool:
    """Consumer group: every member joined and the group Stable (ConsumerGroupDescribe), every partition
    held by exactly one member (as its callbacks said), none holding more than its share."""
    held = [c.state["partitions"] or [] for c in children]  # a member given nothing hears of no assignment
    flat = [p for h in held for p in h]
    fair = -(-PARTITIONS // len(children))
    if sorted(flat) != list(range(PARTITIONS)) or max(len(h) for h in held) > fair:
        return False
    from pybroker.protocol.messages import REQUESTS
    from tests.kafka_wire import WireClient
    with WireClient(b.port) as w:
        g = w.request(REQUESTS[69](group_ids=[group]), 0).groups[0]
    return g.error_code == 0 and g.group_state == "Stable" and len(g.members) == len(children)


def settle(b: Broker, kind: str, group: str, children: list) -> float:
    """Wait until the group has settled; the seconds it took."""
    t0 = time.monotonic()
    if kind == "group":
        ok = wait_until(children, lambda: group_settled(b, group, children), SETTLE_S, "settling")
    else:
        known = b.share_group_settled(group, len(children))
        if known is None:  # no ShareGroupDescribe: three heartbeats
            time.sleep(3 * HEARTBEAT_MS / 1000)
            ok = True
        else:
            ok = wait_until(children, lambda: b.share_group_settled(group, len(children)), SETTLE_S, "settling")
    if not ok:
        raise RuntimeError(f"{kind} group {group} of {len(children)} did not settle in {SETTLE_S} s: "
                           f"{[c.state['partitions'] for c in children]}")
    return time.monotonic() - t0


def parse_failures(children: list) -> int:
    return sum(c.stderr().count(PARSE_FAILURE) for c in children)


def consumer_run(b: Broker, kind: str, k: int, topic: str, args, latency: bool = False) -> dict:
    """One run of ``k`` consumers of a fresh group of ``kind`` ("share" or "group") reading a fresh
    ``topic``: throughput, all of ``--records`` records written in one transaction before the consumers
    start and committed at "go"; latency, the paced producer's records, sent from "go" on."""
    from tests.shareutil import set_group_config
    group = f"bench-{kind}-{k}-{uuid.uuid4().hex[:8]}"
    create_topic(b, topic)
    if kind == "share":
        set_group_config(b.port, group, SHARE_GROUP_CONFIG)
    conf = SHARE_CONSUMER if kind == "share" else GROUP_CONSUMER
    workdir = tempfile.mkdtemp(prefix="bench-share-run-")
    argv = ["_consume", "--kind", kind, "--bootstrap", b.bootstrap, "--topic", topic,
            "--group-id", group, "--config", json.dumps(conf)] + (["--latency"] if latency else [])
    children, filler = [], None
    try:
        total = None
        if not latency:
            filler = start_fill(b, topic, args, workdir)
            total = args.records
        children = [Child(argv, workdir, f"c{i}") for i in range(k)]
        if not wait_until(children, lambda: all(c.state["subscribed"] for c in children), 60, "subscribing"):
            raise RuntimeError("consumers did not subscribe in 60 s")
        settle_s = settle(b, kind, group, children)
        load = os.getloadavg()[0]
        cpu0 = b.cpu()
        go = time.time()
        for c in children:
            c.send("go")
        if filler is not None:
            filler.send("commit")
        produced = None
        if filler is not None and not wait_until([filler], lambda: filler.state.get("committed"), 60, "committing"):
            raise RuntimeError(f"the pre-fill of {topic} was not committed in 60 s")
        if latency:
            produced = run_json(__file__, "_paced", "--bootstrap", b.bootstrap, "--topic", topic, "--rate",
                                str(args.latency_rate), "--seconds", str(args.latency_seconds), "--size",
                                str(args.size), timeout=args.latency_seconds + 120)
            total = produced["acked"]
        complete = wait_until(children, lambda: sum(c.state["n"] for c in children) >= total, args.run_timeout,
                              "consuming")
        for c in children:
            c.send("stop")
        if not wait_until(children, lambda: all(c.state["stopped"] for c in children), 60, "stopping"):
            raise RuntimeError("consumers did not stop in 60 s")
        cpu1 = b.cpu()
        cpu, sched = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
        counters = b.share_counters(group) if kind == "share" else {}
        for c in children:
            c.send("close")
        if not wait_until(children, lambda: all(c.state["result"] for c in children), 60, "closing"):
            raise RuntimeError("consumers did not close in 60 s")
        results = [c.state["result"] for c in children]
        keys = set()
        for c in children:
            parts, offsets = c.read_array(".parts", "i"), c.read_array(".offsets", "q")
            keys.update((p << 40) | o for p, o in zip(parts, offsets))
        received = sum(r["n"] for r in results)
        first = min((r["first"] for r in results if r["first"] is not None), default=None)
        last = max((r["last"] for r in results if r["last"] is not None), default=None)
        seconds = (last - first) if first is not None else None
        r = {"kind": kind, "consumers": k, "group": group, "records": total, "unique": len(keys),
             "received": received, "duplicates": received - len(keys), "missing": total - len(keys),
             "complete": complete, "seconds": seconds, "go_to_last_s": last - go if last is not None else None,
             "records_s": total / seconds if seconds else None, "settle_s": settle_s, "load": load,
             "longest_gap_s": max(r["gap"] for r in results),
             "broker_cpu_s": cpu, "broker_sched_cpu_s": sched, "per_consumer": sorted(r["n"] for r in results),
             "redelivered": sum(r["redelivered"] for r in results),
             "errors": sum(r["errors"] for r in results),
             "first_error": next((r["first_error"] for r in results if r["first_error"]), ""),
             "commit_errors": sum(r["commit_errors"] for r in results),
             "early": sum(r["early"] for r in results), "dropped_responses": parse_failures(children),
             "commit_s": filler.state["committed"]["seconds"] if filler is not None else None}
        if kind == "share":
            r["broker"] = counters
            r["acknowledged"] = counters.get("acknowledged_total")
        else:
            r["acknowledged"] = len(keys)  # consumed once each and committed
        done = r["acknowledged"] or 0
        r["cpu_ms_per_1000"] = cpu * 1e6 / done if done else None
        r["sched_cpu_ms_per_1000"] = sched * 1e6 / done if done else None
        if latency:
            lat = array("d")
            for c in children:
                lat.extend(c.read_array(".latency", "d"))
            r.update(latency_figures(lat, produced))
        return r
    finally:
        for c in children + ([filler] if filler is not None else []):
            c.finish()
        shutil.rmtree(workdir, ignore_errors=True)


def latency_figures(lat: array, produced: dict) -> dict:
    values = sorted(lat)
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))] * 1000 if values else None  # noqa: E731
    return {"sent": produced["sent"], "produce_errors": produced["errors"], "offered_s": produced["offered_s"],
            "timed": len(values), "p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": values[-1] * 1000
            if values else None}


# ---- child processes ---------------------------------------------------------------------------

def consume_role(args) -> None:
    """A consumer: subscribe and poll until "stop" ("go" marks the start); then commit its acknowledgements
    or offsets, and on "close" close and write what it received (.parts, .offsets, .latency files) and
    its result."""
    from confluent_kafka import Consumer, KafkaException, ShareConsumer
    words = {w: threading.Event() for w in ("go", "stop", "close")}

    def commands():
        for line in sys.stdin:
            if line.strip() in words:
                words[line.strip()].set()
        for e in words.values():  # the parent is gone
            e.set()
    threading.Thread(target=commands, daemon=True).start()

    def emit(**kv):
        print(json.dumps(kv), flush=True)

    conf = {"bootstrap.servers": args.bootstrap, "group.id": args.group, **json.loads(args.config)}
    parts, offsets, lat = array("i"), array("q"), array("d")
    st = {"n": 0, "first": None, "last": None, "gap": 0.0, "redelivered": 0, "errors": 0, "first_error": "",
          "early": 0, "started": False, "reported": 0, "at": 0.0, "warm_until": None}
    share = args.kind == "share"

    def take(msgs):
        now = time.time()
        got = 0
        for m in msgs:
            if m.error() is not None:
                st["errors"] += 1
                st["first_error"] = st["first_error"] or str(m.error())
                continue
            got += 1
            parts.append(m.partition())
            offsets.append(m.offset())
            if share and (m.delivery_count() or 1) > 1:
                st["redelivered"] += 1
            if args.latency:
                sent = struct.unpack_from(">d", m.value())[0]
                if st["warm_until"] is not None and sent >= st["warm_until"]:
                    lat.append(now - sent)
        if got:
            st["n"] += got
            st["first"] = st["first"] or now
            if st["last"] is not None:
                st["gap"] = max(st["gap"], now - st["last"])
            st["last"] = now
            if not st["started"]:
                st["early"] += got
        if st["n"] != st["reported"] and time.monotonic() - st["at"] >= 0.1:
            st["reported"], st["at"] = st["n"], time.monotonic()
            emit(event="progress", n=st["n"])

    if share:
        c = ShareConsumer(conf)
        c.subscribe([args.topic])
        emit(event="subscribed")

        def fetch():
            take(c.poll(POLL_S))
    else:
        held = set()

        def on_assign(consumer, tps):  # the client assigns them when this returns
            held.update(tp.partition for tp in tps)
            emit(event="assigned", partitions=sorted(held))

        def on_revoke(consumer, tps):
            held.difference_update(tp.partition for tp in tps)
            emit(event="assigned", partitions=sorted(held))
        c = Consumer(conf)
        c.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        emit(event="subscribed")

        def fetch():  # what is queued, else wait for one (consume() would wait to fill MAX_POLL or time out)
            msgs = c.consume(MAX_POLL, 0)
            if not msgs:
                m = c.poll(POLL_S)
                msgs = [m] if m is not None else []
            take(msgs)
    while not words["go"].is_set():  # nothing is there to read yet: the group settles
        fetch()
    st["started"] = True
    st["warm_until"] = time.time() + LATENCY_WARMUP_S  # the paced producer starts after "go"
    while not words["stop"].is_set():
        fetch()
    commit_errors = 0
    try:
        if share:
            commit_errors = sum(1 for r in (c.commit_sync(30) or {}).values() if r is not None)
        elif st["n"]:
            c.commit(asynchronous=False)
    except KafkaException as exc:
        commit_errors += 1
        st["first_error"] = st["first_error"] or f"commit: {exc}"
    emit(event="stopped", n=st["n"])
    words["close"].wait()
    c.close()
    for suffix, a in ((".parts", parts), (".offsets", offsets), (".latency", lat)):
        with open(args.files + suffix, "wb") as f:
            a.tofile(f)
    emit(event="result", n=st["n"], first=st["first"], last=st["last"], gap=st["gap"], redelivered=st["redelivered"],
         errors=st["errors"], first_error=st["first_error"], early=st["early"], commit_errors=commit_errors)


def fill_role(args) -> None:
    """``--records`` records round-robin in one transaction, flushed; committed on "commit"."""
    from confluent_kafka import Producer

    from cluster_clients import delivery_tally, send_blocking
    p = Producer({"bootstrap.servers": args.bootstrap, **PRODUCER,
                  "transactional.id": f"bench-share-fill-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(60)
    p.begin_transaction()
    value = (bytes(range(256)) * (args.size // 256 + 1))[:args.size]
    state, delivered = delivery_tally()
    start = time.perf_counter()
    deadline = time.monotonic() + 300
    for i in range(args.records):
        send_blocking(p, args.topic, value, i % PARTITIONS, delivered, deadline)
        if i % 10000 == 0:
            p.poll(0)
    p.flush(300)
    print(json.dumps({"event": "filled", "n": state["ok"], "errors": state["failed"],
                      "first_error": state["first_error"], "seconds": time.perf_counter() - start}), flush=True)
    for line in sys.stdin:
        if line.strip() == "commit":
            break
    t0 = time.perf_counter()
    p.commit_transaction(60)
    print(json.dumps({"event": "committed", "seconds": time.perf_counter() - t0}), flush=True)


def paced_role(args) -> dict:
    """``--rate`` records/s for ``--seconds``, round-robin; each value starts with its CLOCK_REALTIME send time."""
    from confluent_kafka import Producer

    from cluster_clients import delivery_tally, send_blocking
    p = Producer({"bootstrap.servers": args.bootstrap, **LATENCY_PRODUCER})
    p.list_topics(args.topic, timeout=30)  # metadata before the clock
    state, delivered = delivery_tally()
    pad = b"\0" * max(0, args.size - 8)
    start = time.monotonic()
    sent = 0
    while (elapsed := time.monotonic() - start) < args.seconds:
        for _ in range(max(int(args.rate * elapsed) - sent, 0)):  # paced by elapsed time: overshoots catch up
            send_blocking(p, args.topic, struct.pack(">d", time.time()) + pad, sent % PARTITIONS, delivered,
                          start + args.seconds + 30)
            sent += 1
        p.poll(0)
        time.sleep(0.0005)
    offered = time.monotonic() - start
    p.flush(60)
    return {"sent": sent, "acked": state["ok"], "errors": state["failed"], "first_error": state["first_error"],
            "offered_s": offered}


# ---- the run -----------------------------------------------------------------------------------

def run_line(r: dict) -> str:
    odd = [f"{k} {r[k]}" for k in ("duplicates", "missing", "redelivered", "dropped_responses", "errors",
                                   "commit_errors") if r.get(k)]
    if not r["complete"]:
        odd.append("INCOMPLETE")
    rate = f"{r['records_s']:9,.0f} rec/s" if r["records_s"] else "        - rec/s"
    cpu = (f"{r['cpu_ms_per_1000']:.2f} ({r['sched_cpu_ms_per_1000']:.3f} schedstat)"
           if r["cpu_ms_per_1000"] is not None else "-")
    extra = ""
    if "p50_ms" in r and r["p50_ms"] is not None:
        extra = f" p50 {r['p50_ms']:.1f} ms p99 {r['p99_ms']:.1f} ms max {r['max_ms']:.1f} ms;"
    return (f"{r['kind']:5} x{r['consumers']:<2}: {rate} ({r['unique']} of {r['records']} in "
            f"{(r['seconds'] or 0):.2f} s, last {(r['go_to_last_s'] or 0):.2f} s after go);{extra} broker {cpu} "
            f"CPU-ms/1000; longest gap {r['longest_gap_s']:.2f} s; per consumer {r['per_consumer']}; "
            f"settled in {r['settle_s']:.1f} s; load {r['load']:.1f}" + (f"; {', '.join(odd)}" if odd else ""))


def anomalies(r: dict) -> int:
    """Records duplicated, missing or redelivered, responses dropped, client errors: 0 when all is well."""
    return sum(r[k] for k in ("duplicates", "missing", "redelivered", "dropped_responses", "errors",
                              "commit_errors"))


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def throughput(b: Broker, args) -> dict:
    configs = [("share", k) for k in args.share] + [("group", k) for k in args.group]
    runs = []
    for i in range(args.runs):
        for kind, k in in_turn(configs, i):
            r = consumer_run(b, kind, k, f"bench-share-{i}-{kind}-{k}", args)
            runs.append(r)
            print(f"  1 run {i + 1} {run_line(r)}", flush=True)
    medians = {}
    for kind, k in configs:
        xs = [r for r in runs if (r["kind"], r["consumers"]) == (kind, k)]
        medians[f"{kind} {k}"] = {key: med(x[key] for x in xs) for key in
                                  ("records_s", "seconds", "go_to_last_s", "cpu_ms_per_1000",
                                   "sched_cpu_ms_per_1000", "broker_cpu_s", "settle_s")}
        medians[f"{kind} {k}"]["anomalies"] = sum(anomalies(x) for x in xs)
    return {"runs": runs, "medians": medians}


def latency(b: Broker, args) -> dict:
    runs = []
    for i in range(args.latency_runs):
        for kind in in_turn(("share", "group"), i):
            topic = f"bench-share-latency-{i}-{kind}"  # empty: the group reads only the paced records
            r = consumer_run(b, kind, args.latency_consumers, topic, args, latency=True)
            runs.append(r)
            print(f"  2 run {i + 1} {run_line(r)}", flush=True)
    medians = {kind: {key: med(x[key] for x in runs if x["kind"] == kind)
                      for key in ("p50_ms", "p99_ms", "max_ms", "sched_cpu_ms_per_1000")}
               for kind in ("share", "group")}
    for kind in medians:
        medians[kind]["anomalies"] = sum(anomalies(x) for x in runs if x["kind"] == kind)
    return {"runs": runs, "medians": medians}


def fmt(v, spec: str, unit: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{unit}"


def ratio(a, b) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def table(results: dict, args) -> list[str]:
    """Medians as a table: throughput and broker CPU per configuration, then the latency runs."""
    t = results["throughput"]["medians"]
    lines = [f"1/3  {args.records} records of {args.size} B, 4 partitions, median of {args.runs} runs",
             f"{'':22} {'records/s':>11} {'first->last':>12} {'go->last':>9} {'broker CPU ms / 1000 rec':>25} "
             f"{'anomalies':>10}",
             f"{'':22} {'':>11} {'s':>12} {'s':>9} {'stat':>12} {'schedstat':>12} {'(all runs)':>10}"]
    for name, m in t.items():
        kind, k = name.split()
        label = f"{'share group' if kind == 'share' else 'consumer group'} x{k}"
        lines.append(f"{label:22} {fmt(m['records_s'], ',.0f'):>11} {fmt(m['seconds'], '.2f'):>12} "
                     f"{fmt(m['go_to_last_s'], '.2f'):>9} {fmt(m['cpu_ms_per_1000'], '.2f'):>12} "
                     f"{fmt(m['sched_cpu_ms_per_1000'], '.3f'):>12} {m['anomalies']:>10}")
    for k in (k for k in args.share if k in args.group):
        sg, g = t[f"share {k}"], t[f"group {k}"]
        lines.append(f"share / consumer group x{k}: records/s {ratio(sg['records_s'], g['records_s'])}, broker CPU "
                     f"per record {ratio(sg['cpu_ms_per_1000'], g['cpu_ms_per_1000'])} (stat), "
                     f"{ratio(sg['sched_cpu_ms_per_1000'], g['sched_cpu_ms_per_1000'])} (schedstat)")
    if "latency" in results:
        lat = results["latency"]["medians"]
        lines.append(f"2    latency, {args.latency_rate:.0f} rec/s for {args.latency_seconds:.0f} s, "
                     f"{args.latency_consumers} consumers, median of {args.latency_runs} run(s)")
        for kind in ("share", "group"):
            m = lat[kind]
            lines.append(f"  {'share group' if kind == 'share' else 'consumer group':16} p50 "
                         f"{fmt(m['p50_ms'], '.1f', ' ms'):>10}  p99 {fmt(m['p99_ms'], '.1f', ' ms'):>10}  max "
                         f"{fmt(m['max_ms'], '.1f', ' ms'):>10}  broker CPU {fmt(m['sched_cpu_ms_per_1000'], '.1f')} "
                         f"ms / 1000 rec (schedstat, producing them included)  anomalies {m['anomalies']}")
    return lines


def knobs(args, b: Broker) -> dict:
    import confluent_kafka
    return {"producer": PRODUCER, "latency_producer": LATENCY_PRODUCER, "share_consumer": SHARE_CONSUMER,
            "share_group_config": SHARE_GROUP_CONFIG,
            "group_consumer": GROUP_CONSUMER, "max_poll_records": MAX_POLL, "poll_timeout_s": POLL_S,
            "broker_overrides": b.overrides, "partitions": PARTITIONS, "record_bytes": args.size,
            "consumers": "one process each", "confluent_kafka": confluent_kafka.version(),
            "librdkafka": confluent_kafka.libversion()[0], "cpus": os.cpu_count()}


def parse_counts(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200000, help="records pre-filled for the throughput runs")
    ap.add_argument("--size", type=int, default=100, help="record value bytes")
    ap.add_argument("--runs", type=int, default=3, help="throughput runs of each configuration")
    ap.add_argument("--share", default="1,4,16", help="share-group sizes")
    ap.add_argument("--group", default="1,4,16", help="consumer-group sizes")
    ap.add_argument("--latency-rate", type=float, default=1000)
    ap.add_argument("--latency-seconds", type=float, default=20)
    ap.add_argument("--latency-runs", type=int, default=1)
    ap.add_argument("--latency-consumers", type=int, default=4)
    ap.add_argument("--run-timeout", type=float, default=180, help="bound on one run's consuming")
    ap.add_argument("--broker-override", action="append", default=[], metavar="KEY=VALUE",
                    help="another broker setting (default: only BROKER_OVERRIDES)")
    ap.add_argument("--smoke", action="store_true", default=bool(os.environ.get("BENCH_SHARE_SMOKE")),
                    help="tiny sizes (also BENCH_SHARE_SMOKE=1)")
    ap.add_argument("--out", default=os.path.join(BENCH, "results", "share.json"))
    # child processes
    ap.add_argument("--kind", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--group-id", dest="group_id", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--latency", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--files", help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        role = sys.argv.pop(1)
        args = ap.parse_args()
        if role == "_consume":
            args.group = args.group_id
            consume_role(args)
        elif role == "_fill":
            fill_role(args)
        else:
            print(json.dumps(paced_role(args)))
        return
    args = ap.parse_args()
    if args.smoke:
        for k, v in SMOKE.items():
            setattr(args, k, v)
    args.share, args.group = parse_counts(args.share), parse_counts(args.group)
    extra = dict(kv.split("=", 1) for kv in args.broker_override)
    with Broker(extra) as b:
        k = knobs(args, b)
        print("knobs:", json.dumps(k), flush=True)
        results = {"knobs": k, "throughput": throughput(b, args)}
        if args.latency_runs > 0:
            results["latency"] = latency(b, args)
    lines = table(results, args)
    print("\n".join(lines))
    results["table"] = lines
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

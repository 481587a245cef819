"""Consumer groups (KIP-848) next to classic groups: heartbeat cost and how fast a group settles.

    python bench/bench_consumer_groups.py [--runs 5] [--members 50] [--partitions 500]

A fresh `pybroker serve` (its own process, heartbeat interval 500 ms for both protocols).
- heartbeats: a consumer group of ``--members`` wire members over ``--partitions`` partitions,
  settled; then steady-state ConsumerGroupHeartbeats (nothing changes) one at a time from one
  connection, against classic Heartbeats of a classic group of the same size: requests/s.
- join: the wire time from a new member's first ConsumerGroupHeartbeat to the whole group being
  Stable again (every member heartbeating in turn), in heartbeat rounds and milliseconds.
- librdkafka: 3 confluent-kafka consumers subscribe at once; time until each holds 2 of 6
  partitions, with group.protocol=consumer and with the classic protocol (cooperative-sticky).
- librdkafka 3 -> 4: 3 consumers are stable on a 12-partition topic that a producer feeds steadily
  (``--rate`` records/s over all partitions), then a 4th subscribes. The time until all 4 hold 3
  partitions each; for each of the 3 existing members, the longest stretch without a record and the
  time it held no partition at all (the stop-the-world), from the 4th's subscribe until the group has
  settled and ``TAIL_S`` more. The longest stretch without a record over a quiet window of the same
  length before the join is the baseline. group.protocol=consumer (server-side uniform assignor)
  against the classic protocol with the range assignor (eager) and with cooperative-sticky; the
  modes take turns within each run. Knobs: CLASSIC and COMMON below, printed.
Medians of ``--runs`` runs, measured in the same run.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pybroker.protocol.messages import REQUESTS  # noqa: E402
from tests.broker import BrokerProcess  # noqa: E402
from tests.kafka_wire import WireClient  # noqa: E402
from tests.broker.test_consumer_group_protocol import wait_for_coordinator  # noqa: E402

HB, DESCRIBE, JOIN, SYNC, HEARTBEAT = REQUESTS[68], REQUESTS[69], REQUESTS[11], REQUESTS[14], REQUESTS[12]
SETTLE_ROUNDS = 50  # bound on heartbeat rounds while a group settles
SCALE_TOPIC, SCALE_PARTITIONS = "bench-scale", 12
TAIL_S = 2.0  # observed after the group settles: members fetching again after a stop show up in it
SETTLE_TIMEOUT_S = 60
COMMON = {"auto.offset.reset": "latest", "enable.auto.commit": True, "fetch.wait.max.ms": 100}
CLASSIC = {"heartbeat.interval.ms": 500, "session.timeout.ms": 6000}  # the broker's consumer heartbeat: 500 ms too
MODES = {"consumer": {"group.protocol": "consumer"},
         "classic range (eager)": {**CLASSIC, "partition.assignment.strategy": "range"},
         "classic cooperative-sticky": {**CLASSIC, "partition.assignment.strategy": "cooperative-sticky"}}


def heartbeat(w, group, member, epoch, topics=None, owned=None, rebalance_ms=-1):
    parts = None if owned is None else [HB.TopicPartitions(topic_id=t, partitions=sorted(ps))
                                        for t, ps in owned.items()]
    return w.request(HB(group_id=group, member_id=member, member_epoch=epoch, rebalance_timeout_ms=rebalance_ms,
                        subscribed_topic_names=topics, topic_partitions=parts), 1)


def settle(w, group, members: dict) -> int:
    """Every member heartbeats in turn, holding what it was told, until the group is Stable; the rounds."""
    for rounds in range(1, SETTLE_ROUNDS + 1):
        for mid, (epoch, owned) in list(members.items()):
            r = heartbeat(w, group, mid, epoch, owned=owned)
            assert r.error_code == 0, r.error_code
            if r.assignment is not None:
                owned = {t.topic_id: set(t.partitions) for t in r.assignment.topic_partitions}
            members[mid] = (r.member_epoch, owned)
        if w.request(DESCRIBE(group_ids=[group]), 0).groups[0].group_state == "Stable":
            return rounds
    raise RuntimeError(f"group {group} did not settle in {SETTLE_ROUNDS} rounds")


def consumer_group(w, topic, count):
    group, members = f"cg-{uuid.uuid4().hex[:8]}", {}
    for _ in range(count):
        mid = uuid.uuid4().hex
        r = heartbeat(w, group, mid, 0, topics=[topic], owned={}, rebalance_ms=30000)
        assert r.error_code == 0, r.error_code
        members[mid] = (r.member_epoch, {t.topic_id: set(t.partitions) for t in r.assignment.topic_partitions})
    settle(w, group, members)
    return group, members


def consumer_heartbeats_per_s(w, group, members, count) -> float:
    ids = list(members)
    start = time.perf_counter()
    for i in range(count):
        mid = ids[i % len(ids)]
        assert heartbeat(w, group, mid, members[mid][0]).error_code == 0
    return count / (time.perf_counter() - start)


def classic_group(port, count):
    """A settled classic group of ``count`` members (JoinGroup v3: no member id round trip)."""
    group, joined = f"classic-{uuid.uuid4().hex[:8]}", [None] * count
    clients = [WireClient(port, timeout=60) for _ in range(count)]

    def member(i):
        joined[i] = clients[i].request(JOIN(group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000,
                                            member_id="", protocol_type="consumer",
                                            protocols=[JOIN.JoinGroupRequestProtocol(name="range", metadata=b"")]), 3)
    threads = [threading.Thread(target=member, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    leader = next(j for j in joined if j.leader == j.member_id)
    threads = []
    for c, j in zip(clients, joined):
        plan = [SYNC.SyncGroupRequestAssignment(member_id=m.member_id, assignment=b"") for m in leader.members] \
            if j is leader else []
        threads.append(threading.Thread(target=c.request, args=(SYNC(
            group_id=group, generation_id=j.generation_id, member_id=j.member_id, assignments=plan), 3)))
        threads[-1].start()
    for t in threads:
        t.join(60)
    return group, joined, clients


def classic_heartbeats_per_s(w, group, joined, count) -> float:
    start = time.perf_counter()
    for i in range(count):
        j = joined[i % len(joined)]
        r = w.request(HEARTBEAT(group_id=group, generation_id=j.generation_id, member_id=j.member_id), 3)
        assert r.error_code == 0, r.error_code
    return count / (time.perf_counter() - start)


def join_one(w, topic, group, members) -> tuple[float, int]:
    mid = uuid.uuid4().hex
    start = time.perf_counter()
    r = heartbeat(w, group, mid, 0, topics=[topic], owned={}, rebalance_ms=30000)
    members[mid] = (r.member_epoch, {t.topic_id: set(t.partitions) for t in r.assignment.topic_partitions})
    rounds = settle(w, group, members)
    return (time.perf_counter() - start) * 1000, rounds


def librdkafka_settle_ms(bootstrap, topic, consumer_protocol: bool) -> float:
    from confluent_kafka import Consumer
    group = f"rd-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    if consumer_protocol:
        conf["group.protocol"] = "consumer"
    else:
        conf.update({"partition.assignment.strategy": "cooperative-sticky", "heartbeat.interval.ms": 500,
                     "session.timeout.ms": 6000})
    held = {i: set() for i in range(3)}

    def callbacks(i):
        def on_assign(c, parts):
            held[i].update(p.partition for p in parts)

        def on_revoke(c, parts):
            held[i].difference_update(p.partition for p in parts)
        return {"on_assign": on_assign, "on_revoke": on_revoke}

    consumers = [Consumer(conf) for _ in range(3)]
    start = time.perf_counter()
    for i, c in enumerate(consumers):
        c.subscribe([topic], **callbacks(i))
    try:
        end = start + 60
        while time.perf_counter() < end:
            for c in consumers:
                c.poll(0.01)
            if all(len(h) == 2 for h in held.values()):
                return (time.perf_counter() - start) * 1000
        raise RuntimeError(f"librdkafka group did not settle: {held}")
    finally:
        for c in consumers:
            c.close()


class Member:
    """One librdkafka consumer polled by its own thread: what it holds, when records came, when it held none."""

    def __init__(self, conf: dict, topic: str):
        from confluent_kafka import Consumer
        self.c = Consumer(conf)
        self.held, self.arrivals, self.empty_since, self.empty = set(), [], None, []
        self.stop = threading.Event()
        self.c.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke)
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _on_assign(self, c, parts):
        self.held.update(p.partition for p in parts)
        if self.held and self.empty_since is not None:
            self.empty.append((self.empty_since, time.monotonic()))
            self.empty_since = None

    def _on_revoke(self, c, parts):
        self.held.difference_update(p.partition for p in parts)
        if not self.held and self.empty_since is None:
            self.empty_since = time.monotonic()

    def _poll(self):
        while not self.stop.is_set():
            m = self.c.poll(0.05)
            if m is not None and m.error() is None:
                self.arrivals.append(time.monotonic())

    def longest_gap(self, start: float, end: float) -> float:
        """The longest stretch in [start, end] without a record."""
        times = [start, *(t for t in list(self.arrivals) if start < t < end), end]
        return max(b - a for a, b in zip(times, times[1:]))

    def time_empty(self, start: float, end: float) -> float:
        spans = list(self.empty) + ([(self.empty_since, end)] if self.empty_since is not None else [])
        return sum(max(0.0, min(b, end) - max(a, start)) for a, b in spans)

    def close(self):
        self.stop.set()
        self.thread.join(30)
        self.c.close()


def wait_until(predicate, what: str, timeout_s: float = SETTLE_TIMEOUT_S) -> float:
    """Poll ``predicate`` every 5 ms (bounded); the monotonic time it became true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(0.005)
    raise RuntimeError(f"timed out waiting for {what}")


class SteadyProducer:
    """Produces ``rate`` small records/s round-robin over the topic's partitions until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: int):
        from confluent_kafka import Producer
        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "1"})
        self.topic, self.rate, self.stop = topic, rate, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        n, start = 0, time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while n < due:
                try:
                    self.p.produce(self.topic, b"x" * 100, partition=n % SCALE_PARTITIONS)
                except BufferError:
                    break
                n += 1
            self.p.poll(0.01)

    def close(self):
        self.stop.set()
        self.thread.join(30)
        self.p.flush(30)


def scale_out(bootstrap: str, mode: str, baseline_s: float) -> dict:
    """3 stable members, a 4th joins: settle ms and, per existing member, ms without records / partitions."""
    conf = {"bootstrap.servers": bootstrap, "group.id": f"scale-{uuid.uuid4().hex[:8]}", **COMMON, **MODES[mode]}
    members = []
    try:
        members = [Member(conf, SCALE_TOPIC) for _ in range(3)]
        wait_until(lambda: all(len(m.held) == 4 for m in members) and sum(len(m.held) for m in members) == 12,
                   f"3 members holding 4 partitions each ({mode})")
        t = time.monotonic()
        wait_until(lambda: all(m.arrivals and m.arrivals[-1] > t for m in members), "records at every member")
        quiet_start = time.monotonic()
        wait_until(lambda: time.monotonic() - quiet_start >= baseline_s, "the quiet window", baseline_s + 5)
        baseline = max(m.longest_gap(quiet_start, time.monotonic()) for m in members)
        join = time.monotonic()
        members.append(Member(conf, SCALE_TOPIC))
        settled = wait_until(lambda: all(len(m.held) == 3 for m in members)
                             and len(set().union(*(m.held for m in members))) == 12,
                             f"4 members holding 3 each ({mode})")
        end = wait_until(lambda: time.monotonic() - settled >= TAIL_S, "the tail", TAIL_S + 5)
        old = members[:3]
        return {"settle_ms": (settled - join) * 1000, "baseline_gap_ms": baseline * 1000,
                "gap_ms": [m.longest_gap(join, end) * 1000 for m in old],
                "empty_ms": [m.time_empty(join, end) * 1000 for m in old]}
    finally:
        for m in members:
            m.close()


def scale_out_runs(bootstrap: str, runs: int, rate: int) -> dict:
    producer = SteadyProducer(bootstrap, SCALE_TOPIC, rate)
    out = {mode: [] for mode in MODES}
    try:
        for _ in range(runs):
            for mode in MODES:  # in turns, so that each mode sees the same load
                out[mode].append(scale_out(bootstrap, mode, baseline_s=3.0))
                out[mode][-1]["load"] = os.getloadavg()[0]
    finally:
        producer.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--members", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=500)
    ap.add_argument("--heartbeats", type=int, default=5000)
    ap.add_argument("--rate", type=int, default=1200, help="records/s the steady producer sends (3 -> 4 scenario)")
    ap.add_argument("--only-scale-out", action="store_true", help="run only the librdkafka 3 -> 4 scenario")
    args = ap.parse_args()
    print(f"load average at start {os.getloadavg()}; 3 -> 4 knobs: common {COMMON}; modes {MODES}; "
          f"steady producer {args.rate} records/s of 100 B over {SCALE_PARTITIONS} partitions", flush=True)
    tmp = tempfile.mkdtemp(prefix="pybroker-bench-cg-")
    broker = BrokerProcess(os.path.join(tmp, "data"), {
        # the classic group's members all arrive within the initial delay: one generation holds them all
        "group.initial.rebalance.delay.ms": 1000, "group.consumer.heartbeat.interval.ms": 500}).start()
    scale = None
    try:
        wait_for_coordinator(broker.port)
        with WireClient(broker.port, timeout=60) as w:
            w.create_topic(SCALE_TOPIC, SCALE_PARTITIONS)
            if not args.only_scale_out:
                w.create_topic("bench-cg", args.partitions)
                w.create_topic("bench-rd", 6)
                group, members = consumer_group(w, "bench-cg", args.members)
                cgroup, joined, clients = classic_group(broker.port, args.members)
                consumer_hb, classic_hb, joins = [], [], []
                for _ in range(args.runs):
                    consumer_hb.append(consumer_heartbeats_per_s(w, group, members, args.heartbeats))
                    classic_hb.append(classic_heartbeats_per_s(w, cgroup, joined, args.heartbeats))
                    joins.append(join_one(w, "bench-cg", group, members))
                for c in clients:
                    c.close()
        if not args.only_scale_out:
            rd_consumer = [librdkafka_settle_ms(broker.bootstrap, "bench-rd", True) for _ in range(args.runs)]
            rd_classic = [librdkafka_settle_ms(broker.bootstrap, "bench-rd", False) for _ in range(args.runs)]
        scale = scale_out_runs(broker.bootstrap, args.runs, args.rate)
    finally:
        broker.stop()
        broker.close()
        shutil.rmtree(tmp, ignore_errors=True)
    med = statistics.median
    print(f"consumer groups (KIP-848) vs classic, medians of {args.runs} runs, broker in its own process")
    if not args.only_scale_out:
        print(f"  steady heartbeats, {args.members} members / {args.partitions} partitions:")
        print(f"    ConsumerGroupHeartbeat   {med(consumer_hb):8.0f} /s")
        print(f"    classic Heartbeat        {med(classic_hb):8.0f} /s   "
              f"(ratio {med(consumer_hb) / med(classic_hb):.2f})")
        ms, rounds = med(j[0] for j in joins), med(j[1] for j in joins)
        print(f"  one member joins a group of {args.members}: Stable again after {rounds:.0f} heartbeat rounds, "
              f"{ms:.1f} ms of wire time")
        print("  librdkafka, 3 consumers subscribe to 6 partitions: each holds 2 after")
        print(f"    group.protocol=consumer  {med(rd_consumer):8.0f} ms")
        print(f"    classic cooperative      {med(rd_classic):8.0f} ms   "
              f"(ratio {med(rd_consumer) / med(rd_classic):.2f})")
    print(f"  librdkafka 3 -> 4 members on {SCALE_PARTITIONS} partitions under {args.rate} records/s (ms; the 3 "
          "existing members: worst and median of them, median over runs)")
    print(f"    {'':28}{'settled':>8}{'no records':>12}{'(median)':>9}{'no partition':>14}{'(median)':>9}"
          f"{'baseline gap':>14}{'load':>6}")
    for mode, rows in scale.items():
        print(f"    {mode:28}{med(r['settle_ms'] for r in rows):8.0f}"
              f"{med(max(r['gap_ms']) for r in rows):12.0f}{med(med(r['gap_ms']) for r in rows):9.0f}"
              f"{med(max(r['empty_ms']) for r in rows):14.0f}{med(med(r['empty_ms']) for r in rows):9.0f}"
              f"{med(r['baseline_gap_ms'] for r in rows):14.0f}{med(r['load'] for r in rows):6.1f}")
    print("    per run (settled ms / worst no-records ms / worst no-partition ms):")
    for mode, rows in scale.items():
        print(f"      {mode:28}" + "  ".join(f"{r['settle_ms']:.0f}/{max(r['gap_ms']):.0f}/{max(r['empty_ms']):.0f}"
                                           for r in rows))

if __name__ == "__main__":
    main()

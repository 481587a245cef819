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
from tests.test_consumer_group_protocol import wait_for_coordinator  # noqa: E402

HB, DESCRIBE, JOIN, SYNC, HEARTBEAT = REQUESTS[68], REQUESTS[69], REQUESTS[11], REQUESTS[14], REQUESTS[12]
SETTLE_ROUNDS = 50  # bound on heartbeat rounds while a group settles


def heartbeat(w, group, member, epoch, topics=None, owned=None, rebalance_ms=-1):
    parts = None if owned is None else [HB.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in owned.items()]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--members", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=500)
    ap.add_argument("--heartbeats", type=int, default=5000)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="pybroker-bench-cg-")
    broker = BrokerProcess(os.path.join(tmp, "data"), {
        # the classic group's members all arrive within the initial delay: one generation holds them all
        "group.initial.rebalance.delay.ms": 1000, "group.consumer.heartbeat.interval.ms": 500}).start()
    try:
        wait_for_coordinator(broker.port)
        with WireClient(broker.port, timeout=60) as w:
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
        rd_consumer = [librdkafka_settle_ms(broker.bootstrap, "bench-rd", True) for _ in range(args.runs)]
        rd_classic = [librdkafka_settle_ms(broker.bootstrap, "bench-rd", False) for _ in range(args.runs)]
    finally:
        broker.stop()
        broker.close()
        shutil.rmtree(tmp, ignore_errors=True)
    med = statistics.median
    print(f"consumer groups (KIP-848) vs classic, medians of {args.runs} runs, broker in its own process")
    print(f"  steady heartbeats, {args.members} members / {args.partitions} partitions:")
    print(f"    ConsumerGroupHeartbeat   {med(consumer_hb):8.0f} /s")
    print(f"    classic Heartbeat        {med(classic_hb):8.0f} /s   (ratio {med(consumer_hb) / med(classic_hb):.2f})")
    ms, rounds = med(j[0] for j in joins), med(j[1] for j in joins)
    print(f"  one member joins a group of {args.members}: Stable again after {rounds:.0f} heartbeat rounds, "
          f"{ms:.1f} ms of wire time")
    print("  librdkafka, 3 consumers subscribe to 6 partitions: each holds 2 after")
    print(f"    group.protocol=consumer  {med(rd_consumer):8.0f} ms")
    print(f"    classic cooperative      {med(rd_classic):8.0f} ms   (ratio {med(rd_consumer) / med(rd_classic):.2f})")


if __name__ == "__main__":
    main()

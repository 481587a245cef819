"""Clients for bench_cluster.py, each run in its own process; confluent-kafka (librdkafka) does the work.

    python bench/cluster_clients.py create-topic --bootstrap H:P --topic T --partitions 3 --replication-factor 3
                                                  [--topic-config k=v ...]
    python bench/cluster_clients.py produce  --bootstrap H:P --topic T --partitions 3 --count N --size S --config JSON
    python bench/cluster_clients.py latency  --bootstrap H:P --topic T --partitions 3 --rate-mb 50 --size 1024
                                              --seconds 10 --config JSON
    python bench/cluster_clients.py failover --bootstrap H:P --topic T --partitions 3 --rate 500 --size 1024
                                              --seconds 30 --config JSON

``--config`` holds every producer setting (acks, linger.ms, batch.size, enable.idempotence, ...), as
the benchmark chose it. Records go to partitions 0..N-1 in turn. ``produce`` and ``latency`` are the
fallback for the C load tool (bench/csrc/rdkafka_cluster_load.c) and print the same JSON line; like it,
they first send one record to each partition and wait for it, untimed.
``failover`` sends steadily and, once partition 0 has acknowledged records for a while, prints the line
``ready``; at the end it prints the send and acknowledgement times (CLOCK_MONOTONIC, the clock of
Python's ``time.monotonic()`` in every process) of each record acknowledged on partition 0, so the
caller can line them up with the moment it killed a broker.
"""
import argparse
import json
import sys
import time

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

MAX_SECONDS = 300  # no run goes on longer than this, whatever happens


def create_topic(args) -> dict:
    """Create the topic, then wait (bounded) until metadata shows a leader for every partition."""
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    deadline = time.monotonic() + 30
    while len(admin.list_topics(timeout=10).brokers) < args.replication_factor:  # all brokers registered
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {args.replication_factor} brokers in the cluster's metadata")
        time.sleep(0.2)
    configs = dict(kv.split("=", 1) for kv in args.topic_config)
    refused = None
    fs = admin.create_topics([NewTopic(args.topic, args.partitions, args.replication_factor, config=configs)],
                             operation_timeout=30, request_timeout=30)
    try:
        fs[args.topic].result(60)
    except KafkaException as exc:
        if not configs or exc.args[0].code() != 40:  # INVALID_CONFIG: retried without topic configs
            raise
        refused = str(exc.args[0])
        fs = admin.create_topics([NewTopic(args.topic, args.partitions, args.replication_factor)],
                                 operation_timeout=30, request_timeout=30)
        fs[args.topic].result(60)
    deadline = time.monotonic() + 60
    while True:
        md = admin.list_topics(args.topic, timeout=10).topics.get(args.topic)
        ready = (md is not None and md.error is None and len(md.partitions) == args.partitions
                 and all(p.leader >= 0 and len(p.isrs) >= args.replication_factor for p in md.partitions.values()))
        if ready:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {args.topic} has no leader or full ISR on every partition: {md}")
        time.sleep(0.2)
    leaders = {p.id: p.leader for p in md.partitions.values()}
    return {"topic": args.topic, "leaders": leaders, "topic_configs_refused": refused}


def _producer(args, on_error=None) -> Producer:
    conf = {"bootstrap.servers": args.bootstrap, **json.loads(args.config)}
    if on_error is not None:
        conf["error_cb"] = on_error
    return Producer(conf)


def send_blocking(p: Producer, topic: str, value: bytes, partition: int, cb, deadline: float) -> None:
    """produce(), waiting (polling) while the producer's queue is full, until ``deadline``."""
    while True:
        try:
            p.produce(topic, value, partition=partition, on_delivery=cb)
            return
        except BufferError:
            p.poll(0.001)
            if time.monotonic() > deadline:
                raise TimeoutError("producer queue stayed full")


def delivery_tally():
    """(state, on_delivery callback): acknowledged and failed records counted, the first error kept."""
    state = {"ok": 0, "failed": 0, "first_error": ""}

    def delivered(err, _msg):
        if err is None:
            state["ok"] += 1
        else:
            state["first_error"] = state["first_error"] or str(err)
            state["failed"] += 1
    return state, delivered


def _warm_up(p: Producer, args, value: bytes) -> float:
    """One record per partition, acknowledged, before the clock starts (connections, metadata, producer id)."""
    start = time.perf_counter()
    for part in range(args.partitions):
        send_blocking(p, args.topic, value, part, None, time.monotonic() + 60)
    p.flush(60)
    return time.perf_counter() - start


def produce(args) -> dict:
    p = _producer(args)
    value = (bytes(range(256)) * (args.size // 256 + 1))[:args.size]
    state, delivered = delivery_tally()

    warm = _warm_up(p, args, value)
    deadline = time.monotonic() + MAX_SECONDS
    start = time.perf_counter()
    for i in range(args.count):
        send_blocking(p, args.topic, value, i % args.partitions, delivered, deadline)
        if i % 10000 == 0:
            p.poll(0)
    p.flush(max(1.0, deadline - time.monotonic()))
    seconds = time.perf_counter() - start
    return {"records": state["ok"], "bytes": state["ok"] * args.size, "seconds": seconds,
            "errors": state["failed"], "first_error": state["first_error"], "warmup_seconds": warm}


def latency(args) -> dict:
    p = _producer(args)
    value = b"x" * args.size
    per_second = args.rate_mb * 1e6 / args.size
    lat, state = [], {"failed": 0, "first_error": ""}

    def delivered(err, msg):
        if err is None:
            lat.append(msg.latency())
        else:
            state["first_error"] = state["first_error"] or str(err)
            state["failed"] += 1

    warm = _warm_up(p, args, value)
    seconds = min(args.seconds, MAX_SECONDS)
    start = time.perf_counter()
    sent = 0
    while (elapsed := time.perf_counter() - start) < seconds:
        due = int(per_second * elapsed) - sent  # paced by elapsed time: sleeps that overshoot catch up
        for _ in range(max(due, 0)):
            send_blocking(p, args.topic, value, sent % args.partitions, delivered, start + seconds + 5)
            sent += 1
        p.poll(0)
        time.sleep(0.0005)
    offered = time.perf_counter() - start
    p.flush(60)
    lat.sort()
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else None  # noqa: E731
    return {"records": len(lat), "sent": sent, "errors": state["failed"], "first_error": state["first_error"],
            "achieved_mb_s": sent * args.size / offered / 1e6, "p50_ms": pick(0.50), "p99_ms": pick(0.99),
            "max_ms": lat[-1] * 1000 if lat else None, "warmup_seconds": warm}


def failover(args) -> dict:
    client_errors = []
    p = _producer(args, on_error=lambda err: client_errors.append([time.monotonic(), str(err)]))
    value = b"f" * args.size
    acks0, errors = [], []  # partition 0: [send time, ack time, offset]; all partitions: failed deliveries

    def callback(sent_at):
        def delivered(err, msg):
            if err is not None:
                errors.append([sent_at, time.monotonic(), msg.partition(), str(err)])
            elif msg.partition() == 0:
                acks0.append([sent_at, time.monotonic(), msg.offset()])
        return delivered

    seconds = min(args.seconds, MAX_SECONDS)
    start = time.monotonic()
    sent, announced = 0, False
    while (now := time.monotonic()) - start < seconds:
        due = int(args.rate * (now - start)) - sent
        for _ in range(max(due, 0)):
            send_blocking(p, args.topic, value, sent % args.partitions, callback(time.monotonic()), start + seconds + 5)
            sent += 1
        p.poll(0.002)
        # steady for at least two seconds, partition 0 acknowledging: the caller may strike now
        if not announced and now - start > 2 and len(acks0) >= 50:
            print("ready", flush=True)
            announced = True
    left = p.flush(30)
    return {"sent": sent, "unacknowledged": left, "acks_p0": acks0, "errors": errors[:200],
            "error_count": len(errors), "client_errors": client_errors[:50], "ready": announced}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("create-topic", "produce", "latency", "failover"))
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--replication-factor", type=int, default=1)
    ap.add_argument("--topic-config", action="append", default=[])
    ap.add_argument("--config", default="{}", help="producer settings as a JSON object")
    ap.add_argument("--count", type=int, default=100000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rate-mb", type=float, default=50)
    ap.add_argument("--rate", type=float, default=500, help="records per second (failover)")
    ap.add_argument("--seconds", type=float, default=10)
    args = ap.parse_args()
    modes = {"create-topic": create_topic, "produce": produce, "latency": latency, "failover": failover}
    print(json.dumps(modes[args.mode](args)), flush=True)


if __name__ == "__main__":
    sys.exit(main())

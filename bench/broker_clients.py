"""Load-generating clients for bench_broker.py, each run in its own process.

    python bench/broker_clients.py produce  --bootstrap H:P --topic T --count N --size S [--acks 1]
    python bench/broker_clients.py consume  --bootstrap H:P --topic T --count N
    python bench/broker_clients.py latency  --bootstrap H:P --topic T --rate-mb 50 --size 1024 --seconds 10

Each prints one JSON line with what it measured. confluent-kafka (librdkafka, C) does the work.
"""
import argparse
import json
import time

from confluent_kafka import Consumer, Producer, TopicPartition

MAX_SECONDS = 300  # no run goes on longer than this, whatever happens


def produce(args) -> dict:
    p = Producer({"bootstrap.servers": args.bootstrap, "acks": str(args.acks), "linger.ms": 20,
                  "batch.size": 1048576, "batch.num.messages": 100000, "queue.buffering.max.kbytes": 1048576,
                  "queue.buffering.max.messages": 1000000, "compression.type": "none",
                  "enable.idempotence": False, "message.max.bytes": 10000000})
    payload = bytes(range(256)) * (args.size // 256 + 1)
    value = payload[:args.size]
    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(str(err))

    deadline = time.monotonic() + MAX_SECONDS
    start = time.perf_counter()
    for i in range(args.count):
        while True:
            try:
                p.produce(args.topic, value, partition=0, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.001)
                if time.monotonic() > deadline:
                    raise TimeoutError("producer queue stayed full")
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(MAX_SECONDS)
    seconds = time.perf_counter() - start
    return {"records": args.count - left, "bytes": (args.count - left) * args.size, "seconds": seconds,
            "errors": errors[:3], "error_count": len(errors)}


def consume(args) -> dict:
    c = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 52428800,
                  "fetch.wait.max.ms": 100, "queued.max.messages.kbytes": 1048576})
    c.assign([TopicPartition(args.topic, 0, 0)])
    got = nbytes = 0
    deadline = time.monotonic() + MAX_SECONDS
    start = time.perf_counter()  # librdkafka prefetches in the background: time the whole transfer
    while got < args.count and time.monotonic() < deadline:
        for m in c.consume(num_messages=100000, timeout=1.0):
            if not m.error():
                got += 1
                nbytes += len(m)
    seconds = time.perf_counter() - start
    c.close()
    return {"records": got, "bytes": nbytes, "seconds": seconds}


def latency(args) -> dict:
    p = Producer({"bootstrap.servers": args.bootstrap, "acks": "1", "linger.ms": 1, "compression.type": "none",
                  "enable.idempotence": False})
    value = b"x" * args.size
    per_second = int(args.rate_mb * 1e6 / args.size)
    lat = []

    def delivered(err, msg):
        if err is None:
            lat.append(msg.latency())

    start = time.perf_counter()
    sent = 0
    while True:
        elapsed = time.perf_counter() - start
        if elapsed >= min(args.seconds, MAX_SECONDS):
            break
        due = int(per_second * elapsed) - sent  # paced by elapsed time: sleeps that overshoot catch up
        for _ in range(due):
            p.produce(args.topic, value, partition=0, on_delivery=delivered)
        sent += max(due, 0)
        p.poll(0)
        time.sleep(0.0005)
    p.flush(60)
    elapsed = time.perf_counter() - start
    lat.sort()
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else None  # noqa: E731
    return {"records": len(lat), "sent": sent, "achieved_mb_s": sent * args.size / elapsed / 1e6,
            "p50_ms": pick(0.50), "p99_ms": pick(0.99), "max_ms": lat[-1] * 1000 if lat else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("produce", "consume", "latency"))
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--count", type=int, default=100000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--acks", type=int, default=1)
    ap.add_argument("--rate-mb", type=float, default=50)
    ap.add_argument("--seconds", type=float, default=10)
    args = ap.parse_args()
    print(json.dumps({"produce": produce, "consume": consume, "latency": latency}[args.mode](args)), flush=True)


if __name__ == "__main__":
    main()

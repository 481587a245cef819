"""pybroker's own clients over PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL, against one pybroker.

    python bench/bench_client_security.py [--runs 3] [--mb 50] [--size 1024] [--opens 20] [--json out.json]

One single-node pybroker serves the four listeners (certificates made with ``cryptography``,
TLS client certificates on SSL, SCRAM-SHA-512 on SASL_PLAINTEXT, SCRAM-SHA-256 on SASL_SSL).
Each run visits the listeners in a rotated order: open --opens connections one after another
(TCP, TLS, ApiVersions, SASL: the median setup time), produce --mb MB of --size-byte records with
pybroker's Producer (acks=1, linger.ms=5) into a fresh 3-partition topic, and read them back with
pybroker's Consumer (poll_batch, assigned partitions). Prints each run, the medians and the ratios
to PLAINTEXT measured in the same run.
"""
import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import measure  # noqa: E402
from tests.secure_brokers import make_certs, start_secure_pybroker  # noqa: E402

PARTITIONS = measure.PARTITIONS


def listeners(b) -> dict:
    c = b.certs
    return {
        "PLAINTEXT": {"bootstrap.servers": b.plaintext},
        "SSL": {"bootstrap.servers": b.ssl, "security.protocol": "SSL", "ssl.ca.location": c.ca,
                "ssl.certificate.location": c.client_cert, "ssl.key.location": c.client_key},
        "SASL_PLAINTEXT": {"bootstrap.servers": b.sasl_plaintext, "security.protocol": "SASL_PLAINTEXT",
                           "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                           "sasl.password": "alice-secret"},
        "SASL_SSL": {"bootstrap.servers": b.sasl_ssl, "security.protocol": "SASL_SSL", "ssl.ca.location": c.ca,
                     "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "alice-secret"},
    }


def connection_setup_ms(conf: dict, opens: int) -> float:
    from pybroker.client import config as client_config
    from pybroker.client.connection import BrokerConnection
    cfg = client_config.parse(conf, "admin")

    async def main():
        times = []
        for _ in range(opens):
            start = time.perf_counter()
            conn = await BrokerConnection.open(*cfg.bootstrap[0], security=cfg.security)
            times.append(time.perf_counter() - start)
            await conn.close()
        return statistics.median(times) * 1000
    return asyncio.run(main())


def produce(conf: dict, topic: str, count: int, size: int) -> float:
    from pybroker.client import Producer
    value = os.urandom(size)
    p = Producer({**conf, "acks": "1", "linger.ms": 5, "batch.size": 1 << 20, "enable.idempotence": False,
                  "buffer.memory": 256 << 20})
    start = time.perf_counter()
    for _ in range(count):
        p.produce(topic, value=value)
    assert p.flush(300) == 0
    seconds = time.perf_counter() - start
    p.close()
    return seconds


def consume(conf: dict, topic: str, count: int) -> float:
    from pybroker.client import Consumer, TopicPartition
    got, start = 0, None
    with Consumer({**conf, "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 300
        while got < count and time.monotonic() < deadline:
            batch = c.poll_batch(timeout_ms=500)
            if batch.num_rows and start is None:
                start = time.perf_counter()
            got += batch.num_rows
    assert got >= count, f"read {got} of {count}"
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    measure.add_run_options(ap, runs=3, mb=50)
    ap.add_argument("--opens", type=int, default=20)
    args = ap.parse_args()
    from pybroker.client import AdminClient, NewTopic
    count = args.mb * 1024 * 1024 // args.size
    with tempfile.TemporaryDirectory(prefix="bench-client-security-") as tmp:
        broker, b = start_secure_pybroker(tmp, make_certs(os.path.join(tmp, "certs")))
        try:
            confs = listeners(b)
            names = list(confs)
            results = {n: {"setup_ms": [], "produce_mb_s": [], "consume_mb_s": []} for n in names}
            for run in range(args.runs):
                order = names[run % len(names):] + names[:run % len(names)]
                for name in order:
                    conf = confs[name]
                    topic = f"bench-{name.lower()}-{run}"
                    with AdminClient(confs["PLAINTEXT"]) as admin:
                        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
                    setup = connection_setup_ms(conf, args.opens)
                    mb = count * args.size / 1e6
                    prod = mb / produce(conf, topic, count, args.size)
                    cons = mb / consume(conf, topic, count)
                    r = results[name]
                    r["setup_ms"].append(setup)
                    r["produce_mb_s"].append(prod)
                    r["consume_mb_s"].append(cons)
                    print(f"run {run + 1} {name:15s} setup {setup:7.2f} ms  produce {prod:7.1f} MB/s  "
                          f"consume {cons:7.1f} MB/s", flush=True)
        finally:
            broker.close()
    medians = {n: {k: statistics.median(v) for k, v in r.items()} for n, r in results.items()}
    base = medians["PLAINTEXT"]
    print(f"\nmedians of {args.runs} runs, {args.mb} MB of {args.size}-byte records "
          "(ratio to PLAINTEXT in the same run):")
    for name, m in medians.items():
        print(f"{name:15s} setup {m['setup_ms']:7.2f} ms ({m['setup_ms'] / base['setup_ms']:5.2f}x)  "
              f"produce {m['produce_mb_s']:7.1f} MB/s ({m['produce_mb_s'] / base['produce_mb_s']:4.2f}x)  "
              f"consume {m['consume_mb_s']:7.1f} MB/s ({m['consume_mb_s'] / base['consume_mb_s']:4.2f}x)")
    measure.save_json(args.json, {"args": vars(args), "runs": results, "medians": medians})
    return 0


if __name__ == "__main__":
    sys.exit(main())

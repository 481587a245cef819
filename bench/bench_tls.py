"""Produce and consume throughput over TLS vs PLAINTEXT, on the same broker (two listeners).

    python bench/bench_tls.py [--runs 3] [--mb 200] [--size 1024] [--json out.json] [--baseline DIR]

One single-node broker serves PLAINTEXT and SSL (server authentication, TLS 1.3, certificates made
here with the ``cryptography`` package). Each run, in alternating order of the two listeners:
create a topic of 3 partitions, produce --mb MB of --size-byte records with one librdkafka
producer (bench/cluster_clients.py ``produce``, own process: acks=1, linger.ms=5,
batch.size=1000000), then read them all back with one librdkafka consumer (own process, assigned
partitions from the beginning). Prints each run, the medians, TLS/PLAINTEXT ratios and the
broker's CPU seconds per GB (utime + stime from /proc, steadier than wall clock on a shared
machine).

``--baseline DIR``: DIR holds another ``pybroker`` package (e.g. the last commit's, made with
``git archive HEAD pybroker | tar -x -C DIR`` plus the built ``pybroker/_native/*.so``); a second
broker runs from it, PLAINTEXT only, measured in the same alternation as "BASELINE": the plaintext
path before vs after a change, in one run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.broker import BrokerProcess  # noqa: E402
from tests.cluster import free_ports  # noqa: E402

CLIENTS = os.path.join(ROOT, "bench", "cluster_clients.py")
PRODUCER = {"acks": "1", "linger.ms": 5, "batch.size": 1000000, "compression.type": "none",
            "enable.idempotence": False, "queue.buffering.max.kbytes": 1048576,
            "queue.buffering.max.messages": 1000000, "batch.num.messages": 100000}
PARTITIONS = 3


def run_client(*args, timeout: float = 600) -> dict:
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"client {args[:2]} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def consume(bootstrap: str, topic: str, count: int, config: dict) -> dict:
    """Read ``count`` records of ``topic`` (all partitions, from offset 0); the clock starts at the first."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}", "enable.auto.commit": False,
                  **config})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = size = 0
    start = None
    deadline = time.monotonic() + 300
    while got < count and time.monotonic() < deadline:
        for m in c.consume(100000, 0.5):
            if m.error() is None:
                if start is None:
                    start = time.perf_counter()
                got += 1
                size += len(m)
    seconds = time.perf_counter() - start if start is not None else 0.0
    c.close()
    return {"records": got, "bytes": size, "seconds": seconds}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_certificates(directory: str) -> tuple[str, str]:
    from tests.tlsutil import Authority
    ca = Authority(directory)
    broker = ca.issue("broker", {"CN": "broker"}, hosts=("127.0.0.1", "localhost"))
    return ca.cert_path, broker["pem"]


def one_run(b: BrokerProcess, protocol: str, bootstrap: str, client_conf: dict, args, n: int) -> dict:
    topic = f"bench-tls-{protocol.lower()}-{n}"
    run_client(CLIENTS, "create-topic", "--bootstrap", b.bootstrap, "--topic", topic, "--partitions", str(PARTITIONS))
    count = args.mb * (1 << 20) // args.size
    cpu = cpu_seconds(b.proc.pid)
    p = run_client(CLIENTS, "produce", "--bootstrap", bootstrap, "--topic", topic, "--partitions", str(PARTITIONS),
                   "--count", str(count), "--size", str(args.size), "--config", json.dumps({**PRODUCER, **client_conf}))
    cpu_p = cpu_seconds(b.proc.pid) - cpu
    total = p["records"] + PARTITIONS  # + the producer's warm-up record per partition
    cpu = cpu_seconds(b.proc.pid)
    c = run_client(__file__, "consume", "--bootstrap", bootstrap, "--topic", topic, "--count", str(total),
                   "--config", json.dumps(client_conf))
    cpu_c = cpu_seconds(b.proc.pid) - cpu
    if c["records"] != total:
        raise AssertionError(f"{protocol}: consumed {c['records']} of {total} records")
    return {"protocol": protocol, "produce_mb_s": p["bytes"] / p["seconds"] / 1e6,
            "consume_mb_s": c["bytes"] / c["seconds"] / 1e6, "produce_cpu_s_per_gb": cpu_p / (p["bytes"] / 1e9),
            "consume_cpu_s_per_gb": cpu_c / (c["bytes"] / 1e9), "errors": p["errors"]}


def bench(args) -> None:
    base = tempfile.mkdtemp(prefix="bench-tls-")
    ca, keystore = make_certificates(base)
    ssl_port, = free_ports(1)
    b = BrokerProcess(os.path.join(base, "data"), {
        "listeners": f"PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:{ssl_port}",
        "ssl.keystore.location": keystore, "num.partitions": PARTITIONS}).start()
    brokers = {"PLAINTEXT": b, "SSL": b}
    modes = {"PLAINTEXT": (b.bootstrap, {}),
             "SSL": (f"127.0.0.1:{ssl_port}", {"security.protocol": "SSL", "ssl.ca.location": ca})}
    if args.baseline:
        base_broker = BrokerProcess(os.path.join(base, "baseline"), {"num.partitions": PARTITIONS},
                                    command_prefix=("env", "PYTHONSAFEPATH=1", f"PYTHONPATH={args.baseline}")).start()
        brokers["BASELINE"] = base_broker
        modes["BASELINE"] = (base_broker.bootstrap, {})
    runs = []
    try:
        for i in range(args.runs):
            order = list(modes) if i % 2 == 0 else list(reversed(modes))
            for proto in order:
                r = one_run(brokers[proto], proto, *modes[proto], args, i)
                runs.append(r)
                print(f"run {i + 1} {proto:9}: produce {r['produce_mb_s']:7.1f} MB/s "
                      f"(broker {r['produce_cpu_s_per_gb']:.2f} CPU-s/GB), consume {r['consume_mb_s']:7.1f} MB/s "
                      f"(broker {r['consume_cpu_s_per_gb']:.2f} CPU-s/GB)", flush=True)
    finally:
        for broker in set(brokers.values()):
            broker.stop()
            broker.close()
        subprocess.run(["rm", "-rf", base])
    med = {(proto, key): statistics.median(r[key] for r in runs if r["protocol"] == proto)
           for proto in modes for key in ("produce_mb_s", "consume_mb_s", "produce_cpu_s_per_gb",
                                          "consume_cpu_s_per_gb")}
    print(f"median over {args.runs} runs ({args.mb} MB of {args.size}-byte records each way):")
    for key, unit in (("produce_mb_s", "MB/s"), ("consume_mb_s", "MB/s"), ("produce_cpu_s_per_gb", "CPU-s/GB"),
                      ("consume_cpu_s_per_gb", "CPU-s/GB")):
        plain, tls = med["PLAINTEXT", key], med["SSL", key]
        print(f"  {key:22} PLAINTEXT {plain:8.2f} {unit:8}  SSL {tls:8.2f} {unit:8}  SSL/PLAINTEXT {tls / plain:.3f}")
        if args.baseline:
            before = med["BASELINE", key]
            print(f"  {'':22} BASELINE  {before:8.2f} {unit:8}  PLAINTEXT/BASELINE {plain / before:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "medians": {f"{p}.{k}": v for (p, k), v in med.items()}, "args": vars(args)},
                      f, indent=2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", nargs="?", default="bench", choices=("bench", "consume"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--json")
    ap.add_argument("--baseline", help="a directory holding the pybroker package to compare plaintext with")
    ap.add_argument("--bootstrap")
    ap.add_argument("--topic")
    ap.add_argument("--count", type=int)
    ap.add_argument("--config", default="{}")
    args = ap.parse_args()
    if args.mode == "consume":
        print(json.dumps(consume(args.bootstrap, args.topic, args.count, json.loads(args.config))))
    else:
        bench(args)


if __name__ == "__main__":
    main()

"""Produce throughput of one pybroker with ACL authorization off vs on with 1 000 ACLs.

    python bench/bench_acl.py [--runs 5] [--mb 200] [--size 1024] [--acls 1000] [--json out.json]

Each run starts a fresh single-node broker twice, once per mode, in alternating order (off/on,
then on/off, ...). With authorization on (``authorizer.class.name`` = Kafka's StandardAuthorizer)
the data dir gets ``acls.json`` with --acls ACLs before start: one lets User:ANONYMOUS (the
PLAINTEXT producer) do ALL on the benchmark topic, the rest are for other principals, topics
(literal and prefixed) and groups, so every check scans a realistic index. A librdkafka producer
(bench/cluster_clients.py ``produce``, its own process: acks=1, linger.ms=5, batch.size=1000000,
no compression, no idempotence) sends --mb MB of --size-byte records to 3 partitions. Prints
each run, the medians of MB/s and of the broker's CPU seconds per GB, and on/off; plus the cost of
one cached authorization decision measured in-process.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pybroker.security import acl as A  # noqa: E402
from pybroker.security.authorizer import AclAuthorizer  # noqa: E402
from pybroker.security.principal import ANONYMOUS  # noqa: E402
from tests.broker import BrokerProcess  # noqa: E402

CLIENTS = os.path.join(ROOT, "bench", "cluster_clients.py")
PRODUCER = {"acks": "1", "linger.ms": 5, "batch.size": 1000000, "compression.type": "none",
            "enable.idempotence": False, "queue.buffering.max.kbytes": 1048576,
            "queue.buffering.max.messages": 1000000, "batch.num.messages": 100000}
TOPIC = "bench-acl"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def bindings(n: int) -> list:
    """``n`` ACLs; the first is the one that lets the benchmark's producer in."""
    out = [A.AclBinding(A.ResourcePattern(A.TOPIC, TOPIC, A.LITERAL),
                        A.AccessControlEntry(str(ANONYMOUS), "*", A.ALL, A.ALLOW))]
    ops = (A.READ, A.WRITE, A.DESCRIBE, A.CREATE)
    for i in range(n - 1):
        kind = i % 4
        if kind == 0:
            pattern = A.ResourcePattern(A.TOPIC, f"orders-{i}", A.LITERAL)
        elif kind == 1:
            pattern = A.ResourcePattern(A.TOPIC, f"bench-{i}-", A.PREFIXED)  # shares a first letter with TOPIC
        elif kind == 2:
            pattern = A.ResourcePattern(A.GROUP, f"group-{i}", A.LITERAL)
        else:
            pattern = A.ResourcePattern(A.TOPIC, "b", A.PREFIXED)  # applies to the topic, for someone else
        out.append(A.AclBinding(pattern, A.AccessControlEntry(f"User:user{i}", "*", ops[i % 4] if kind != 2 else A.READ,
                                                              A.ALLOW)))
    return out


def client(*args, timeout: float = 600) -> dict:
    out = subprocess.run([sys.executable, CLIENTS, *args], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"client {args[0]} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(on: bool, args, base: str) -> dict:
    data = tempfile.mkdtemp(prefix="acl-on-" if on else "acl-off-", dir=base)
    log_dir = os.path.join(data, "data")
    overrides = {"num.partitions": 3}
    if on:
        os.makedirs(log_dir)
        with open(os.path.join(log_dir, "acls.json"), "w") as f:
            json.dump({"format": 1, "acls": [A.binding_to_json(b) for b in bindings(args.acls)]}, f)
        overrides["authorizer.class.name"] = AUTHORIZER
    b = BrokerProcess(log_dir, overrides).start()
    try:
        client("create-topic", "--bootstrap", b.bootstrap, "--topic", TOPIC, "--partitions", "3")
        count = args.mb * (1 << 20) // args.size
        cpu = cpu_seconds(b.proc.pid)
        r = client("produce", "--bootstrap", b.bootstrap, "--topic", TOPIC, "--partitions", "3",
                   "--count", str(count), "--size", str(args.size), "--config", json.dumps(PRODUCER))
        cpu = cpu_seconds(b.proc.pid) - cpu
        if r["errors"]:
            raise AssertionError(f"{r['errors']} records failed (authorization {'on' if on else 'off'})")
        return {"on": on, "mb_s": r["bytes"] / r["seconds"] / 1e6, "records": r["records"],
                "seconds": r["seconds"], "cpu_s_per_gb": cpu / (r["bytes"] / 1e9)}
    finally:
        b.stop()
        b.close()
        subprocess.run(["rm", "-rf", data])


def decision_cost_us(n: int) -> tuple[float, float]:
    """(cached decision, first decision after an ACL change) in microseconds, in-process."""
    authz = AclAuthorizer()
    authz.set_acls(bindings(n))
    number = 200_000
    cached = timeit.timeit(lambda: authz.authorize(ANONYMOUS, "127.0.0.1", A.WRITE, A.TOPIC, TOPIC), number=number)

    def fresh():
        authz._decisions.clear()
        authz._resource_entries.clear()
        authz.authorize(ANONYMOUS, "127.0.0.1", A.WRITE, A.TOPIC, TOPIC)
    uncached = timeit.timeit(fresh, number=20_000)
    return cached / number * 1e6, uncached / 20_000 * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--acls", type=int, default=1000)
    ap.add_argument("--json")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="bench-acl-")
    runs = []
    for i in range(args.runs):
        for on in ((False, True) if i % 2 == 0 else (True, False)):
            r = one_run(on, args, base)
            runs.append(r)
            print(f"run {i + 1} authorization {'on ' if on else 'off'}: {r['mb_s']:7.1f} MB/s "
                  f"({r['records']} records in {r['seconds']:.2f} s), broker CPU {r['cpu_s_per_gb']:.3f} s/GB",
                  flush=True)
    off = statistics.median(r["mb_s"] for r in runs if not r["on"])
    on = statistics.median(r["mb_s"] for r in runs if r["on"])
    cpu_off = statistics.median(r["cpu_s_per_gb"] for r in runs if not r["on"])
    cpu_on = statistics.median(r["cpu_s_per_gb"] for r in runs if r["on"])
    print(f"median over {args.runs} runs: off {off:.1f} MB/s, on {on:.1f} MB/s, on/off {on / off:.3f} "
          f"({(on / off - 1) * 100:+.1f}%)")
    print(f"broker CPU per GB produced (median): off {cpu_off:.3f} s, on {cpu_on:.3f} s, "
          f"on/off {cpu_on / cpu_off:.3f} ({(cpu_on / cpu_off - 1) * 100:+.1f}%)")
    cached, uncached = decision_cost_us(args.acls)
    print(f"one authorization decision with {args.acls} ACLs: cached {cached:.2f} us, "
          f"first after an ACL change {uncached:.1f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "off_mb_s": off, "on_mb_s": on, "ratio": on / off, "cpu_s_per_gb_off": cpu_off,
                       "cpu_s_per_gb_on": cpu_on, "decision_us_cached": cached, "decision_us_uncached": uncached,
                       "args": vars(args)}, f, indent=2)
    os.rmdir(base)


if __name__ == "__main__":
    main()

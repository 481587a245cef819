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
import subprocess
import sys
import tempfile
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import measure  # noqa: E402
from pybroker.security import acl as A  # noqa: E402
from pybroker.security.authorizer import AclAuthorizer  # noqa: E402
from pybroker.security.principal import ANONYMOUS  # noqa: E402
from tests.broker import BrokerProcess  # noqa: E402

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
        measure.create_topic(b.bootstrap, TOPIC)
        r = measure.timed_produce(b, b.bootstrap, TOPIC, args.mb, args.size)
        if r["errors"]:
            raise AssertionError(f"{r['errors']} records failed (authorization {'on' if on else 'off'})")
        return {"on": on, "mb_s": r["mb_s"], "records": r["records"], "seconds": r["seconds"],
                "cpu_s_per_gb": r["cpu_s_per_gb"]}
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
    measure.add_run_options(ap, runs=5, mb=200)
    ap.add_argument("--acls", type=int, default=1000)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="bench-acl-")
    runs = measure.on_off_runs(args.runs, lambda on: one_run(on, args, base), "authorization")
    summary = measure.on_off_summary(runs, "on", "authorization")
    cached, uncached = decision_cost_us(args.acls)
    print(f"one authorization decision with {args.acls} ACLs: cached {cached:.2f} us, "
          f"first after an ACL change {uncached:.1f} us")
    measure.save_json(args.json, {"runs": runs, **summary, "decision_us_cached": cached,
                                  "decision_us_uncached": uncached, "args": vars(args)})
    os.rmdir(base)


if __name__ == "__main__":
    main()

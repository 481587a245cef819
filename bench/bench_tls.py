"""Produce and consume throughput over TLS vs PLAINTEXT, on the same broker (two listeners).

    python bench/bench_tls.py [--runs 3] [--mb 200] [--size 1024] [--json out.json] [--baseline DIR]

One single-node broker serves PLAINTEXT and SSL (server authentication, TLS 1.3, certificates made
here with the ``cryptography`` package). Each run, in alternating order of the two listeners:
create a topic of 3 partitions, produce --mb MB of --size-byte records with one librdkafka
producer (bench/cluster_clients.py ``produce``, own process: acks=1, linger.ms=5,
batch.size=1000000), then read them all back with one librdkafka consumer (bench/measure.py
``consume``, own process, assigned partitions from the beginning). Prints each run, the medians,
TLS/PLAINTEXT ratios and the broker's CPU seconds per GB (utime + stime from /proc, steadier than
wall clock on a shared machine).

``--baseline DIR``: DIR holds another ``pybroker`` package (e.g. the last commit's, made with
``git archive HEAD pybroker | tar -x -C DIR`` plus the built ``pybroker/_native/*.so``); a second
broker runs from it, PLAINTEXT only, measured in the same alternation as "BASELINE": the plaintext
path before vs after a change, in one run.
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import measure  # noqa: E402
from tests.broker import BrokerProcess  # noqa: E402
from tests.cluster import free_ports  # noqa: E402

PARTITIONS = measure.PARTITIONS


def make_certificates(directory: str) -> tuple[str, str]:
    from tests.tlsutil import Authority
    ca = Authority(directory)
    broker = ca.issue("broker", {"CN": "broker"}, hosts=("127.0.0.1", "localhost"))
    return ca.cert_path, broker["pem"]


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
            for proto in measure.in_turn(modes, i):
                r = measure.produce_then_consume(brokers[proto], proto, *modes[proto], args, i)
                runs.append(r)
                print(f"run {i + 1} {proto:9}: {measure.throughput_line(r)}", flush=True)
    finally:
        for broker in set(brokers.values()):
            broker.stop()
            broker.close()
        subprocess.run(["rm", "-rf", base])
    med = measure.medians(runs, "protocol", measure.THROUGHPUT_KEYS)
    print(f"median over {args.runs} runs ({args.mb} MB of {args.size}-byte records each way):")
    for key, unit in (("produce_mb_s", "MB/s"), ("consume_mb_s", "MB/s"), ("produce_cpu_s_per_gb", "CPU-s/GB"),
                      ("consume_cpu_s_per_gb", "CPU-s/GB")):
        plain, tls = med["PLAINTEXT", key], med["SSL", key]
        print(f"  {key:22} PLAINTEXT {plain:8.2f} {unit:8}  SSL {tls:8.2f} {unit:8}  SSL/PLAINTEXT {tls / plain:.3f}")
        if args.baseline:
            before = med["BASELINE", key]
            print(f"  {'':22} BASELINE  {before:8.2f} {unit:8}  PLAINTEXT/BASELINE {plain / before:.3f}")
    measure.save_json(args.json, {"runs": runs, "medians": {f"{p}.{k}": v for (p, k), v in med.items()},
                                  "args": vars(args)})


def main() -> None:
    ap = argparse.ArgumentParser()
    measure.add_run_options(ap, runs=3, mb=200)
    ap.add_argument("--baseline", help="a directory holding the pybroker package to compare plaintext with")
    bench(ap.parse_args())


if __name__ == "__main__":
    main()

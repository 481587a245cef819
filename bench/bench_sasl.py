"""SASL's cost: throughput over SASL_PLAINTEXT vs PLAINTEXT on one broker, and the broker's CPU per login.

    python bench/bench_sasl.py [--runs 3] [--mb 200] [--size 1024] [--logins 300] [--json out.json]

One single-node broker serves PLAINTEXT and SASL_PLAINTEXT. Throughput: as bench/bench_tls.py (one
librdkafka producer process, acks=1, linger.ms=5, batch.size=1000000, then one consumer process),
alternating the two listeners each run; SASL clients log in with SCRAM-SHA-256 once per
connection, so the ratio shows what the pre-authentication gate costs per request afterwards.
Logins: --logins fresh connections in a row per mechanism (SaslHandshake + SaslAuthenticate, the
client's PBKDF2 included in the wall time), with the broker's CPU seconds per login from /proc.
Prints each run, medians and SASL/PLAINTEXT ratios.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import measure  # noqa: E402
from bench.measure import cpu_seconds  # noqa: E402
from tests.broker import BrokerProcess  # noqa: E402
from tests.cluster import free_ports  # noqa: E402
from tests.kafka_wire import WireClient  # noqa: E402
from tests.sasl_wire import JAAS, alter, login, upsertion  # noqa: E402

PARTITIONS = measure.PARTITIONS
SCRAM_PASSWORD = "bench-secret"


def logins(b: BrokerProcess, port: int, mechanism: str, count: int) -> dict:
    user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else ("bench", SCRAM_PASSWORD)
    cpu, start = cpu_seconds(b.proc.pid), time.perf_counter()
    for _ in range(count):
        with WireClient(port) as client:
            if login(client, mechanism, user, password).error_code:
                raise AssertionError(f"{mechanism} login failed")
    seconds = time.perf_counter() - start
    return {"mechanism": mechanism, "logins_per_s": count / seconds,
            "broker_cpu_ms_per_login": (cpu_seconds(b.proc.pid) - cpu) / count * 1000}


def gate_overhead(calls: int = 1_000_000, repeats: int = 7) -> dict:
    """The gate's own cost per request of an authenticated session, in-process: a handler that does
    nothing called directly, and through AuthenticationGate (medians of ``repeats``, alternating)."""
    from pybroker.api.dispatcher import AuthenticationGate
    from pybroker.security.session import Session

    class Nothing:
        def handle(self, frame, conn):
            return None

    class Conn:
        session = Session("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1")
    Conn.session.authenticated = True
    frame, conn, inner = memoryview(bytes(16)), Conn(), Nothing()
    gate = AuthenticationGate(inner, None)
    times = {"direct": [], "gate": []}
    for _ in range(repeats):
        for name, handler in (("direct", inner.handle), ("gate", gate.handle)):
            start = time.perf_counter()
            for _ in range(calls):
                handler(frame, conn)
            times[name].append((time.perf_counter() - start) / calls * 1e9)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"direct_ns": med["direct"], "gate_ns": med["gate"], "added_ns": med["gate"] - med["direct"]}


def bench(args) -> None:
    g = gate_overhead()
    print(f"the gate in-process: +{g['added_ns']:.0f} ns per request of an authenticated SASL session "
          f"(a no-op handler {g['direct_ns']:.0f} ns, through the gate {g['gate_ns']:.0f} ns); none on other "
          "listeners", flush=True)
    base = tempfile.mkdtemp(prefix="bench-sasl-")
    sasl_port, = free_ports(1)
    b = BrokerProcess(os.path.join(base, "data"), {
        "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS, "num.partitions": PARTITIONS}).start()
    scram = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
             "sasl.username": "bench", "sasl.password": SCRAM_PASSWORD}
    modes = {"PLAINTEXT": (b.bootstrap, {}), "SASL_PLAINTEXT": (f"127.0.0.1:{sasl_port}", scram)}
    runs, login_runs = [], []
    try:
        with WireClient(b.port) as admin:
            assert alter(admin, [upsertion("bench", m, SCRAM_PASSWORD) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")]) \
                == {"bench": (0, None)}
        for i in range(args.runs):
            for proto in measure.in_turn(modes, i):
                r = measure.produce_then_consume(b, proto, *modes[proto], args, i)
                runs.append(r)
                print(f"run {i + 1} {proto:14}: {measure.throughput_line(r)}", flush=True)
            for mech in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
                r = logins(b, sasl_port, mech, args.logins)
                login_runs.append(r)
                print(f"run {i + 1} {mech:14}: {r['logins_per_s']:7.1f} logins/s, broker "
                      f"{r['broker_cpu_ms_per_login']:.3f} CPU-ms/login", flush=True)
    finally:
        b.stop()
        b.close()
        subprocess.run(["rm", "-rf", base])
    keys = measure.THROUGHPUT_KEYS
    med = measure.medians(runs, "protocol", keys)
    print(f"median over {args.runs} runs ({args.mb} MB of {args.size}-byte records each way):")
    for key in keys:
        plain, sasl = med["PLAINTEXT", key], med["SASL_PLAINTEXT", key]
        print(f"  {key:22} PLAINTEXT {plain:8.2f}  SASL_PLAINTEXT {sasl:8.2f}  SASL/PLAINTEXT {sasl / plain:.3f}")
    pairs = [(a, b) if a["protocol"] == "PLAINTEXT" else (b, a) for a, b in zip(runs[0::2], runs[1::2])]
    paired = {k: statistics.median(s[k] / p[k] for p, s in pairs) for k in keys}
    print("  median of the per-run SASL/PLAINTEXT ratios (each pair run back to back): "
          + ", ".join(f"{k} {v:.3f}" for k, v in paired.items()))
    login_med = {m: {k: statistics.median(r[k] for r in login_runs if r["mechanism"] == m)
                     for k in ("logins_per_s", "broker_cpu_ms_per_login")}
                 for m in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")}
    for mech, v in login_med.items():
        print(f"  {mech:14} {v['logins_per_s']:7.1f} logins/s  broker {v['broker_cpu_ms_per_login']:.3f} CPU-ms/login")
    measure.save_json(args.json, {"runs": runs, "logins": login_runs, "args": vars(args), "login_medians": login_med,
                                  "gate": g, "paired_ratios": paired,
                                  "medians": {f"{p}.{k}": v for (p, k), v in med.items()}})


def main() -> None:
    ap = argparse.ArgumentParser()
    measure.add_run_options(ap, runs=3, mb=200)
    ap.add_argument("--logins", type=int, default=300)
    bench(ap.parse_args())


if __name__ == "__main__":
    main()

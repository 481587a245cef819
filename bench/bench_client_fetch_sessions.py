"""Our consumer's Fetch bytes with and without a fetch session, for a consumer of many partitions.

    python bench/bench_client_fetch_sessions.py [--partitions 1000] [--fetches 30] [--rounds 3]

One broker process; a topic of ``--partitions`` partitions, three of which hold a record. Our
``Consumer`` (fetch.max.wait.ms=100) is assigned every partition through a byte-counting proxy,
reads the three records, then idles for ``--fetches`` Fetch requests: the steady state. Two modes
per round, in the same broker: ``session`` (Fetch v17: one full fetch, then incremental requests
with only the session id and epoch) and ``sessionless`` (our consumer capped at Fetch v6, which
has no session fields: every request names every partition). Per mode: the full first request,
the median steady-state request and response bytes, and the consumer process's CPU per idle
fetch; medians over rounds and the sessionless/session ratios. Every loop is bounded; only the
broker started here is stopped.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pybroker.client import Consumer, fetcher  # noqa: E402
from tests.broker import BrokerProcess  # noqa: E402
from tests.kafka_wire import WireClient  # noqa: E402
from tests.broker.test_fetch_sessions import CountingProxy, produce  # noqa: E402

MODES = {"session": 17, "sessionless": 6}
DEADLINE = 120


def run_mode(mode: str, proxy, topic: str, partitions: int, fetches: int) -> dict:
    fetcher.FETCH_RANGE = (fetcher.FETCH_RANGE[0], MODES[mode])
    fetcher.FETCH_BY_NAME_MAX = min(12, MODES[mode])
    deadline = time.monotonic() + DEADLINE
    before = len(proxy.fetches())
    with Consumer({"bootstrap.servers": f"127.0.0.1:{proxy.port}", "fetch.max.wait.ms": 100,
                   "enable.auto.commit": False, "auto.offset.reset": "earliest"}) as c:
        c.assign([(topic, i, 0) for i in range(partitions)])
        got = 0
        while got < 3 and time.monotonic() < deadline:
            got += len(c.poll(200))
        if got < 3:
            raise RuntimeError(f"{mode}: read {got} of 3 records")
        settled = len(proxy.fetches())
        cpu = time.process_time()
        while len(proxy.fetches()) < settled + fetches and time.monotonic() < deadline:
            c.poll(50)
        cpu = time.process_time() - cpu
        idle = len(proxy.fetches()) - settled
    mine = proxy.fetches()[before:]
    steady = mine[settled - before:settled - before + fetches]
    return {"first": mine[0][2], "request": statistics.median(r[2] for r in steady),
            "response": statistics.median(r[3] for r in steady), "cpu_ms": 1000 * cpu / max(idle, 1),
            "version": steady[0][1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--fetches", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="pybroker-client-sessions-")
    proxy = CountingProxy(lifetime=3600)
    broker = BrokerProcess(os.path.join(tmp, "data"),
                           {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}).start()
    proxy.start(broker.port)
    results = {m: [] for m in MODES}
    try:
        with WireClient(broker.port, timeout=DEADLINE) as w:
            w.create_topic("wide", partitions=args.partitions)
            for p in (0, args.partitions // 2, args.partitions - 1):
                produce(w, "wide", p)
        for i in range(args.rounds):
            for mode in MODES:
                r = run_mode(mode, proxy, "wide", args.partitions, args.fetches)
                results[mode].append(r)
                print(f"  round {i + 1} {mode:12s} v{r['version']:<3d} first {r['first']:8,d} B  steady request "
                      f"{r['request']:7,.0f} B  response {r['response']:7,.0f} B  CPU {r['cpu_ms']:.2f} ms/fetch",
                      flush=True)
    finally:
        proxy.close()
        try:
            broker.stop()
        finally:
            broker.close()
    med = {m: {k: statistics.median(r[k] for r in rs) for k in ("first", "request", "response", "cpu_ms")}
           for m, rs in results.items()}
    print(f"\nour consumer of {args.partitions} partitions, idle, medians of {args.rounds} rounds")
    print(f"  {'mode':12s} {'first B':>9s} {'request B':>10s} {'response B':>11s} {'CPU ms/fetch':>13s}")
    for m, v in med.items():
        print(f"  {m:12s} {v['first']:9,.0f} {v['request']:10,.0f} {v['response']:11,.0f} {v['cpu_ms']:13.2f}")
    s, n = med["session"], med["sessionless"]
    print(f"  sessionless / session: request {n['request'] / s['request']:.0f}x, response "
          f"{n['response'] / s['response']:.0f}x, consumer CPU {n['cpu_ms'] / max(s['cpu_ms'], 1e-9):.1f}x")


if __name__ == "__main__":
    main()

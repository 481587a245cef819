"""Request stalls beside a cleaning broker when other processes keep every CPU busy.

A real broker (``tests/broker.py``'s ``BrokerProcess``) with a compacted topic (4 partitions,
``segment.bytes=20000``, ``min.cleanable.dirty.ratio=0.01``, ``log.cleaner.backoff.ms=50``) that a
confluent-kafka producer keeps dirty (2000 keys, 100-byte values, ``linger.ms=5``), and ``--hogs``
busy-loop processes at normal priority. Meanwhile one confluent-kafka producer (``acks=1``,
``linger.ms=0``) sends one record at a time to a plain topic and waits for each acknowledgement,
for ``--seconds``: the latency percentiles and the longest stall are printed per trial, with the
number of cleanings the broker logged.

Kinds of trial:
  helper       the broker as it is: the cleaner thread keeps its priority, its batch walks run on a
               SCHED_IDLE helper thread that never holds the GIL
  thread-idle  the whole cleaner thread moved to SCHED_IDLE from outside (needs py-spy to find it):
               a thread that takes the GIL at the lowest priority

    python bench/bench_cleaner_stall.py --repeat 3
"""
import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench_cleaner import cleaner_tid, loadavg, median, wait_for_leader  # noqa: E402
from tests.broker import BrokerProcess  # noqa: E402

COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "20000", "min.cleanable.dirty.ratio": "0.01"}


def churn(bootstrap: str, stop: threading.Event) -> None:
    """Keyed records into the compacted topic, so that the cleaner always has work."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1})
    i = 0
    while not stop.is_set():
        p.produce("compacted", key=b"%d" % (i % 2000), value=b"x" * 100, partition=i % 4)
        i += 1
        if i % 1000 == 0:
            p.poll(0)
            time.sleep(0.01)
    p.flush(10)


def trial(kind: str, args) -> dict:
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="pybroker-bench-stall-") as d:
        b = BrokerProcess(os.path.join(d, "data"), {"log.cleaner.backoff.ms": 50}).start()
        hogs = []
        stop = threading.Event()
        feeder = threading.Thread(target=churn, args=(b.bootstrap, stop))
        try:
            if kind == "thread-idle":
                tid = cleaner_tid(b.proc.pid)
                if tid is None:
                    raise RuntimeError("thread-idle trials need py-spy to find the cleaner thread")
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            for f in admin.create_topics([NewTopic("compacted", 4, 1, config=COMPACTED),
                                          NewTopic("latency", 1, 1)]).values():
                f.result(30)
            wait_for_leader(b.bootstrap, ["compacted", "latency"])
            feeder.start()
            hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
            p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "acks": 1})
            lat = []
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                t0 = time.monotonic()
                p.produce("latency", b"v")
                p.flush(30)
                lat.append((time.monotonic() - t0) * 1000)
        finally:
            stop.set()
            if feeder.is_alive():
                feeder.join(30)
            for h in hogs:
                h.kill()
                h.wait()
            cleanings = b.stderr().count("cleaned log topic=compacted")
            b.stop()
            b.close()
    lat.sort()
    q = lambda f: lat[int(f * (len(lat) - 1))]  # noqa: E731
    return {"n": len(lat), "p50": q(0.5), "p99": q(0.99), "p999": q(0.999), "max": lat[-1], "cleanings": cleanings}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="helper,thread-idle")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hogs", type=int, default=3, help="busy-loop processes beside the broker")
    ap.add_argument("--seconds", type=float, default=25)
    ap.add_argument("--dir", default="/tmp")
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs; {loadavg()}")
    kinds = args.kinds.split(",")
    runs = {k: [] for k in kinds}
    for rnd in range(args.repeat):
        for kind in kinds[rnd % len(kinds):] + kinds[:rnd % len(kinds)]:  # each round starts with the next kind
            r = trial(kind, args)
            runs[kind].append(r)
            print(f"{kind:<12} {r['n']:7d} sends  p50 {r['p50']:.1f}  p99 {r['p99']:.1f}  p99.9 {r['p999']:.1f}  "
                  f"max {r['max']:.1f} ms  cleanings {r['cleanings']}  ({loadavg()})", flush=True)
    print(f"\nmedians over {args.repeat} rounds")
    for kind in kinds:
        rs = runs[kind]
        print(f"{kind:<12} p99 {median([r['p99'] for r in rs]):.1f} ms  max {median([r['max'] for r in rs]):.1f} ms "
              f"(worst {max(r['max'] for r in rs):.1f})  cleanings {median([r['cleanings'] for r in rs])}")


if __name__ == "__main__":
    main()

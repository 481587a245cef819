"""Produce and consume throughput of two trees, single node and 3-broker cluster, in alternating rounds.

    python bench/bench_before_after.py --before-tree DIR [--runs 5] [--megabytes 200] [--cluster-megabytes 100]
                                       [--setups single,cluster] [--json FILE]

For a change that must not cost throughput (a refactor): "before" is a checkout whose native core is
built (``--before-tree``; or ``--before-rev`` exported with ``git archive`` and built in place),
"after" is this tree. Each round starts a fresh broker (or cluster) of each side on fresh data, the
side order alternating from round to round, and runs the same load against it:

* single node: a topic of 1 partition; a confluent-kafka producer process sends ``--megabytes`` of
  1 KiB records (acks=1), then a consumer process reads them all from the beginning.
* cluster: three brokers on one real ZooKeeper (Debian's ``zookeeper`` package, one server for the
  whole run, a fresh chroot per cluster), a topic of 3 partitions with replication factor 3 and
  min.insync.replicas=2; the producer uses acks=all, then a consumer reads everything back.

Client settings (every knob a figure depends on): producer linger.ms=5, batch.size=1000000,
compression none, idempotence off, queue.buffering.max.kbytes=1048576; consumer
fetch.max.bytes=52428800, max.partition.fetch.bytes=1048576, fetch.wait.max.ms=500, check.crcs
false. MB/s is the client process's own timing; the broker CPU is the on-CPU time of every broker
thread (/proc/PID/task/*/schedstat) across the client's life. Medians over rounds; ratios are
after / before (above 1: faster after; for CPU per GB, below 1: less CPU after). The machine is
shared, so the load average is printed with every round.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

# the client processes and their settings are those of the protocol-versions benchmark
from bench_protocol_versions import (CONSUMER, PRODUCER, RECORD, TOPIC, consume_role,  # noqa: E402
                                     produce_role)

CLIENT_TIMEOUT_S = 600
START_S = 60
SETUPS = {"single": {"brokers": 1, "partitions": 1, "rf": 1, "acks": "1"},
          "cluster": {"brokers": 3, "partitions": 3, "rf": 3, "acks": "all"}}


# ---- brokers of one tree ----

class Brokers:
    """``brokers`` ``pybroker serve`` processes run from ``tree`` (its own code and native core)."""

    def __init__(self, tree: str, base: str, brokers: int, zk_connect: str | None):
        from bench_produce_versions import Broker
        self.procs = []
        try:
            for node in range(1, brokers + 1):
                overrides = {"broker.id": node}
                if zk_connect:
                    overrides.update({"zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": 6000})
                self.procs.append(Broker(tree, os.path.join(base, f"broker-{node}"), overrides))
        except BaseException:
            self.close()
            raise

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.procs)

    def cpu_s(self) -> float:
        return sum(b.cpu_ns_s() for b in self.procs)

    def close(self) -> None:
        for b in self.procs:
            b.close()


def create_topic(bootstrap: str, brokers: int, partitions: int, rf: int) -> None:
    """Create the topic once every broker is registered, then wait until each partition has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + START_S
    while len(admin.list_topics(timeout=10).brokers) < brokers:
        if time.monotonic() > deadline:
            raise TimeoutError("the cluster did not form")
        time.sleep(0.2)
    configs = {"min.insync.replicas": "2"} if rf >= 3 else {}
    admin.create_topics([NewTopic(TOPIC, partitions, rf, config=configs)])[TOPIC].result(START_S)
    while True:
        md = admin.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{TOPIC} has no leaders with a full ISR")
        time.sleep(0.2)


def client(role: str, brokers: Brokers, records: int, setup: dict) -> dict:
    """Run one client process; its own timing, and the brokers' CPU across its life."""
    cpu = brokers.cpu_s()
    argv = [sys.executable, os.path.abspath(__file__), "--role", role, "--bootstrap", brokers.bootstrap,
            "--records", str(records), "--partitions", str(setup["partitions"]), "--acks", setup["acks"]]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S + 60)
    if done.returncode:
        raise RuntimeError(f"{role} failed: {done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["broker_cpu_s"] = brokers.cpu_s() - cpu
    return out


def new_chroot(zk_connect: str) -> str:
    from kazoo.client import KazooClient
    chroot = f"/bench-{uuid.uuid4().hex[:8]}"
    zk = KazooClient(hosts=zk_connect, timeout=10.0)
    zk.start(10)
    try:
        zk.ensure_path(chroot)
    finally:
        zk.stop()
        zk.close()
    return zk_connect + chroot


def one_round(tree: str, name: str, setup: dict, megabytes: int, zk) -> dict:
    tmp = tempfile.mkdtemp(prefix="pybroker-bench-")
    zk_connect = new_chroot(f"127.0.0.1:{zk.port}") if setup["brokers"] > 1 else None
    brokers = Brokers(tree, tmp, setup["brokers"], zk_connect)
    records = megabytes * 1000 * 1000 // RECORD
    try:
        create_topic(brokers.bootstrap, setup["brokers"], setup["partitions"], setup["rf"])
        out = {"load": os.getloadavg()[0], "megabytes": megabytes}
        out["produce"] = client("producer", brokers, records, setup)
        out["consume"] = client("consumer", brokers, records, setup)
        return out
    finally:
        brokers.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before-tree", default=None)
    ap.add_argument("--before-rev", default="HEAD~1")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--megabytes", type=int, default=200, help="per single-node round")
    ap.add_argument("--cluster-megabytes", type=int, default=100, help="per cluster round")
    ap.add_argument("--setups", default="single,cluster")
    ap.add_argument("--json", default=None, help="write every round's figures to this file")
    ap.add_argument("--role", choices=("producer", "consumer"), help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--records", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--partitions", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--acks", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "producer":
        print(json.dumps(produce_role(args.bootstrap, args.records, args.partitions, args.acks)))
        return
    if args.role == "consumer":
        print(json.dumps(consume_role(args.bootstrap, args.records, args.partitions)))
        return
    from bench_produce_versions import export_before
    from pybroker.controller.zk_server import ZooKeeperServer
    setups = [s for s in args.setups.split(",") if s]
    print(f"load before: {os.getloadavg()}\nproducer: {PRODUCER}\nconsumer: {CONSUMER}\n"
          f"setups: {', '.join(f'{s} {SETUPS[s]}' for s in setups)}", flush=True)
    before = args.before_tree or export_before(args.before_rev)
    zk_dir = tempfile.mkdtemp(prefix="pybroker-bench-zk-")
    zk = ZooKeeperServer(zk_dir).start() if "cluster" in setups else None
    runs = {(s, side): [] for s in setups for side in ("before", "after")}
    try:
        for n in range(args.runs):
            for s in setups:
                mb = args.megabytes if s == "single" else args.cluster_megabytes
                for side in (("before", "after") if n % 2 == 0 else ("after", "before")):
                    r = one_round(before if side == "before" else ROOT, s, SETUPS[s], mb, zk)
                    runs[s, side].append(r)
                    print(f"  round {n + 1} {s:7} {side:6} load {r['load']:5.2f}: " + ", ".join(
                        f"{phase} {mb / r[phase]['seconds']:7.1f} MB/s {r[phase]['broker_cpu_s']:6.2f} CPU s"
                        for phase in ("produce", "consume")), flush=True)
    finally:
        if zk is not None:
            zk.stop()
        shutil.rmtree(zk_dir, ignore_errors=True)
        if args.before_tree is None:
            shutil.rmtree(before, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": {f"{s} {side}": v for (s, side), v in runs.items()}, "args": vars(args)}, f, indent=2)
    med = statistics.median
    print(f"\nmedians of {args.runs} rounds; load average now {os.getloadavg()[0]:.2f}")
    print(f"  {'':24} {'MB/s':>8} {'CPU s/GB':>9}")
    for s in setups:
        for phase in ("produce", "consume"):
            fig = {}
            for side in ("before", "after"):
                xs = runs[s, side]
                fig[side] = (med(x["megabytes"] / x[phase]["seconds"] for x in xs),
                             med(x[phase]["broker_cpu_s"] / (x["megabytes"] / 1000) for x in xs))
                print(f"  {s + ' ' + phase + ' ' + side:24} {fig[side][0]:8.1f} {fig[side][1]:9.2f}")
            print(f"  {s + ' ' + phase + ' after/before':24} {fig['after'][0] / fig['before'][0]:7.3f}x "
                  f"{fig['after'][1] / fig['before'][1]:8.3f}x")


if __name__ == "__main__":
    main()

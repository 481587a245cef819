"""Replication benchmark: a 3-broker pybroker cluster next to a single node and a 3-broker Apache Kafka.

    python bench/bench_cluster.py [--runs 3] [--mb 300] [--latency-seconds 10] [--kafka-home DIR]
                                  [--warmup-mb 500] [--session-timeout-ms 6000] [--json out.json]
                                  [--pybroker-override KEY=VALUE ...] [--hold-guest-memory-gb N]

(bench/bench_cluster.md explains --hold-guest-memory-gb: a VM's first writes to memory it handed
back to its host are slow, and every broker writes its log into such memory.)

Each run visits, in this order and each on fresh data:

1. single-node pybroker (``pybroker serve``): a topic of 3 partitions, acks=1, 1 KiB records:
   produce MB/s, then produce latency p50/p99 at a steady 50 MB/s offered, each on its own topic,
   after --warmup-mb MB sent untimed (a fresh JVM runs far below its steady speed until its JIT
   has compiled the hot paths: Kafka's first hundreds of MB go at a third of its later rate);
2. a 3-broker pybroker cluster (tests/cluster.py, its own ZooKeeper): a topic of 3 partitions with
   replication factor 3 and min.insync.replicas=2, an acks=all producer: MB/s and latency at
   50 MB/s, as in 1, and MB/s once more with an idempotent acks=all producer;
3. a 3-broker Apache Kafka 3.8 cluster in ZooKeeper mode (its own bundled ZooKeeper; each JVM with
   KAFKA_HEAP_OPTS=-Xmx512m, started one after another) with the same topic, load and client
   settings; skipped, with a note, when no Kafka install is found;
4. failover: while an idempotent acks=all producer sends steadily (500 records/s over the 3
   partitions), the leader of partition 0 is killed with SIGKILL; the figure is the time from the
   kill to the first acknowledgement of a partition-0 record that was sent after the old leader
   had died (so only a new leader can have acknowledged it). Measured on the pybroker cluster and,
   for reference, on Kafka, both with the same zookeeper.session.timeout.ms;
5. every broker's peak RSS (VmRSS from /proc/<pid>/status, sampled every 50 ms throughout).

Throughput and latency come from a C client on librdkafka (bench/csrc/rdkafka_cluster_load.c,
compiled at start; needs Debian's librdkafka-dev), else from confluent-kafka (bench/cluster_clients.py),
each in its own process; every producer setting is named in PRODUCER below. Topic creation and the
failover producer use confluent-kafka. Medians over the runs. A part that fails is reported as
failed, with its error, and the others still run. The brokers, the clients and the machine's other
work share the same cores, so the figures are a same-run comparison, not absolute capacity.

Kafka is looked for in --kafka-home (the folder holding bin/kafka-server-start.sh, or one holding a
kafka_2.13-* folder), default ~/.cache/pybroker-kafka.
"""
import argparse
import glob
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_broker import RssSampler  # noqa: E402
from tests.broker import BrokerProcess  # noqa: E402
from tests.cluster import free_ports  # noqa: E402

CLIENTS = os.path.join(ROOT, "bench", "cluster_clients.py")
C_SOURCE = os.path.join(ROOT, "bench", "csrc", "rdkafka_cluster_load.c")
DEFAULT_KAFKA_HOME = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                  "pybroker-kafka")

PARTITIONS = 3
RECORD_SIZE = 1024
LATENCY_RATE_MB = 50
FAILOVER_RATE = 500  # records/s, over all partitions
KAFKA_HEAP = "-Xmx512m"
START_TIMEOUT = 120
STOP_TIMEOUT = 20

# every producer setting, for all three setups (librdkafka names)
PRODUCER = {
    "linger.ms": "5",
    "batch.size": "1000000",
    "batch.num.messages": "100000",
    "message.max.bytes": "1000000",
    "compression.type": "none",
    "max.in.flight.requests.per.connection": "5",
    "queue.buffering.max.kbytes": "1048576",
    "queue.buffering.max.messages": "1000000",
    "message.timeout.ms": "120000",
    "request.timeout.ms": "30000",
    "retry.backoff.ms": "100",
}
SINGLE_PRODUCER = {**PRODUCER, "acks": "1", "enable.idempotence": "false"}
REPLICATED_PRODUCER = {**PRODUCER, "acks": "all", "enable.idempotence": "false"}
# librdkafka's idempotent producer sends a partition's next request only when fewer than 5 of its
# *records* are in flight, so with full batches it keeps one request per partition in flight and its
# MB/s is batch size / acks=all round trip: reported on its own row
IDEMPOTENT_PRODUCER = {**REPLICATED_PRODUCER, "enable.idempotence": "true"}

# broker settings shared by all setups (Kafka's names; Kafka's own defaults for the first two)
BROKER_COMMON = {"log.segment.bytes": 1073741824, "message.max.bytes": 1048588,
                 "socket.request.max.bytes": 104857600, "num.partitions": PARTITIONS}
TARGET_P99_MS = 20
TARGET_RSS_MB = 200
TARGET_FAILOVER_SLACK_S = 2


# ---------------------------------------------------------------- clients

class PartFailed(RuntimeError):
    pass


def last_lines(text: str, n: int = 1) -> str:
    return " | ".join([ln.strip() for ln in text.strip().splitlines() if ln.strip()][-n:])


def run_json(args: list, timeout: float) -> dict:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 and not lines:
        raise PartFailed(f"{os.path.basename(args[0])} {args[1]} exited {done.returncode}: "
                         f"{last_lines(done.stderr)}")
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise PartFailed(f"{os.path.basename(args[0])} {args[1]} printed no result "
                         f"(exit {done.returncode}): {last_lines(done.stderr)}") from None


def py_client(mode: str, bootstrap: str, topic: str, timeout: float = 600, **opts) -> dict:
    args = [sys.executable, CLIENTS, mode, "--bootstrap", bootstrap, "--topic", topic]
    for k, v in opts.items():
        if isinstance(v, (list, tuple)):
            for item in v:
                args += [f"--{k.replace('_', '-')}", str(item)]
        else:
            args += [f"--{k.replace('_', '-')}", json.dumps(v) if isinstance(v, dict) else str(v)]
    return run_json(args, timeout)


def build_c_client(directory: str) -> str | None:
    exe = os.path.join(directory, "rdkafka_cluster_load")
    done = subprocess.run(["cc", "-O2", "-o", exe, C_SOURCE, "-lrdkafka"], capture_output=True, text=True)
    if done.returncode != 0:
        print(f"C client not built (install librdkafka-dev); using confluent-kafka: {done.stderr[-300:]}")
        return None
    return exe


def settings_args(conf: dict) -> list:
    return [f"{k}={v}" for k, v in conf.items()]


def produce_throughput(exe, bootstrap: str, topic: str, count: int, conf: dict) -> dict:
    if exe:
        r = run_json([exe, "produce", bootstrap, topic, str(count), str(RECORD_SIZE), str(PARTITIONS),
                      *settings_args(conf)], 600)
    else:
        r = py_client("produce", bootstrap, topic, partitions=PARTITIONS, count=count, size=RECORD_SIZE,
                      config=conf)
    if r["records"] == 0:
        raise PartFailed(f"no record acknowledged ({r.get('errors')} errors, first: {r.get('first_error')})")
    return {"produce_mb_s": r["bytes"] / r["seconds"] / 1e6, "produce_errors": r.get("errors", 0),
            "produce_warmup_s": r.get("warmup_seconds"),
            "produce_first_error": r.get("first_error") or None, "produce_records": r["records"]}


def produce_latency(exe, bootstrap: str, topic: str, seconds: float, conf: dict) -> dict:
    if exe:
        r = run_json([exe, "latency", bootstrap, topic, str(LATENCY_RATE_MB), str(RECORD_SIZE), str(seconds),
                      str(PARTITIONS), *settings_args(conf)], seconds + 120)
    else:
        r = py_client("latency", bootstrap, topic, timeout=seconds + 120, partitions=PARTITIONS,
                      rate_mb=LATENCY_RATE_MB, size=RECORD_SIZE, seconds=seconds, config=conf)
    if not r["records"] or r.get("p50_ms") is None or r["p50_ms"] < 0:
        raise PartFailed(f"no record acknowledged ({r.get('errors')} errors, first: {r.get('first_error')})")
    return {"latency_p50_ms": r["p50_ms"], "latency_p99_ms": r["p99_ms"], "latency_max_ms": r["max_ms"],
            "latency_rate_mb_s": r["achieved_mb_s"], "latency_errors": r.get("errors", 0),
            "latency_warmup_s": r.get("warmup_seconds")}


def create_topic(bootstrap: str, topic: str, rf: int, topic_configs: dict | None = None) -> dict:
    return py_client("create-topic", bootstrap, topic, timeout=180, partitions=PARTITIONS,
                     replication_factor=rf,
                     topic_config=[f"{k}={v}" for k, v in (topic_configs or {}).items()])


# ---------------------------------------------------------------- failover

def failover(bootstrap: str, topic: str, leader_of_p0, kill, session_timeout_ms: int) -> dict:
    """Kill the leader of partition 0 under a steady acks=all producer; seconds to the first ack after."""
    window = session_timeout_ms / 1000 + 20  # after the kill
    seconds = 15 + window  # the probe announces itself ready within its first seconds
    args = [sys.executable, CLIENTS, "failover", "--bootstrap", bootstrap, "--topic", topic,
            "--partitions", str(PARTITIONS), "--rate", str(FAILOVER_RATE), "--size", str(RECORD_SIZE),
            "--seconds", str(seconds), "--config", json.dumps(IDEMPOTENT_PRODUCER)]
    probe = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: list[str] = []
    ready = threading.Event()
    err_chunks: list[str] = []

    def read_out():
        for line in probe.stdout:
            out.append(line)
            if line.strip() == "ready":
                ready.set()

    readers = [threading.Thread(target=read_out, daemon=True),
               threading.Thread(target=lambda: err_chunks.append(probe.stderr.read()), daemon=True)]
    for t in readers:
        t.start()
    killed = None
    try:
        if not ready.wait(15):
            raise PartFailed("the failover producer had no steady acknowledgements on partition 0 within 15 s")
        killed = leader_of_p0()
        t_kill = time.monotonic()
        kill(killed)
        t_dead = time.monotonic()
        probe.wait(seconds + 90)
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.wait(30)
        for t in readers:
            t.join(10)
    lines = [ln for ln in out if ln.strip() and ln.strip() != "ready"]
    if not lines:
        raise PartFailed(f"failover producer printed no result (exit {probe.returncode}): "
                         f"{last_lines(''.join(err_chunks))}")
    r = json.loads(lines[-1])
    after = [ack for sent, ack, _off in r["acks_p0"] if sent >= t_dead]
    before = [ack for sent, ack, _off in r["acks_p0"] if ack <= t_kill]
    result = {"killed_broker": killed, "kill_seconds": t_dead - t_kill, "session_timeout_ms": session_timeout_ms,
              "failover_delivery_errors": r["error_count"], "failover_unacknowledged": r["unacknowledged"],
              "failover_first_errors": [e[3] for e in r["errors"][:3]]}
    if not after:
        raise PartFailed(f"no partition-0 record sent after the kill of broker {killed} was acknowledged "
                         f"within {window:.0f} s ({r['error_count']} delivery errors, "
                         f"first: {result['failover_first_errors']})")
    result["failover_s"] = min(after) - t_kill
    result["last_ack_before_kill_s"] = (t_kill - max(before)) if before else None
    return result


# ---------------------------------------------------------------- setups

class RssWatch:
    """Peak RSS of a set of processes (one sampler each)."""

    def __init__(self):
        self.samplers: dict = {}

    def watch(self, name, pid: int) -> None:
        if name in self.samplers:  # a restarted process: keep the older peak
            old = self.samplers.pop(name)
            self.samplers[f"{name}-before-restart"] = old
        s = RssSampler(pid)
        s.start()
        self.samplers[name] = s

    def stop(self) -> dict:
        return {str(name): round(s.stop(), 1) for name, s in self.samplers.items()}


def wait_port(port: int, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PartFailed(f"{what} exited with status {proc.returncode} while starting")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise PartFailed(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s")


def find_kafka(home: str | None) -> str | None:
    """The Kafka folder (with bin/kafka-server-start.sh) in or under ``home``."""
    if not home:
        return None
    for candidate in [home] + sorted(glob.glob(os.path.join(home, "kafka_2.13-*"))):
        if os.path.isfile(os.path.join(candidate, "bin", "kafka-server-start.sh")):
            return candidate
    return None


def stop_procs(procs: list, timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM every process (by its PID), wait for them together, SIGKILL whatever is left."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(30)


class KafkaCluster:
    """A ZooKeeper (Kafka's bundled one) and N Kafka brokers in ZooKeeper mode, started one after another."""

    def __init__(self, kafka: str, base_dir: str, brokers: int, session_timeout_ms: int, rss: RssWatch):
        self.kafka, self.base_dir = kafka, base_dir
        self.zk_proc = None
        self.procs: dict[int, subprocess.Popen] = {}
        self._files = []
        zk_port, *ports = free_ports(brokers + 1)
        self.ports = dict(zip(range(1, brokers + 1), ports))
        try:
            self._start_zk(zk_port)
            rss.watch("zookeeper", self.zk_proc.pid)
            for broker_id, port in self.ports.items():
                self._start_broker(broker_id, port, zk_port, session_timeout_ms)
                rss.watch(broker_id, self.procs[broker_id].pid)
        except BaseException:
            self.close()
            raise

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    def _spawn(self, name: str, cmd: list, env: dict) -> subprocess.Popen:
        out = open(os.path.join(self.base_dir, f"{name}.out"), "ab")
        self._files.append(out)
        # the start scripts exec the JVM: the child PID is the JVM's
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **env}, cwd=self.base_dir, start_new_session=True)

    def _start_zk(self, port: int) -> None:
        d = os.path.join(self.base_dir, "zookeeper")
        os.makedirs(os.path.join(d, "data"))
        cfg = os.path.join(d, "zoo.cfg")
        with open(cfg, "w") as f:  # as pybroker's test ZooKeeper: 500 ms ticks, loopback only
            f.write(f"tickTime=500\ndataDir={d}/data\nclientPort={port}\nclientPortAddress=127.0.0.1\n"
                    "minSessionTimeout=1000\nmaxSessionTimeout=60000\nadmin.enableServer=false\n"
                    "4lw.commands.whitelist=ruok,srvr\n")
        self.zk_proc = self._spawn("zookeeper", [os.path.join(self.kafka, "bin", "zookeeper-server-start.sh"), cfg],
                                   {"KAFKA_HEAP_OPTS": "-Xmx128m", "LOG_DIR": os.path.join(d, "logs")})
        wait_port(port, self.zk_proc, START_TIMEOUT, "Kafka's ZooKeeper")

    def _start_broker(self, broker_id: int, port: int, zk_port: int, session_timeout_ms: int) -> None:
        d = os.path.join(self.base_dir, f"kafka-{broker_id}")
        os.makedirs(d)
        props = {"broker.id": broker_id, "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                 "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": os.path.join(d, "data"),
                 "zookeeper.connect": f"127.0.0.1:{zk_port}/kafka",
                 "zookeeper.session.timeout.ms": session_timeout_ms,
                 "min.insync.replicas": 2, "default.replication.factor": 3,
                 "offsets.topic.replication.factor": 3, "transaction.state.log.replication.factor": 3,
                 "transaction.state.log.min.isr": 2, "group.initial.rebalance.delay.ms": 0,
                 **BROKER_COMMON}
        path = os.path.join(d, "server.properties")
        with open(path, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in props.items())
        self.procs[broker_id] = self._spawn(
            f"kafka-{broker_id}", [os.path.join(self.kafka, "bin", "kafka-server-start.sh"), path],
            {"KAFKA_HEAP_OPTS": KAFKA_HEAP, "LOG_DIR": os.path.join(d, "logs")})
        wait_port(port, self.procs[broker_id], START_TIMEOUT, f"Kafka broker {broker_id}")

    def kill(self, broker_id: int) -> None:
        p = self.procs[broker_id]
        p.kill()
        p.wait(30)

    def close(self) -> None:
        stop_procs(list(self.procs.values()))
        if self.zk_proc is not None:
            stop_procs([self.zk_proc])
        for f in self._files:
            f.close()


PYBROKER_EXTRA: dict = {}  # --pybroker-override: pybroker's own keys, on its single node and cluster alike


def pybroker_overrides(session_timeout_ms: int) -> dict:
    return {**BROKER_COMMON, "zookeeper.session.timeout.ms": session_timeout_ms, "min.insync.replicas": 2,
            "default.replication.factor": 3, **PYBROKER_EXTRA}


def guarded(result: dict, part: str, fn, *args) -> None:
    """Run one part; its figures go into ``result``, a failure into result['errors'][part]."""
    try:
        result.update(fn(*args))
    except Exception as exc:  # noqa: BLE001 - a failed part is reported, the others go on
        result.setdefault("errors", {})[part] = f"{type(exc).__name__}: {exc}"
        if os.environ.get("BENCH_TRACEBACK"):
            traceback.print_exc()


def load_parts(exe, args, bootstrap: str, topic: str, rf: int, conf: dict, topic_configs=None,
               idempotent_conf: dict | None = None) -> dict:
    out = {}
    info = create_topic(bootstrap, topic, rf, topic_configs)
    if info.get("topic_configs_refused"):
        out["topic_configs_refused"] = info["topic_configs_refused"]
    if args.warmup_mb > 0:  # untimed: JIT-compiled brokers (Kafka) reach their steady speed first
        create_topic(bootstrap, topic + "-warmup", rf, topic_configs)
        t0 = time.monotonic()
        warm = produce_throughput(exe, bootstrap, topic + "-warmup", args.warmup_mb * 1_000_000 // RECORD_SIZE, conf)
        out.update(warmup_s=time.monotonic() - t0, warmup_mb_s=warm["produce_mb_s"])
    count = args.mb * 1_000_000 // RECORD_SIZE
    out.update(produce_throughput(exe, bootstrap, topic, count, conf))
    if idempotent_conf:
        create_topic(bootstrap, topic + "-idem", rf, topic_configs)
        idem = produce_throughput(exe, bootstrap, topic + "-idem", count, idempotent_conf)
        out["idempotent_mb_s"] = idem["produce_mb_s"]
    lat_topic = topic + "-lat"
    create_topic(bootstrap, lat_topic, rf, topic_configs)
    out.update(produce_latency(exe, bootstrap, lat_topic, args.latency_seconds, conf))
    return out


def run_single(exe, args, tmp: str) -> dict:
    result, rss = {}, RssWatch()
    broker = None
    try:
        broker = BrokerProcess(os.path.join(tmp, "single", "data"), {**BROKER_COMMON, **PYBROKER_EXTRA})
        os.makedirs(os.path.dirname(broker.data_dir), exist_ok=True)
        broker.start()
        rss.watch(0, broker.proc.pid)
        guarded(result, "load", load_parts, exe, args, broker.bootstrap, "bench", 1, SINGLE_PRODUCER)
    except Exception as exc:  # noqa: BLE001
        result.setdefault("errors", {})["start"] = f"{type(exc).__name__}: {exc}"
    finally:
        result["rss_mb"] = rss.stop()
        if broker is not None:
            try:
                broker.stop()
            except Exception:  # noqa: BLE001 - killed below
                pass
            broker.close()
    return result


TOPIC_CONFIGS = {"min.insync.replicas": 2}


def run_cluster_setup(exe, args, start, failover_part) -> dict:
    """Start a cluster (``start(rss)``), run the load and failover parts, always stop it; a failure
    to start is reported in the result, not raised."""
    result, rss = {}, RssWatch()
    cluster = None
    try:
        t0 = time.monotonic()
        cluster = start(rss)
        result["start_s"] = time.monotonic() - t0
        guarded(result, "load", load_parts, exe, args, cluster.bootstrap, "bench", 3, REPLICATED_PRODUCER,
                TOPIC_CONFIGS, IDEMPOTENT_PRODUCER)
        guarded(result, "failover", failover_part, cluster)
    except Exception as exc:  # noqa: BLE001
        result.setdefault("errors", {})["start"] = f"{type(exc).__name__}: {exc}"
    finally:
        result["rss_mb"] = rss.stop()
        if cluster is not None:
            cluster.close()
    return result


def run_pybroker_cluster(exe, args, tmp: str) -> dict:
    def start(rss):
        from tests.cluster import Cluster  # the cluster harness; any failure is this part's failure
        cluster = Cluster(os.path.join(tmp, "pycluster"), brokers=3, zk=None,
                          overrides=pybroker_overrides(args.session_timeout_ms))
        for broker_id in cluster.brokers:
            rss.watch(broker_id, cluster.broker(broker_id).proc.pid)
        return cluster

    def do_failover(cluster):
        def leader_of_p0():
            return cluster.wait_for(lambda: cluster.leader("failover", 0), 30, "a leader of failover-0")
        create_topic(cluster.bootstrap, "failover", 3, TOPIC_CONFIGS)
        r = failover(cluster.bootstrap, "failover", leader_of_p0, cluster.kill, args.session_timeout_ms)
        old = r["killed_broker"]
        r["new_leader"] = cluster.wait_for(lambda: (lambda n: n if n not in (None, -1, old) else None)(
            cluster.leader("failover", 0)), 30, "a new leader of failover-0")
        return r
    return run_cluster_setup(exe, args, start, do_failover)


def run_kafka(exe, args, tmp: str, kafka: str) -> dict:
    def start(rss):
        base = os.path.join(tmp, "kafka")
        os.makedirs(base)
        return KafkaCluster(kafka, base, 3, args.session_timeout_ms, rss)

    def do_failover(cluster):
        leaders = create_topic(cluster.bootstrap, "failover", 3, TOPIC_CONFIGS)["leaders"]
        return failover(cluster.bootstrap, "failover", lambda: int(leaders["0"]), cluster.kill,
                        args.session_timeout_ms)
    return run_cluster_setup(exe, args, start, do_failover)


# ---------------------------------------------------------------- report

SETUPS = (("single", "pybroker, 1 node"), ("cluster", "pybroker, 3 brokers"), ("kafka", "Kafka 3.8, 3 brokers (ZK)"))


# ---------------------------------------------------------------- guest memory

REPORTING = "/sys/module/page_reporting/parameters"
GUEST_MEMORY: dict = {}  # the free-page-reporting settings seen, and what the run changed


def _reporting(name: str) -> str | None:
    try:
        with open(os.path.join(REPORTING, name)) as f:
            return f.read().strip()
    except OSError:
        return None


def hold_guest_memory(gb: int) -> dict:
    """On a VM whose kernel reports freed pages to the host, the first write to each such page
    costs a host fault: about 2.3 ms per MB here (~430 MB/s per core), which caps every setup's
    page-cache writes far below the broker's own speed. With ``gb`` > 0 keep that much freed memory
    in the guest (min_free_ms, max_waiting_mib) and touch it once, so all setups write into memory
    the guest already has, as on a machine whose page cache has filled up. Restored at the end."""
    seen = {n: _reporting(n) for n in ("min_free_ms", "max_waiting_mib", "page_reporting_order")}
    info = {"page_reporting": seen, "held_gb": 0}
    if gb <= 0 or seen["min_free_ms"] is None:
        return info
    try:
        for name, value in (("min_free_ms", "300000"), ("max_waiting_mib", str(gb * 1024))):  # 300000: its maximum here
            with open(os.path.join(REPORTING, name), "w") as f:
                f.write(value)
    except OSError as exc:
        info["error"] = f"cannot change free page reporting: {exc}"
        return info
    info["held_gb"] = gb
    scratch = tempfile.mkstemp(prefix="pybroker-bench-touch-")
    chunk = b"\0" * (1 << 20)
    try:
        for i in range(gb * 1024):  # bounded: gb GB in 1 MiB writes, then freed
            os.pwrite(scratch[0], chunk, i << 20)
    finally:
        os.close(scratch[0])
        os.unlink(scratch[1])
    return info


def release_guest_memory() -> None:
    for name in ("min_free_ms", "max_waiting_mib"):
        old = GUEST_MEMORY.get("page_reporting", {}).get(name)
        if GUEST_MEMORY.get("held_gb") and old is not None:
            try:
                with open(os.path.join(REPORTING, name), "w") as f:
                    f.write(old)
            except OSError:
                pass


def loadavg() -> float:
    """The machine's 1-minute load average: how much else wanted the cores meanwhile."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return -1.0


def peak_broker_rss(r: dict) -> float | None:
    vals = [v for k, v in r.get("rss_mb", {}).items() if k != "zookeeper" and v > 0]
    return max(vals) if vals else None


def medians(runs: list) -> dict:
    med = {}
    for setup, _ in SETUPS:
        med[setup] = {}
        for key in ("produce_mb_s", "idempotent_mb_s", "latency_p50_ms", "latency_p99_ms", "latency_rate_mb_s",
                    "failover_s",
                    "peak_broker_rss_mb"):
            vals = [r[setup][key] for r in runs if isinstance(r.get(setup, {}).get(key), (int, float))]
            if vals:
                med[setup][key] = statistics.median(vals)
                med[setup][key + "_n"] = len(vals)
    return med


def fmt(v, spec: str, n=None, runs=None) -> str:
    if v is None:
        return "failed"
    s = format(v, spec)
    return s + (f" ({n}/{runs} runs)" if n is not None and runs is not None and n < runs else "")


def report(med: dict, runs: list, args, kafka_note: str | None, client: str) -> str:
    n = len(runs)
    g = lambda s, k: med.get(s, {}).get(k)  # noqa: E731
    cell = lambda s, k, spec: ("skipped" if s == "kafka" and kafka_note else  # noqa: E731
                               fmt(g(s, k), spec, g(s, k + "_n"), n))
    yes = lambda ok: "—" if ok is None else ("yes" if ok else "**no**")  # noqa: E731
    single, clus = g("single", "produce_mb_s"), g("cluster", "produce_mb_s")
    tp_ok = None if single is None or clus is None else clus >= single / 3
    p99 = g("cluster", "latency_p99_ms")
    p99_ok = None if p99 is None else p99 <= TARGET_P99_MS
    fo = g("cluster", "failover_s")
    fo_target = args.session_timeout_ms / 1000 + TARGET_FAILOVER_SLACK_S
    fo_ok = None if fo is None else fo <= fo_target
    rss_vals = [g(s, "peak_broker_rss_mb") for s in ("single", "cluster")]
    rss_ok = None if None in rss_vals else max(rss_vals) < TARGET_RSS_MB
    rows = [
        ("produce MB/s, 1 KiB records", "produce_mb_s", ".0f",
         "cluster ≥ 1/3 of 1 node" + (f" (≥ {single / 3:.0f})" if single else ""), tp_ok),
        ("produce MB/s, idempotent producer (acks=all)", "idempotent_mb_s", ".0f", "", None),
        (f"latency p50 at {LATENCY_RATE_MB} MB/s offered (ms)", "latency_p50_ms", ".2f", "", None),
        (f"latency p99 at {LATENCY_RATE_MB} MB/s offered (ms)", "latency_p99_ms", ".2f", f"≤ {TARGET_P99_MS}", p99_ok),
        ("offered rate reached (MB/s)", "latency_rate_mb_s", ".1f", "", None),
        ("failover after kill -9 of p0's leader (s)", "failover_s", ".2f",
         f"≤ session timeout {args.session_timeout_ms / 1000:g} s + {TARGET_FAILOVER_SLACK_S} s", fo_ok),
        ("peak RSS per broker, largest (MB)", "peak_broker_rss_mb", ".0f", f"< {TARGET_RSS_MB} (pybroker)", rss_ok),
    ]
    lines = [f"Medians of {n} run(s); {args.mb} MB per throughput run after {args.warmup_mb} MB of warm-up; "
             f"latency over {args.latency_seconds:g} s; "
             f"{PARTITIONS} partitions; load client: {client}.",
             "1 node: acks=1, no idempotence. 3 brokers: replication factor 3, min.insync.replicas=2, "
             "acks=all (no idempotence; the idempotent producer on its own row and in the failover). "
             f"zookeeper.session.timeout.ms={args.session_timeout_ms} on both clusters.", "",
             "| | " + " | ".join(label for _, label in SETUPS) + " | target | pybroker meets it |",
             "|---|" + "---|" * len(SETUPS) + "---|---|"]
    for label, key, spec, target, ok in rows:
        cells = []
        for s, _ in SETUPS:
            cells.append("—" if key in ("failover_s", "idempotent_mb_s") and s == "single" else cell(s, key, spec))
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {target} | {yes(ok)} |")
    notes = []
    pr = GUEST_MEMORY.get("page_reporting") or {}
    if pr.get("min_free_ms") is not None:
        notes.append(f"free page reporting to the VM host: {pr}; freed memory held in the guest for the run: "
                     f"{GUEST_MEMORY.get('held_gb', 0)} GB"
                     + (f" ({GUEST_MEMORY['error']})" if GUEST_MEMORY.get("error") else ""))
    if PYBROKER_EXTRA:
        notes.append(f"pybroker settings: {PYBROKER_EXTRA}")
    if kafka_note:
        notes.append(f"Kafka skipped: {kafka_note}")
    for i, r in enumerate(runs, 1):
        for s, label in SETUPS:
            for part, err in (r.get(s, {}).get("errors") or {}).items():
                notes.append(f"run {i}, {label}, {part} failed: {err}")
            if r.get(s, {}).get("topic_configs_refused"):
                notes.append(f"run {i}, {label}: topic-level min.insync.replicas refused "
                             f"({r[s]['topic_configs_refused']}); the broker-level min.insync.replicas=2 applies")
            for k in ("produce_errors", "latency_errors", "failover_delivery_errors"):
                if r.get(s, {}).get(k):
                    notes.append(f"run {i}, {label}: {r[s][k]} {k.replace('_', ' ')}")
    loads = [r[s]["loadavg_after"] for r in runs for s, _ in SETUPS if s in r and r[s].get("loadavg_after", -1) >= 0]
    if loads:
        notes.append(f"1-minute load average after each setup: {min(loads):.1f} to {max(loads):.1f} "
                     f"on {os.cpu_count()} cores (brokers, clients and any other work share them)")
    if notes:
        lines += [""] + [f"- {x}" for x in notes]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mb", type=int, default=300, help="MB of 1 KiB records per throughput run")
    ap.add_argument("--latency-seconds", type=float, default=10)
    ap.add_argument("--warmup-mb", type=int, default=500,
                    help="MB sent, untimed, to every setup before it is measured (0: none)")
    ap.add_argument("--session-timeout-ms", type=int, default=6000,
                    help="zookeeper.session.timeout.ms of every clustered broker (pybroker and Kafka)")
    ap.add_argument("--kafka-home", default=None, help=f"Kafka install (default {DEFAULT_KAFKA_HOME})")
    ap.add_argument("--python-client", action="store_true",
                    help="load with confluent-kafka even when the C client builds")
    ap.add_argument("--json", default=None, help="write all runs and the medians here")
    ap.add_argument("--pybroker-override", action="append", default=[], type=lambda kv: tuple(kv.split("=", 1)),
                    metavar="KEY=VALUE", help="a broker setting for pybroker's single node and cluster")
    ap.add_argument("--hold-guest-memory-gb", type=int, default=0,
                    help="on a VM that hands freed memory back to its host (Linux free page reporting), keep "
                         "this many GB of freed memory in the guest for the run and touch it first (root)")
    args = ap.parse_args()
    PYBROKER_EXTRA.update(args.pybroker_override)
    GUEST_MEMORY.update(hold_guest_memory(args.hold_guest_memory_gb))

    kafka_home = args.kafka_home or DEFAULT_KAFKA_HOME
    kafka = find_kafka(kafka_home)
    kafka_note = None if kafka else f"no Kafka install (bin/kafka-server-start.sh) in {kafka_home}"
    if kafka and not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        kafka, kafka_note = None, "no java on PATH or JAVA_HOME"
    build_dir = tempfile.mkdtemp(prefix="pybroker-bench-bin-")
    runs = []
    try:
        exe = None if args.python_client else build_c_client(build_dir)
        client = "C client on librdkafka" if exe else "confluent-kafka (Python)"
        for i in range(args.runs):
            tmp = tempfile.mkdtemp(prefix="pybroker-bench-cluster-")
            try:
                run = {}
                setups = [("single", run_single, ()), ("cluster", run_pybroker_cluster, ())]
                if kafka:
                    setups.append(("kafka", run_kafka, (kafka,)))
                for setup, fn, extra in setups:
                    t0, load0 = time.monotonic(), loadavg()
                    run[setup] = fn(exe, args, tmp, *extra)
                    run[setup].update(seconds=time.monotonic() - t0, loadavg_before=load0, loadavg_after=loadavg())
                    print(f"run {i + 1}/{args.runs}: {setup} done in {run[setup]['seconds']:.0f} s "
                          f"(load average {load0:.1f} -> {run[setup]['loadavg_after']:.1f})", flush=True)
                for r in run.values():  # a peak counts only when the brokers carried the load
                    failed = {"start", "load"} & set(r.get("errors") or {})
                    r["peak_broker_rss_idle_mb" if failed else "peak_broker_rss_mb"] = peak_broker_rss(r)
                runs.append(run)
                if args.json:  # kept up to date run by run: an interrupted benchmark still leaves its figures
                    write_json(args, runs, None, None, client, kafka, kafka_note)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
        release_guest_memory()
    med = medians(runs)
    text = report(med, runs, args, kafka_note, client)
    print(text)
    if args.json:
        write_json(args, runs, med, text, client, kafka, kafka_note)


def write_json(args, runs: list, med: dict | None, text: str | None, client: str, kafka, kafka_note) -> None:
    settings = {"runs": args.runs, "mb": args.mb, "warmup_mb": args.warmup_mb, "latency_seconds": args.latency_seconds,
                "session_timeout_ms": args.session_timeout_ms, "partitions": PARTITIONS, "record_size": RECORD_SIZE,
                "latency_rate_mb": LATENCY_RATE_MB, "failover_rate": FAILOVER_RATE, "client": client,
                "kafka": kafka, "kafka_note": kafka_note, "single_producer": SINGLE_PRODUCER,
                "replicated_producer": REPLICATED_PRODUCER, "idempotent_producer": IDEMPOTENT_PRODUCER,
                "pybroker_overrides": dict(args.pybroker_override), "guest_memory": GUEST_MEMORY,
                "broker_common": BROKER_COMMON, "kafka_heap": KAFKA_HEAP}
    tmp = args.json + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"settings": settings, "complete": med is not None, "runs": runs, "median": med, "table": text},
                  f, indent=2)
    os.replace(tmp, args.json)


if __name__ == "__main__":
    main()

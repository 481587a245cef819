"""The log cleaner: MB/s of log compacted in-process, and produce throughput beside a cleaning broker.

Two parts, each run on its own:

  clean    In-process, one thread: a LogManager over a 1 GiB dirty log (256 MiB segments of
           uncompressed v2 batches, 100 records each, 100-byte values, 11-byte keys drawn
           uniformly from 1 M distinct keys, written straight to segment files) and one whole
           ``LogCleaner.clean_once`` (map build + rewrite + fsync + swap) timed per run; next to
           it a plain read of the same files (the ceiling, warm page cache).
  produce  A real broker process: a compacted topic filled with ~1 GiB of keyed records by
           confluent-kafka (once, cleaner off), then, per trial, a copy of that data dir, a fresh
           broker, and confluent-kafka producing a fixed number of 1 KiB records to a second
           (delete-policy) topic, with ``log.cleaner.enable`` true (the cleaner compacts the
           big topic meanwhile; the broker's "cleaned log" line proves the overlap) or false.

    python bench/bench_cleaner.py clean                    # 1 GiB, 256 MiB segments, 3 runs
    python bench/bench_cleaner.py produce --repeat 5       # 5 rounds: a trial with, one without the cleaner
    python bench/bench_cleaner.py produce --kinds off,on,busy,throttle,nice --py-spy   # the investigation

Data goes under --dir (default /tmp) and is deleted at the end.
"""
import argparse
import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from pybroker import core  # noqa: E402
from pybroker.log.cleaner import Cleaner, CleanerSettings, Throttler  # noqa: E402
from pybroker.log.config import LogConfig  # noqa: E402
from pybroker.log.log import Log, now_ms  # noqa: E402
from pybroker.log.manager import LogManager  # noqa: E402
from pybroker.log.segment import LogSegment, file_stem  # noqa: E402
from pybroker.records import CRC_START, Record, build_batch  # noqa: E402

PER_BATCH = 100
LOAD_FACTOR = 0.9
CLEANED_LINE = re.compile(r'ts=(\S+) .*msg="(cleaned log topic=(\S+) [^"]*)"')
FIELD = re.compile(r"(\w+)=(\S+)")


def loadavg() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def median(xs):
    return statistics.median(xs)


# ---- part 1: in-process -----------------------------------------------------------------------

def write_segments(directory: str, size: int, segment_bytes: int, keys: int, seed: int = 1) -> int:
    """Full dirty segments, ``size`` bytes in all, plus a one-batch active segment; returns the distinct keys.

    One batch template, keys patched in with numpy (fixed-width digits), then base offset and CRC
    per batch: a 256 MiB segment takes about a second.
    """
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    stamp = now_ms()
    template = build_batch([Record(bytes(range(100)), b"key-%07d" % i) for i in range(PER_BATCH)],
                           base_timestamp=stamp)
    length = len(template)
    digits = np.array([template.index(b"key-%07d" % i) + 4 for i in range(PER_BATCH)])
    seen = np.zeros(keys, dtype=bool)
    crc32c = core.crc.crc32c
    per_segment = segment_bytes // length  # whole segments, as many batches as segment.bytes takes
    offset = 0
    for _ in range(max(1, round(size / segment_bytes))):
        n = per_segment
        arr = np.tile(np.frombuffer(bytes(template), dtype=np.uint8), (n, 1))
        ks = rng.integers(0, keys, size=(n, PER_BATCH))
        seen[ks.ravel()] = True
        for j in range(7):  # the key's 7 decimal digits, most significant first
            arr[:, digits + j] = (ks // 10 ** (6 - j)) % 10 + 48
        arr[:, 0:8] = (offset + PER_BATCH * np.arange(n, dtype=">i8")).astype(">i8").view(np.uint8).reshape(n, 8)
        flat = memoryview(arr.reshape(-1)).cast("B")
        for b in range(n):
            start = b * length
            flat[start + 17:start + 21] = crc32c(flat[start + CRC_START:start + length]).to_bytes(4, "big")
        with open(os.path.join(directory, file_stem(offset) + ".log"), "wb") as f:
            f.write(flat)
        offset += n * PER_BATCH
    active = build_batch([Record(b"tail", b"tail-key")], base_offset=offset, base_timestamp=stamp)
    with open(os.path.join(directory, file_stem(offset) + ".log"), "wb") as f:
        f.write(active)
    return int(seen.sum())


def plain_read(paths) -> float:
    buf = bytearray(1 << 20)
    t = time.perf_counter()
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass
    return time.perf_counter() - t


class CleanedLines(logging.Handler):
    """Keeps the fields of the cleaner's "cleaned log" lines."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        text = record.getMessage()
        if text.startswith("cleaned log "):
            self.lines.append({k: v for k, v in FIELD.findall(text)})


def schedstat() -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one) of the calling thread."""
    with open("/proc/thread-self/schedstat") as f:
        on_cpu, waiting, _ = f.read().split()
    return int(on_cpu) / 1e9, int(waiting) / 1e9


class PhaseTimer:
    """Wall seconds spent in a few methods of the cleaning path, wrapped for one run and restored."""

    PHASES = {"fsync": (LogSegment, "flush"), "index": (LogSegment, "recover"), "swap": (Log, "replace_segments")}

    def __enter__(self):
        self.seconds = dict.fromkeys(self.PHASES, 0.0)
        self._saved = []
        for name, (cls, attr) in self.PHASES.items():
            original = getattr(cls, attr)
            self._saved.append((cls, attr, original))
            setattr(cls, attr, self._timed(name, original))
        return self

    def _timed(self, name, original):
        def timed(*a, **kw):
            t = time.perf_counter()
            try:
                return original(*a, **kw)
            finally:
                self.seconds[name] += time.perf_counter() - t
        return timed

    def __exit__(self, *exc):
        for cls, attr, original in self._saved:
            setattr(cls, attr, original)


def clean_run(pristine: str, run_dir: str, config: LogConfig, map_bytes: int, lines: CleanedLines) -> dict:
    """One whole cleaning of a fresh copy of the pristine log, timed around ``clean_once``."""
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(pristine, run_dir)
    manager = LogManager(run_dir, config, background=False,
                         cleaner=CleanerSettings(dedupe_buffer_size=map_bytes)).startup()
    try:
        (lg,) = manager.logs.values()
        dirty = [s.log_path for s in lg.segments[:-1]]
        log_bytes_in = sum(s.size for s in lg.segments[:-1])  # the log cleaned: every segment but the active one
        plain_read(dirty)  # warm (the copy is already cached; this makes sure)
        read_s = plain_read(dirty)
        cleaner = Cleaner(map_bytes, LOAD_FACTOR, Throttler(float("inf"), threading.Event()))
        cleaner.offset_map.clear()  # a long-lived cleaner's map is paged in already
        before = len(lines.lines)
        with PhaseTimer() as phases:
            (on_cpu, waiting), t = schedstat(), time.perf_counter()
            worked = manager.cleaner.clean_once(cleaner, now=now_ms())
            wall = time.perf_counter() - t
            on_cpu2, waiting2 = schedstat()
        cpu, runq = on_cpu2 - on_cpu, waiting2 - waiting
        if not worked or len(lines.lines) != before + 1:
            raise RuntimeError("clean_once did not clean the log")
        fields = lines.lines[-1]
        om = cleaner.offset_map
        result = {"wall": wall, "cpu": cpu, "runq": runq, **phases.seconds, "read_s": read_s,
                  "map_s": float(fields["map_seconds"]),
                  "bytes_in": log_bytes_in, "bytes_read": int(fields["bytes_read"]),
                  "bytes_written": int(fields["bytes_written"]),
                  "records_read": int(fields["records_read"]), "records_kept": int(fields["records_kept"]),
                  "segments_in": int(fields["segments_in"]), "segments_out": int(fields["segments_out"]),
                  "keys": om.size, "map_bytes": om.memory_bytes, "segments_after": len(lg.segments)}
    finally:
        manager.shutdown()
        shutil.rmtree(run_dir, ignore_errors=True)
    return result


def part_clean(args) -> None:
    base = os.path.join(args.dir, "pybroker-bench-cleaner")
    pristine_root = os.path.join(base, "pristine")
    pristine = os.path.join(pristine_root, "compacted-0")
    segment_bytes = args.segment_mb << 20
    config = LogConfig(segment_bytes=segment_bytes, cleanup_policy="compact")
    lines = CleanedLines()
    logging.getLogger("pybroker.log.cleaner").addHandler(lines)
    logging.getLogger("pybroker.log.cleaner").setLevel(logging.INFO)
    try:
        shutil.rmtree(base, ignore_errors=True)
        t = time.perf_counter()
        distinct = write_segments(pristine, args.size_mb << 20, segment_bytes, args.keys)
        # the one-record active segment adds one more key to the log, not to the dirty part
        print(f"wrote {args.size_mb} MiB in {time.perf_counter() - t:.1f} s: {distinct} distinct keys; {loadavg()}")
        snug = (int(distinct / LOAD_FACTOR) + 2) * 24  # just big enough: every key fits at the load factor
        maps = [("128 MiB (default)", 128 << 20), (f"{snug / 2**20:.1f} MiB (just enough)", snug)]
        print(f"{'dedupe buffer':<24} {'run':>3} {'MB/s':>5} {'wall s':>6} {'cpu s':>5} {'runq s':>6} "
              f"{'map s':>5} {'fsync':>5} {'index':>5} {'swap':>5} {'read MB/s':>9} {'in MB':>7} {'out MB':>6} "
              f"{'ratio':>5} {'kept':>7} {'B/key':>6} seg  load")
        summary = []
        for name, map_bytes in maps:
            runs = []
            for i in range(args.repeat):
                r = clean_run(pristine_root, os.path.join(base, "run"), config, map_bytes, lines)
                if r["records_kept"] != distinct or r["keys"] != distinct:
                    raise RuntimeError(f"kept {r['records_kept']} records, map holds {r['keys']} keys, "
                                       f"the log has {distinct}")
                runs.append(r)
                print(f"{name:<24} {i + 1:>3} {r['bytes_in'] / r['wall'] / 1e6:5.0f} {r['wall']:6.2f} "
                      f"{r['cpu']:5.2f} {r['runq']:6.2f} {r['map_s']:5.2f} {r['fsync']:5.2f} {r['index']:5.2f} "
                      f"{r['swap']:5.2f} {r['bytes_in'] / r['read_s'] / 1e6:9.0f} "
                      f"{r['bytes_in'] / 1e6:7.1f} {r['bytes_written'] / 1e6:6.1f} "
                      f"{r['bytes_in'] / r['bytes_written']:5.2f} {r['records_kept']:7d} "
                      f"{r['map_bytes'] / r['keys']:6.1f} {r['segments_in']}->{r['segments_out']}  {loadavg()}",
                      flush=True)
            summary.append((name, runs))
        print("\nmedians")
        for name, runs in summary:
            mbps = median([r["bytes_in"] / r["wall"] / 1e6 for r in runs])
            read = median([r["bytes_in"] / r["read_s"] / 1e6 for r in runs])
            map_mbps = median([r["bytes_in"] / r["map_s"] / 1e6 for r in runs])
            rest = median([r["wall"] - r["map_s"] for r in runs])
            cpu_mbps = median([r["bytes_in"] / r["cpu"] / 1e6 for r in runs])
            phases = ", ".join(f"{k} {median([r[k] for r in runs]):.2f} s"
                               for k in ("cpu", "runq", "fsync", "index", "swap"))
            r0 = runs[0]
            print(f"{name}: cleaner {mbps:.0f} MB/s (map pass {map_mbps:.0f} MB/s, rewrite+fsync+swap {rest:.2f} s), "
                  f"read ceiling {read:.0f} MB/s ({mbps / read * 100:.1f}%), per CPU second {cpu_mbps:.0f} MB/s, "
                  f"{phases}, log in {r0['bytes_in']} B (read in all {r0['bytes_read']} B), "
                  f"out {r0['bytes_written']} B, ratio {r0['bytes_in'] / r0['bytes_written']:.2f}, "
                  f"records {r0['records_read']} -> {r0['records_kept']}, map {r0['map_bytes']} B "
                  f"= {r0['map_bytes'] / r0['keys']:.1f} B/key")
    finally:
        logging.getLogger("pybroker.log.cleaner").removeHandler(lines)
        shutil.rmtree(base, ignore_errors=True)


# ---- part 2: a broker process -----------------------------------------------------------------

BIG, LOAD = "compacted", "load"


def producer_config(bootstrap: str, linger_ms: int) -> dict:
    """Every knob that matters set explicitly, so that a librdkafka upgrade changes nothing."""
    return {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": linger_ms, "batch.size": 1000000,
            "batch.num.messages": 1000000, "compression.type": "none", "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 5, "message.max.bytes": 1000000,
            "queue.buffering.max.messages": 2000000, "queue.buffering.max.kbytes": 2097151,
            "socket.send.buffer.bytes": 0, "socket.nagle.disable": True, "partitioner": "consistent_random",
            "log.connection.close": False}


def produce(bootstrap: str, topic: str, values, keys=None, linger_ms: int = 5, timeout: float = 300) -> tuple:
    """(start, end) wall-clock times of producing every value (acks=1, all acknowledged)."""
    from confluent_kafka import Producer
    p = Producer(producer_config(bootstrap, linger_ms))
    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(str(err))

    deadline = time.monotonic() + timeout
    start = time.time()
    for i, value in enumerate(values):
        key = None if keys is None else keys[i]
        while True:
            try:
                p.produce(topic, value, key, partition=0, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.001)
                if time.monotonic() > deadline:
                    raise TimeoutError("the producer's queue stayed full")
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(max(1.0, deadline - time.monotonic()))
    end = time.time()
    if left or errors:
        raise RuntimeError(f"{left} records not acknowledged, {len(errors)} errors: {errors[:3]}")
    return start, end


def wait_for_leader(bootstrap: str, topics, timeout: float = 60) -> None:
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=5)
        if all(t in md.topics and md.topics[t].error is None and md.topics[t].partitions
               and md.topics[t].partitions[0].leader >= 0 for t in topics):
            return
        time.sleep(0.1)  # bounded poll for the broker's first leadership
    raise TimeoutError(f"no leader for {topics}")


def log_bytes(data_dir: str, topic: str) -> int:
    d = os.path.join(data_dir, f"{topic}-0")
    return sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".log"))


def create_topics(bootstrap: str, args) -> None:
    """The compacted topic and the delete-policy topic the trials produce to."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic(BIG, 1, 1, config={"cleanup.policy": "compact", "segment.bytes": str(args.segment_mb << 20),
                                    "min.cleanable.dirty.ratio": "0.5", "min.compaction.lag.ms": "0"}),
        NewTopic(LOAD, 1, 1, config={"cleanup.policy": "delete"})])
    for f in futures.values():
        f.result(30)


def fill(data_dir: str, args) -> dict:
    """A broker with the cleaner off; the compacted topic gets ``--size-mb`` of keyed 100-byte records."""
    from tests.broker import BrokerProcess
    b = BrokerProcess(data_dir, broker_overrides(False)).start()
    try:
        create_topics(b.bootstrap, args)
        wait_for_leader(b.bootstrap, [BIG, LOAD])
        rng = np.random.default_rng(1)
        key_list = [b"key-%07d" % i for i in range(args.keys)]
        value = bytes(range(100))
        target = (args.size_mb << 20) + (8 << 20)  # the dirty part plus an active segment
        t = time.perf_counter()
        rounds = 0
        while log_bytes(data_dir, BIG) < target and rounds < 100:
            ks = rng.integers(0, args.keys, size=1_000_000)
            produce(b.bootstrap, BIG, [value] * len(ks), [key_list[k] for k in ks], linger_ms=50)
            rounds += 1
        seconds = time.perf_counter() - t
        size = log_bytes(data_dir, BIG)
        print(f"filled {BIG}: {size / 2**20:.0f} MiB, {rounds} M records in {seconds:.1f} s "
              f"({size / seconds / 1e6:.0f} MB/s); {loadavg()}", flush=True)
    finally:
        b.stop()
        b.close()
    return {"bytes": size, "records": rounds * 1_000_000}


def broker_overrides(cleaner: bool, io_max: float = 0) -> dict:
    return {"log.cleaner.enable": str(cleaner).lower(), "log.cleaner.backoff.ms": "200",
            "log.cleaner.threads": "1", "log.cleaner.dedupe.buffer.size": str(128 << 20),
            "log.cleaner.io.max.bytes.per.second": str(io_max) if io_max else "1.7976931348623157E308",
            "log.flush.interval.messages": str(2**63 - 1), "num.partitions": "1", "log.level": "INFO"}


def cleaned_line(stderr: str, topic: str):
    """(start, end, fields) of the broker's "cleaned log" line for ``topic``, or None."""
    for line in stderr.splitlines():
        m = CLEANED_LINE.match(line)
        if m and m.group(3) == topic:
            fields = dict(FIELD.findall(m.group(2)))
            end = time.mktime(time.strptime(m.group(1)[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
            end += float("0" + m.group(1)[19:-1])
            return end - float(fields["seconds"]), end, fields
    return None


def thread_times(pid) -> dict:
    """{tid: (seconds on a CPU, seconds runnable but waiting for one)} of every thread of ``pid``."""
    out = {}
    task = f"/proc/{pid}/task"
    for tid in os.listdir(task):
        try:
            with open(f"{task}/{tid}/schedstat") as f:
                on_cpu, waiting, _ = f.read().split()
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        out[int(tid)] = (int(on_cpu) / 1e9, int(waiting) / 1e9)
    return out


def thread_deltas(before: dict, after: dict, main: int) -> dict:
    """The main thread's CPU and run-queue seconds between two ``thread_times``, and the other threads' CPU."""
    d = {tid: (c - before.get(tid, (0, 0))[0], w - before.get(tid, (0, 0))[1]) for tid, (c, w) in after.items()}
    others = [c for tid, (c, _) in d.items() if tid != main]
    return {"main_cpu": d.get(main, (0, 0))[0], "main_runq": d.get(main, (0, 0))[1],
            "other_cpu": sum(others), "busiest_other_cpu": max(others, default=0.0)}


def gil_samples(raw_path: str) -> dict:
    """Samples per thread name (and the cleaner's top frames) of a ``py-spy record --gil -f raw`` file."""
    threads, frames = {}, {}
    with open(raw_path) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            parts = stack.split(";")
            name = parts[0].split(": ", 1)[-1]
            threads[name] = threads.get(name, 0) + int(count)
            if name.startswith("pybroker-cleaner"):
                leaf = next((p for p in reversed(parts) if "cleaner.py" in p), parts[-1])
                frames[leaf] = frames.get(leaf, 0) + int(count)
    return {"threads": threads, "cleaner_frames": sorted(frames.items(), key=lambda kv: -kv[1])[:5]}


def cleaner_tid(pid: int) -> int | None:
    """The OS thread id of the broker's cleaner thread (None: no cleaner, or no py-spy), found by name."""
    if shutil.which("py-spy") is None:
        return None
    out = subprocess.run(["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r'Thread (\d+) \(\w+\): "pybroker-cleaner-0"', out)
    return int(m.group(1)) if m else None


def wait_until_cleaning(pid: int, tid: int, timeout: float = 60) -> None:
    """Until the cleaner thread has used 50 ms of CPU: the produce then runs inside the cleaning."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if thread_times(pid).get(tid, (0, 0))[0] >= 0.05:
            return
        time.sleep(0.01)  # bounded poll of the thread's schedstat
    raise TimeoutError("the cleaner did not start")


# what each kind of trial changes: (cleaner enabled, io max bytes/s, busy processes, renice the cleaner)
KINDS = {"off": (False, 0, 0, False), "on": (True, 0, 0, False), "busy": (False, 0, 1, False),
         "throttle": (True, None, 0, False), "nice": (True, 0, 0, True), "thread-idle": (True, 0, 0, "idle")}


def trial(pristine: str, trial_dir: str, kind: str, args) -> dict:
    from tests.broker import BrokerProcess
    cleaner, io_max, busy, nice = KINDS[kind]
    shutil.rmtree(trial_dir, ignore_errors=True)
    shutil.copytree(pristine, trial_dir)
    b = BrokerProcess(trial_dir, broker_overrides(cleaner, args.io_max if io_max is None else io_max))
    hogs = []
    try:
        b.start()
        tid = cleaner_tid(b.proc.pid)  # in every trial, so that every broker is paused alike
        if nice and tid is None:
            raise RuntimeError("the nice trials need py-spy to find the cleaner thread")
        if nice == "idle":  # the whole cleaner thread in SCHED_IDLE, GIL and all (as before the helper thread)
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        elif nice:  # what the cleaner thread could do to itself: os.setpriority on its native id
            os.setpriority(os.PRIO_PROCESS, tid, 19)
        wait_for_leader(b.bootstrap, [LOAD])
        if cleaner and tid is not None:  # without py-spy the produce may start before the cleaning
            wait_until_cleaning(b.proc.pid, tid)
        value = bytes(range(256)) * 4
        load0 = os.getloadavg()[0]
        for _ in range(busy * args.busy):  # a control: a CPU-bound process in the cleaner's place
            hogs.append(subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()+%f\n"
                                          "while time.time()<t: pass" % args.busy_seconds]))
        spy = None
        if args.py_spy and cleaner:  # which broker threads hold the GIL while the cleaner runs
            spy_raw = os.path.join(args.dir, f"pybroker-bench-cleaner-{os.getpid()}.raw")
            spy = subprocess.Popen(["py-spy", "record", "--pid", str(b.proc.pid), "--gil", "--threads",
                                    "-r", "100", "-f", "raw", "-o", spy_raw],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        before, client_before = thread_times(b.proc.pid), thread_times(os.getpid())
        start, end = produce(b.bootstrap, LOAD, [value] * args.records)
        after, client_after = thread_times(b.proc.pid), thread_times(os.getpid())
        result = {"start": start, "end": end, "mbps": args.records * len(value) / (end - start) / 1e6,
                  "load": load0, "cleaning": None, "broker": thread_deltas(before, after, b.proc.pid),
                  "client_cpu": sum(c for c, _ in client_after.values()) - sum(c for c, _ in client_before.values())}
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
            result["gil"] = gil_samples(spy_raw)
            result["gil"]["seconds"] = end - start
            os.remove(spy_raw)
        if cleaner:
            deadline = time.monotonic() + 300
            found = None
            while found is None and time.monotonic() < deadline and b.alive():
                found = cleaned_line(b.stderr(), BIG)
                if found is None:
                    time.sleep(0.2)  # bounded poll for the cleaner's line
            if found is None:
                raise RuntimeError("the broker never logged a cleaning of the compacted topic")
            c_start, c_end, fields = found
            overlap = max(0.0, min(end, c_end) - max(start, c_start))
            result["cleaning"] = {"start": c_start, "end": c_end, "mbps": float(fields["mb_per_s"]),
                                  "seconds": float(fields["seconds"]), "bytes_read": int(fields["bytes_read"]),
                                  "overlap": overlap / (end - start)}
    finally:
        for h in hogs:
            h.kill()
            h.wait(30)
        b.stop()
        b.close()
        os.remove(b.stderr_path)
        shutil.rmtree(trial_dir, ignore_errors=True)
    return result


def part_produce(args) -> None:
    base = os.path.join(args.dir, "pybroker-bench-cleaner-broker")
    pristine = os.path.join(base, "pristine")
    try:
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(base)
        fill(pristine, args)
        kinds = args.kinds.split(",")
        runs = {k: [] for k in kinds}
        paired = {k: [] for k in kinds}  # each trial over the cleaner-off trial of the same round
        for i in range(args.repeat * len(kinds)):
            rnd, j = divmod(i, len(kinds))
            kind = kinds[(j + rnd) % len(kinds)]  # each round starts with the next kind
            r = trial(pristine, os.path.join(base, f"trial-{i}"), kind, args)
            runs[kind].append(r)
            if j == len(kinds) - 1 and "off" in runs:
                for k in kinds:
                    paired[k].append(runs[k][-1]["mbps"] / runs["off"][-1]["mbps"])
            c = r["cleaning"]
            extra = ""
            if c:
                extra = (f"  cleaning {c['seconds']:.2f} s at {c['mbps']:.0f} MB/s, starts "
                         f"{c['start'] - r['start']:+.2f} s, ends {c['end'] - r['start']:+.2f} s from the "
                         f"produce start; overlap {c['overlap'] * 100:.0f}% of the produce")
            br = r["broker"]
            print(f"{kind:<8} produce {args.records} x 1 KiB: {r['mbps']:6.1f} MB/s in {r['end'] - r['start']:.2f} s"
                  f"  (load1 before {r['load']:.2f}); broker main thread cpu {br['main_cpu']:.2f} s, waiting "
                  f"for a CPU {br['main_runq']:.2f} s; other broker threads cpu {br['other_cpu']:.2f} s "
                  f"(busiest {br['busiest_other_cpu']:.2f}); client cpu {r['client_cpu']:.2f} s{extra}", flush=True)
            if "gil" in r:
                g = r["gil"]
                print(f"     py-spy --gil samples at 100 Hz over the produce ({g['seconds']:.2f} s): {g['threads']}; "
                      f"cleaner: {g['cleaner_frames']}", flush=True)
        print(f"\nmedians over {args.repeat} rounds; {loadavg()}")
        off = median([r["mbps"] for r in runs["off"]]) if "off" in runs else None
        for kind in kinds:
            mbps = median([r["mbps"] for r in runs[kind]])
            line = f"{kind:<8} {mbps:7.1f} MB/s"
            if off:
                line += f"  median/median-off {mbps / off:.3f}"
            if paired[kind]:
                line += f"  median of paired ratios {median(paired[kind]):.3f} {[round(x, 2) for x in paired[kind]]}"
            cleanings = [r["cleaning"] for r in runs[kind] if r["cleaning"]]
            if cleanings:
                line += (f"  cleaning {median([c['mbps'] for c in cleanings]):.0f} MB/s, overlap "
                         f"{median([c['overlap'] for c in cleanings]) * 100:.0f}%")
            print(line)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["clean", "produce"])
    ap.add_argument("--size-mb", type=int, default=1024, help="dirty bytes of the compacted log")
    ap.add_argument("--segment-mb", type=int, default=256, help="segment.bytes of the compacted log")
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--records", type=int, default=300_000, help="produce: 1 KiB records per trial")
    ap.add_argument("--kinds", default="off,on", help="produce: trials per round, among " + ",".join(KINDS))
    ap.add_argument("--io-max", type=float, default=100e6,
                    help="produce: log.cleaner.io.max.bytes.per.second of the throttle trials")
    ap.add_argument("--busy", type=int, default=1, help="produce: CPU-bound processes of the busy trials")
    ap.add_argument("--busy-seconds", type=float, default=20)
    ap.add_argument("--py-spy", action="store_true",
                    help="produce: py-spy --gil on the broker during the trials with the cleaner on")
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs; {loadavg()}")
    part_clean(args) if args.part == "clean" else part_produce(args)


if __name__ == "__main__":
    main()

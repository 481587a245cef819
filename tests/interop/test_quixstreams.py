"""A real stateful quixstreams application on pybroker, with its state in compacted changelog topics.

The application (tests/quix_app.py, its own process) keeps per-key running totals in ``State`` and
per-key tumbling-window sums; quixstreams creates a compacted changelog topic for each store. The
test feeds keyed input in rounds, compares every output record with a plain Python model, waits
for the broker's cleaner to compact the changelog, stops the application, deletes its local state
directory, feeds more input and restarts it: the results must continue from the old totals and
windows, which only the compacted changelog can give back.
"""
import collections
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.broker import ROOT
from tests.clientutil import DEADLINE, finish_broker, start_broker, wait_until
from tests.quix_env import quixstreams_python

WINDOW_MS = 1000
BATCH_BYTES = 512  # producer batches stay below the test broker's small log.segment.bytes

APP = os.path.join(ROOT, "tests", "quix_app.py")
GROUP = "totals"
INPUT = "amounts"
OUTPUT = "totals-out"
PARTITIONS = 2
KEYS = 8
ROUND = 40  # input records per round; the application commits each round before the next one
PHASE1_ROUNDS = 5
PHASE2_ROUNDS = 2
STEP_MS = 87  # event time between input records: ~1.4 per key and window; rounds end mid-window
CLEANING_DEADLINE = 120
SEGMENT_BYTES = 2 * BATCH_BYTES  # small segments roll often: the cleaner gets closed segments to clean
BROKER = {"log.segment.bytes": str(SEGMENT_BYTES), "log.cleaner.backoff.ms": "100",
          "group.initial.rebalance.delay.ms": "0"}


@dataclass
class Model:
    """The application's expected output, computed plainly from the input in order."""
    running: dict = field(default_factory=lambda: collections.defaultdict(list))  # key -> [(sum, count)]
    windows: dict = field(default_factory=dict)  # (key, start) -> (sum, count)
    latest: dict = field(default_factory=dict)  # key -> largest event time seen
    records: int = 0

    def add(self, key: str, amount: int, ts: int) -> None:
        total, count = self.running[key][-1] if self.running[key] else (0, 0)
        self.running[key].append((total + amount, count + 1))
        start = ts - ts % WINDOW_MS
        total, count = self.windows.get((key, start), (0, 0))
        self.windows[(key, start)] = (total + amount, count + 1)
        self.latest[key] = max(ts, self.latest.get(key, ts))
        self.records += 1

    def closed_windows(self) -> list:
        """Windows that ``final()`` has emitted: grace 0, closed once the key saw a later event time."""
        return sorted((key, start, start + WINDOW_MS, total, count)
                      for (key, start), (total, count) in self.windows.items()
                      if start + WINDOW_MS <= self.latest[key])


class Feed:
    """Keyed input rounds: key i % KEYS, partition by key, increasing event time."""

    def __init__(self, bootstrap: str, model: Model):
        self.producer = Producer({"bootstrap.servers": bootstrap, "batch.size": BATCH_BYTES, "linger.ms": 5})
        self.model = model
        self.base_ts = int(time.time() * 1000) // WINDOW_MS * WINDOW_MS - 600_000  # recent, so no retention
        self.sent = 0
        self.ends = [0] * PARTITIONS  # acknowledged end offset per partition

    def round(self) -> None:
        errors = []

        def acked(err, msg):
            if err is not None:
                errors.append(err)
            else:
                self.ends[msg.partition()] = max(self.ends[msg.partition()], msg.offset() + 1)

        for i in range(self.sent, self.sent + ROUND):
            k = i % KEYS
            key, amount, ts = f"key-{k}", 1 + (i * 7) % 13, self.base_ts + i * STEP_MS
            self.producer.produce(INPUT, key=key, value=json.dumps({"amount": amount}).encode(),
                                  partition=k % PARTITIONS, timestamp=ts, on_delivery=acked)
            self.model.add(key, amount, ts)
        assert self.producer.flush(DEADLINE) == 0 and not errors, errors[:3]
        self.sent += ROUND


class Output:
    """Everything the application wrote to OUTPUT so far, read incrementally."""

    def __init__(self, bootstrap: str):
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "output-reader",
                                  "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(OUTPUT, 0, 0)])
        self.running = collections.defaultdict(list)
        self.windows = []

    def drain(self) -> None:
        for msg in self.consumer.consume(500, 0.2):
            assert msg.error() is None, msg.error()
            key, value = msg.key().decode(), json.loads(msg.value())
            if value["kind"] == "running":
                self.running[key].append((value["sum"], value["count"]))
            else:
                self.windows.append((key, value["start"], value["end"], value["sum"], value["count"]))

    def wait_for(self, model: Model, app: "App", timeout: float = DEADLINE) -> None:
        """Poll until the output holds as many records as the model (or the app died), then compare exactly."""
        want_windows = model.closed_windows()

        def caught_up():
            self.drain()
            got = sum(len(v) for v in self.running.values())
            return (got >= model.records and len(self.windows) >= len(want_windows)) or not app.alive()

        wait_until(caught_up, timeout)
        assert app.alive(), app.log()[-3000:]
        assert dict(self.running) == dict(model.running), app.log()[-3000:]
        assert sorted(self.windows) == want_windows, app.log()[-3000:]

    def close(self) -> None:
        self.consumer.close()


class App:
    """tests/quix_app.py in its own process, stopped by PID."""

    def __init__(self, bootstrap: str, state_dir: str, log_path: str):
        python, why = quixstreams_python()
        if python is None:
            pytest.skip(why)
        self.args = [python, APP, bootstrap, GROUP, INPUT, OUTPUT, state_dir, str(WINDOW_MS), str(BATCH_BYTES)]
        self.log_path = log_path
        self.proc = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def stop(self) -> int:
        """SIGTERM: quixstreams commits its last checkpoint and leaves the group."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(DEADLINE)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(DEADLINE)

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()


def committed(probe: Consumer, feed: Feed) -> bool:
    """The application's group (``probe``'s group.id; the probe never joins) committed all input fed so far."""
    offsets = probe.committed([TopicPartition(INPUT, p) for p in range(PARTITIONS)], timeout=10)
    return [tp.offset for tp in offsets] == feed.ends


def changelogs(admin: AdminClient) -> list[str]:
    topics = admin.list_topics(timeout=10).topics
    return sorted(t for t in topics if t.startswith(f"changelog__{GROUP}--"))


def record_count(bootstrap: str, topic: str) -> tuple[int, int]:
    """(records a consumer reads from the start, sum of high watermarks) of ``topic``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "changelog-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        highs = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for p in range(PARTITIONS))
        count, eofs, end = 0, set(), time.monotonic() + DEADLINE
        while len(eofs) < PARTITIONS and time.monotonic() < end:
            for msg in consumer.consume(500, 0.2):
                if msg.error() is None:
                    count += 1
                elif msg.error().code() == KafkaError._PARTITION_EOF:
                    eofs.add(msg.partition())
                else:
                    raise AssertionError(msg.error())
        assert len(eofs) == PARTITIONS, f"{topic}: no end of partition within {DEADLINE}s"
        return count, highs
    finally:
        consumer.close()


def compacted(bootstrap: str, topic: str) -> tuple[int, int] | None:
    """(records read, offsets written) once the cleaner has removed records of ``topic``, else None."""
    kept, written = record_count(bootstrap, topic)
    return (kept, written) if kept < written else None


@pytest.fixture
def broker(tmp_path_factory):
    b = start_broker(tmp_path_factory, "quix", BROKER)
    yield b
    finish_broker(b)


@pytest.mark.slow
def test_stateful_app_restores_from_compacted_changelog(broker, tmp_path):
    bootstrap = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(INPUT, PARTITIONS, 1), NewTopic(OUTPUT, 1, 1)]).values():
        f.result(DEADLINE)
    model = Model()
    feed = Feed(bootstrap, model)
    output = Output(bootstrap)
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    state_dir = str(tmp_path / "state")
    app = App(bootstrap, state_dir, str(tmp_path / "app.log"))
    try:
        # phase 1: rounds committed one by one, so every changelog key gets several versions
        app.start()
        for _ in range(PHASE1_ROUNDS):
            feed.round()
            assert wait_until(lambda: committed(probe, feed) or not app.alive(), 2 * DEADLINE)
            assert app.alive() and committed(probe, feed), app.log()[-3000:]
        output.wait_for(model, app)

        names = changelogs(admin)
        assert len(names) == 2, names
        running_log = next(n for n in names if n.endswith("--default"))
        resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names]
        for resource, future in admin.describe_configs(resources).items():
            assert future.result(DEADLINE)["cleanup.policy"].value == "compact", resource

        # the cleaner has compacted the running totals' changelog: fewer records than offsets (its walks use
        # only CPU time nobody else wants, so on a busy machine a cleaning waits for some)
        assert wait_until(lambda: f"cleaned log topic={running_log} " in broker.stderr(), CLEANING_DEADLINE), \
            broker.stderr()[-3000:]
        counts = wait_until(lambda: compacted(bootstrap, running_log), DEADLINE)
        assert counts, f"{running_log}: (records read, offsets written) = {record_count(bootstrap, running_log)}"
        assert counts[0] >= KEYS  # at least the latest totals of every key survive

        # phase 2: stop, lose the local state, feed more, restart: state comes back from the changelog
        assert app.stop() == 0, app.log()[-3000:]
        open_at_stop = {w: model.windows[w][1] for w in model.windows
                        if w[1] + WINDOW_MS > model.latest[w[0]]}
        assert os.path.isdir(state_dir)  # the local state existed; now it is gone
        shutil.rmtree(state_dir)
        for _ in range(PHASE2_ROUNDS):
            feed.round()
        app.start()
        output.wait_for(model, app, 2 * DEADLINE)
        # some closed windows hold input from both sides of the restart
        assert any(model.windows[w][1] > n and w[1] + WINDOW_MS <= model.latest[w[0]]
                   for w, n in open_at_stop.items()), open_at_stop
        assert os.path.isdir(state_dir)
        assert "Recovery successful" in app.log(), app.log()[-3000:]
        assert app.stop() == 0, app.log()[-3000:]
    finally:
        app.kill()
        output.close()
        probe.close()

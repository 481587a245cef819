"""The translation process a broker starts (``python -m pybroker.iceberg.worker``).

Its standard input carries JSON lines from the broker: first ``{"settings", "bootstrap", "client",
"node_id"}``, then ``{"partitions": [[topic, partition, {topic table settings}], ...]}`` each time the
set of iceberg partitions this broker leads changes. End of input (the broker stopped, even by kill -9)
ends the process. It reads those partitions from the broker read_committed (only committed records
below the high watermark), writes their tables, and prints a JSON status line a second on standard
output for the broker's metrics.
"""
from __future__ import annotations

import json
import logging
import os
import queue
import sys
import threading
import time

log = logging.getLogger("pybroker.iceberg.worker")

POLL_MS = 200
STATUS_INTERVAL_S = 1.0
FETCH_MIN_BYTES = 1 << 20
FETCH_MAX_WAIT_MS = 100
IDLE_NICE = 10  # below the broker: translation waits when both want the CPU


class Worker:
    def __init__(self, init: dict, updates: "queue.Queue", out=sys.stdout):
        from pybroker.client import Consumer
        from pybroker.iceberg.catalog import open_catalog
        from pybroker.iceberg.settings import IcebergSettings
        self.settings = IcebergSettings.from_json(init["settings"])
        self.node_id = init.get("node_id")
        self.updates = updates
        self.out = out
        self.catalog = open_catalog(self.settings)
        conf = {"bootstrap.servers": init["bootstrap"], "isolation.level": "read_committed",
                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                # fuller fetches: fewer, larger Arrow batches; the wait is small next to any target lag
                "fetch.min.bytes": FETCH_MIN_BYTES, "fetch.max.wait.ms": FETCH_MAX_WAIT_MS,
                "client.id": f"iceberg-{self.node_id}", **init.get("client", {})}
        self.consumer = Consumer(conf)
        self.writers: dict = {}  # topic -> TopicWriter
        self.owned: dict = {}  # (topic, partition) -> TopicTable
        self.registry = None
        if self.settings.schema_registry_url:
            from pybroker.iceberg.values import RegistryClient
            self.registry = RegistryClient(self.settings.schema_registry_url)
        self.paused: set = set()
        self.closing = False
        self._next_maintenance = time.monotonic() + self.settings.maintenance_interval_ms / 1000

    # ---- the loop ------------------------------------------------------------------------------

    def run(self) -> None:
        last_status = 0.0
        while not self.closing:
            self._apply_updates()
            if self.owned:
                for batch in self.consumer.poll_batches(timeout_ms=POLL_MS):  # one partition each, no copies
                    self._take(batch)
            else:
                self._wait_for_update(POLL_MS / 1000)
            now = time.monotonic()
            for writer in list(self.writers.values()):
                if writer.due(now):
                    self._flush(writer)
            self._pause_waiting()
            if now - last_status >= STATUS_INTERVAL_S:
                self._status()
                last_status = now
            if now >= self._next_maintenance:
                self._maintain()
                self._next_maintenance = now + self.settings.maintenance_interval_ms / 1000
        self.consumer.close(autocommit=False)

    def _take(self, batch) -> None:
        if not batch.num_rows:
            return
        topic = batch.column("topic")[0].as_py()
        writer = self.writers.get(topic)
        if writer is not None:
            writer.add(batch, lambda p: self._log_start(topic, p))

    def _log_start(self, topic: str, partition: int) -> int | None:
        try:
            return self.consumer.beginning_offsets([(topic, partition)]).get(_tp(topic, partition))
        except Exception:
            return None

    def _flush(self, writer) -> None:
        try:
            stale = writer.flush()
        except Exception as e:
            log.warning("table of topic %s: commit failed (%s: %s); retrying in %.1f s with the data kept",
                        writer.topic, type(e).__name__, _first_line(e),
                        max(0.0, writer.failed_until - time.monotonic()))
            return
        if stale:
            log.info("topic %s partitions %s: the table moved on (another writer); reading again from it",
                     writer.topic, sorted(stale))
            self._seek(writer.topic, writer.resync(stale))

    def _pause_waiting(self) -> None:
        """Partitions of a table whose commits fail, or whose buffer is full, stop fetching until it drains."""
        want = {(t, p) for (t, p) in self.owned if self.writers[t].paused}
        if want != self.paused:
            if want - self.paused:
                self.consumer.pause(sorted(want - self.paused))
                # nothing more of them in memory: prefetched and in-flight fetches are dropped, read again on resume
                for t, p in want - self.paused:
                    state = self.writers[t].partitions.get(p)
                    if state is not None and state.position is not None:
                        self.consumer.seek((t, p), state.position)
            if self.paused - want:
                self.consumer.resume(sorted(self.paused - want))
            self.paused = want

    # ---- what this broker leads ----------------------------------------------------------------

    def _wait_for_update(self, timeout: float) -> None:
        try:
            item = self.updates.get(timeout=timeout)
        except queue.Empty:
            return
        self.updates.put(item)  # back for _apply_updates (the queue has one reader)

    def _apply_updates(self) -> None:
        latest = None
        while True:
            try:
                latest = self.updates.get_nowait()
            except queue.Empty:
                break
        if latest is None:
            return
        if latest == "eof":
            self.closing = True
            return
        self._assign({(t, p): cfg for t, p, cfg in latest})

    def _assign(self, wanted: dict) -> None:
        from pybroker.iceberg.settings import TopicTable
        from pybroker.iceberg.translator import TopicWriter
        wanted = {key: TopicTable(**cfg) for key, cfg in wanted.items()}
        for (topic, p) in set(self.owned) - set(wanted):
            self.writers[topic].release(p)
        for topic in [t for t in self.writers if all(k[0] != t for k in wanted)]:
            del self.writers[topic]
        positions = {}
        for (topic, p), cfg in sorted(wanted.items()):
            writer = self.writers.get(topic)
            if writer is None or writer.table_settings != cfg:
                writer = self.writers[topic] = TopicWriter(topic, cfg, self.settings, self.catalog, self.registry)
            if p not in writer.partitions:
                try:
                    writer.acquire(p)
                except Exception as e:  # the catalog is down: try at the next update
                    log.warning("topic %s partition %d: cannot read the table's progress (%s: %s)", topic, p,
                                type(e).__name__, _first_line(e))
                    continue
            positions[(topic, p)] = writer.partitions[p].position
        self.owned = {key: wanted[key] for key in positions}
        self.consumer.assign([(t, p, -1 if o is None else o) for (t, p), o in positions.items()])
        for (t, p), o in positions.items():
            if o is None:
                self.consumer.seek_to_beginning([(t, p)])
        self.paused = set()
        log.info("translating %d partitions of %d topics", len(self.owned), len(self.writers))
        if len(positions) < len(wanted):  # try the rest again soon
            self.updates.put([[t, p, c.to_json()] for (t, p), c in wanted.items()])

    def _seek(self, topic: str, starts: dict) -> None:
        for p, start in starts.items():
            if start is None:
                self.consumer.seek_to_beginning([(topic, p)])
            else:
                self.consumer.seek((topic, p), start)

    # ---- status and maintenance ----------------------------------------------------------------

    def _status(self) -> None:
        tables = {}
        for topic, w in self.writers.items():
            c = w.counters
            tables[topic] = {
                "partitions": {str(p): {"table_offset": s.expected, "read_offset": s.position,
                                        "pending_since": s.pending_since} for p, s in w.partitions.items()},
                "records": c.records, "bytes": c.bytes, "commits": c.commits, "failures": c.failures,
                "dlq_records": c.dlq_records, "dropped_records": c.dropped_records,
                "deleted_untranslated": c.deleted_untranslated}
        try:
            self.out.write(json.dumps({"time": time.time(), "tables": tables}) + "\n")
            self.out.flush()
        except (BrokenPipeError, ValueError):
            self.closing = True

    def _maintain(self) -> None:
        from pybroker.iceberg.maintenance import run_maintenance
        for topic, writer in self.writers.items():
            if 0 not in writer.partitions:  # one broker maintains a table: the leader of partition 0
                continue
            for table in (writer.table, writer.dlq_table):
                if table is None:
                    continue
                try:
                    done = run_maintenance(table, self.settings)
                    if any(done.values()):
                        log.info("table %s maintenance: %s", ".".join(table.name()), done)
                except Exception as e:
                    log.warning("table %s maintenance failed (%s: %s)", ".".join(table.name()), type(e).__name__,
                                _first_line(e))


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [""])[0][:300]  # SQL errors carry their whole statement


def _tp(topic, partition):
    from pybroker.client import TopicPartition
    return TopicPartition(topic, partition)


def _read_input(stream, updates: "queue.Queue") -> None:
    for line in stream:
        line = line.strip()
        if line:
            updates.put(json.loads(line).get("partitions", []))
    updates.put("eof")


def main() -> None:
    from pybroker.logs import setup_logging
    setup_logging(os.environ.get("PYBROKER_LOG_LEVEL", "INFO"), sys.stderr)
    try:
        os.nice(IDLE_NICE)
    except OSError:
        pass
    init = json.loads(sys.stdin.readline() or "null")
    if init is None:
        return
    updates: queue.Queue = queue.Queue()
    threading.Thread(target=_read_input, args=(sys.stdin, updates), daemon=True, name="broker input").start()
    worker = Worker(init, updates)
    try:
        worker.run()
    except KeyboardInterrupt:
        pass
    finally:
        sys.stdout.flush()
        os._exit(0)  # without waiting for the client's threads: the broker may be gone


if __name__ == "__main__":
    main()

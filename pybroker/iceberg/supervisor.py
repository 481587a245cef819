"""The broker's side of translation: start the worker process when this broker leads a partition of
an iceberg topic, tell it which partitions those are whenever that changes, restart it if it dies,
and keep its latest status for /metrics. Nothing of pyiceberg or pyarrow is imported here."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sys
import time
from typing import Callable

from pybroker.iceberg.settings import IcebergSettings

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 0.5  # how soon a new leadership or topic config reaches the worker
RESTART_BACKOFF_S = (1.0, 30.0)
STOP_TIMEOUT_S = 10.0


class IcebergSupervisor:
    def __init__(self, settings: IcebergSettings, connection: Callable[[], tuple[str, dict]], node_id: int,
                 led: Callable[[], dict], end_offset: Callable[[str, int], int | None],
                 registry_url: Callable[[], str] = str):
        """``connection()``: (bootstrap, client config) of the worker's client, or ValueError saying why there
        is none; ``led()``: {(topic, partition): topic table settings as a dict} of the iceberg partitions this
        broker leads now; ``end_offset(topic, partition)``: its last stable offset (for the lag);
        ``registry_url()``: the registry to use when iceberg.schema.registry.url is not set."""
        self.settings = settings
        self.connection = connection
        self.refused = ""  # why the worker cannot start (said once)
        self.node_id = node_id
        self.led = led
        self.end_offset = end_offset
        self.registry_url = registry_url
        self.status: dict = {}  # the worker's latest status line
        self.restarts = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._sent = None
        self._task: asyncio.Task | None = None
        self._reader: asyncio.Task | None = None
        self._backoff = RESTART_BACKOFF_S[0]
        self._next_start = 0.0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="iceberg supervisor")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        await self._end_process()

    async def _watch(self) -> None:
        while True:
            try:
                await self._check()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("iceberg supervisor")
            await asyncio.sleep(CHECK_INTERVAL_S)

    async def _check(self) -> None:
        wanted = self.led()
        proc = self._proc
        if proc is not None and proc.returncode is not None:
            log.warning("the iceberg worker exited with %s; starting it again in %.0f s", proc.returncode,
                        self._backoff)
            self._proc, self._sent = None, None
            self._next_start = time.monotonic() + self._backoff
            self._backoff = min(RESTART_BACKOFF_S[1], self._backoff * 2)
            self.restarts += 1
        if self._proc is None:
            if not wanted or time.monotonic() < self._next_start:
                return
            await self._spawn()
            if self._proc is None:
                return
        elif self._proc is not None and time.monotonic() - self.status.get("received", time.monotonic()) < 60:
            self._backoff = RESTART_BACKOFF_S[0]  # it has been reporting: a later exit starts over quickly
        if wanted != self._sent:
            await self._send({"partitions": [[t, p, cfg] for (t, p), cfg in sorted(wanted.items())]})
            self._sent = wanted

    async def _spawn(self) -> None:
        try:
            bootstrap, client_config = self.connection()
        except ValueError as e:
            if str(e) != self.refused:
                log.error("Iceberg tables are off: %s", e)
                self.refused = str(e)
            self._next_start = time.monotonic() + RESTART_BACKOFF_S[1]
            return
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pybroker.iceberg.worker", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=None)
        log.info("started the iceberg worker (pid %d)", self._proc.pid)
        settings = self.settings
        if not settings.schema_registry_url:
            settings = dataclasses.replace(settings, schema_registry_url=self.registry_url())
        await self._send({"settings": settings.to_json(), "bootstrap": bootstrap, "client": client_config,
                          "node_id": self.node_id})
        self._reader = asyncio.get_running_loop().create_task(self._read(self._proc), name="iceberg status")

    async def _send(self, message: dict) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        try:
            proc.stdin.write((json.dumps(message) + "\n").encode())
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # it exited: _check restarts it

    async def _read(self, proc) -> None:
        while True:
            line = await proc.stdout.readline()
            if not line:
                return
            try:
                status = json.loads(line)
            except ValueError:
                continue
            status["received"] = time.monotonic()
            self.status = status

    async def _end_process(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()  # end of input: the worker stops
        try:
            await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
        if self._reader is not None:
            self._reader.cancel()

    def table_offset(self, topic: str, partition: int) -> int | None:
        """The next offset the partition's table holds, as the worker last said; None: not known (yet).
        Any thread may ask (the log cleaner's)."""
        state = self.status.get("tables", {}).get(topic, {}).get("partitions", {}).get(str(partition))
        return None if state is None else state.get("table_offset") or 0

    # ---- metrics ---------------------------------------------------------------------------------

    def metric_families(self) -> list:
        """(name, kind, help, samples) for /metrics (pybroker/metrics/render.py)."""
        tables = self.status.get("tables", {})
        now = time.time()
        lag_offsets, lag_seconds = [], []
        counters = {k: [] for k in ("records", "bytes", "commits", "failures", "dlq_records", "dropped_records",
                                    "deleted_untranslated")}
        for topic, t in tables.items():
            for p, s in t.get("partitions", {}).items():
                labels = {"topic": topic, "partition": p}
                end = self.end_offset(topic, int(p))
                if end is not None:
                    lag_offsets.append((labels, max(0, end - (s.get("table_offset") or 0))))
                since = s.get("pending_since") or 0
                lag_seconds.append((labels, max(0.0, now - since) if since else 0.0))
            for key in counters:
                counters[key].append(({"topic": topic}, t.get(key, 0)))
        return [
            ("pybroker_iceberg_lag_offsets", "gauge",
             "Committed records of the partition not yet in its Iceberg table.", lag_offsets),
            ("pybroker_iceberg_lag_seconds", "gauge",
             "Age of the oldest fetched record waiting for the table's next commit.", lag_seconds),
            ("pybroker_iceberg_records_written_total", "counter", "Rows committed to the topic's table.",
             counters["records"]),
            ("pybroker_iceberg_bytes_written_total", "counter", "Arrow bytes of the rows committed.",
             counters["bytes"]),
            ("pybroker_iceberg_commits_total", "counter", "Commits to the topic's table.", counters["commits"]),
            ("pybroker_iceberg_failures_total", "counter", "Failed commits (catalog, warehouse or registry).",
             counters["failures"]),
            ("pybroker_iceberg_dlq_records_total", "counter", "Records written to the topic's DLQ table.",
             counters["dlq_records"]),
            ("pybroker_iceberg_dropped_records_total", "counter",
             "Records that did not decode, dropped (iceberg.invalid.record.action=drop).", counters["dropped_records"]),
            ("pybroker_iceberg_untranslated_deleted_records_total", "counter",
             "Records retention deleted before the table took them.", counters["deleted_untranslated"]),
            ("pybroker_iceberg_worker_restarts_total", "counter", "Times the translation process was restarted.",
             [({}, self.restarts)] if self.status or self.restarts else []),
        ]

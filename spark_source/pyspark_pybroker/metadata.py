"""Driver-side lookups: which topic-partitions a query reads and where their logs start and end.

Planning costs one Metadata request and then one concurrent round of ``ListOffsets`` requests:
one per kind of position (earliest, latest, a timestamp) and partition leader, all in flight at
once, sent to the leaders the Metadata response named. Partitions whose lookup fails (a leader
moved, say) are looked up again through the admin client, which refreshes metadata and retries.
"""
import asyncio
import logging
import re
import time

from pyspark_pybroker.options import EARLIEST, LATEST, OptionError, ReadOptions, mismatch_error

log = logging.getLogger("pyspark_pybroker")


LIST_OFFSETS_API = 2
LIST_OFFSETS_VERSIONS = (1, 10)  # v1+: one offset per partition (no offset lists)


class DataLossError(RuntimeError):
    """Records the query should read are gone (retention, deleted topics or partitions)."""


LOSS_HINT = ("If losing these records is acceptable, set the source option "
             "'failOnDataLoss' to 'false'.")


def report_data_loss(opts: ReadOptions, message: str) -> None:
    """Fail with ``message`` when failOnDataLoss is true, else log it and go on."""
    if opts.fail_on_data_loss:
        raise DataLossError(f"{message}. {LOSS_HINT}")
    log.warning("%s; going on because failOnDataLoss is false", message)


def admin_settings(config: dict) -> dict:
    """The subset of client properties the admin client takes (the common ones)."""
    from pybroker.client import config as client_config

    return {k: v for k, v in config.items() if k in client_config.COMMON}


class OffsetLookup:
    """Topic-partitions of a subscription and their offsets, through one admin client.
    Several offset lookups run concurrently: planning costs one round trip to each leader."""

    def __init__(self, opts: ReadOptions):
        from pybroker.client.admin import AsyncAdminClient
        from pybroker.client.runner import LoopThread

        self.opts = opts
        config = opts.client_config()
        self._isolation = str(config.get("isolation.level", "read_uncommitted"))
        try:
            self._admin = AsyncAdminClient(admin_settings(config))
        except ValueError as exc:  # the client's ConfigError names the property
            raise OptionError(f"bad kafka.* option: {exc}") from None
        self._loop = LoopThread.shared()
        self._timeout = self._admin.config.seconds("default.api.timeout.ms") + 5.0
        self._op_timeout_ms = int(self._admin.config["request.timeout.ms"])

    def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None and self._loop.running:
            self._loop.run(admin.close(), 10.0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _run(self, make_coro):
        """Run ``make_coro()`` on the client loop, retrying retriable failures."""
        attempts = self.opts.offset_retries + 1
        for attempt in range(attempts):
            try:
                return self._loop.run(make_coro(), self._timeout)
            except Exception as exc:  # noqa: BLE001 - only retriable client errors are retried
                if not getattr(exc, "retriable", False) or attempt == attempts - 1:
                    raise
                time.sleep(self.opts.offset_retry_interval_ms / 1000.0)

    def topic_partitions(self) -> list:
        """The (topic, partition) pairs the subscription reads now, sorted."""
        sub = self.opts.subscription
        meta = self._run(self._admin.list_topics)
        if sub.kind == "assign":
            missing = [f"{t}-{p}" for t, p in sub.partitions
                       if t not in meta.topics or p not in meta.topics[t].partitions]
            if missing:
                raise OptionError(f"option 'assign': {', '.join(missing)} do(es) not exist")
            return sorted(sub.partitions)
        if sub.kind == "subscribe":
            names = [t for t in sub.topics if t in meta.topics]
        else:
            pattern = re.compile(sub.pattern)
            names = [t for t, tm in meta.topics.items()
                     if not getattr(tm, "internal", False) and pattern.fullmatch(t)]
        return sorted((t, p) for t in names for p in meta.topics[t].partitions)

    def list_offsets(self, *specs: dict) -> list:
        """For each ``{(topic, partition): EARLIEST | LATEST | timestamp_ms}``, concurrently:
        ``{(topic, partition): offset}`` (-1 for a timestamp no record reaches)."""
        from pybroker.client import TopicPartition

        async def fallback(spec):
            got = await self._admin.list_offsets(
                {TopicPartition(t, p): s for (t, p), s in spec.items()}, self._isolation)
            return {(tp.topic, tp.partition): r.offset for tp, r in got.items()}

        async def one(spec):
            if not spec:
                return {}
            found, failed = await self._from_known_leaders(spec)
            if failed:
                found.update(await fallback({tp: spec[tp] for tp in failed}))
            return found

        async def every():
            return await asyncio.gather(*(one(spec) for spec in specs))
        return list(self._run(every))

    async def _from_known_leaders(self, spec: dict) -> tuple:
        """``spec`` looked up with one ListOffsets request per leader of the cached metadata (no
        Metadata request): ({(topic, partition): offset}, [(topic, partition) not found])."""
        from pybroker.protocol import REQUESTS

        cluster = self._admin.cluster
        by_leader, failed = {}, []
        for tp in spec:
            topic = cluster.topics.get(tp[0])
            part = topic.partitions.get(tp[1]) if topic is not None else None
            if part is None or part.leader < 0:
                failed.append(tp)
            else:
                by_leader.setdefault(part.leader, []).append(tp)
        api = REQUESTS[LIST_OFFSETS_API]
        isolation = 1 if self._isolation == "read_committed" else 0

        async def ask(node, tps):
            topics = {}
            for t, p in tps:
                topics.setdefault(t, []).append(api.ListOffsetsPartition(
                    partition_index=p, current_leader_epoch=-1, timestamp=spec[(t, p)]))
            req = api(replica_id=-1, isolation_level=isolation, timeout_ms=self._op_timeout_ms,
                      topics=[api.ListOffsetsTopic(name=t, partitions=ps)
                              for t, ps in topics.items()])
            return await cluster.call(node, req, *LIST_OFFSETS_VERSIONS, retries=0,
                                      check=lambda body: 0, refresh_metadata=False)

        nodes = list(by_leader)
        replies = await asyncio.gather(*(ask(n, by_leader[n]) for n in nodes),
                                       return_exceptions=True)
        found = {}
        for node, reply in zip(nodes, replies):
            if isinstance(reply, BaseException):
                if not isinstance(reply, Exception):
                    raise reply
                failed.extend(by_leader[node])  # the admin client retries these
                continue
            answered = set()
            for t in reply.topics:
                for p in t.partitions:
                    tp = (t.name, p.partition_index)
                    if tp in spec and not p.error_code:
                        found[tp] = p.offset
                        answered.add(tp)
            failed.extend(tp for tp in by_leader[node] if tp not in answered)
        return found, failed

    def earliest(self, tps) -> dict:
        return self.list_offsets({tp: EARLIEST for tp in tps})[0]

    def latest(self, tps) -> dict:
        return self.list_offsets({tp: LATEST for tp in tps})[0]

    def bounds(self, tps, *bounds) -> tuple:
        """(log starts, log ends, offsets of each bound) for ``tps`` in one round of lookups.
        A bound is a (kind, value, option name, starting?) tuple; see ``resolve``."""
        stamps = []
        for kind, value, option, _ in bounds:
            if kind in ("offsets", "timestamps") and set(value) != set(tps):
                raise mismatch_error(option, set(value) - set(tps), set(tps) - set(value))
            if kind == "timestamp":
                stamps.append({tp: value for tp in tps})
            elif kind == "timestamps":
                stamps.append(dict(value))
            else:
                stamps.append({})
        starts, ends, *found = self.list_offsets({tp: EARLIEST for tp in tps},
                                                 {tp: LATEST for tp in tps}, *stamps)
        resolved = [self._resolve(b, tps, starts, ends, f) for b, f in zip(bounds, found)]
        return starts, ends, resolved

    def _resolve(self, bound, tps, starts, ends, stamped) -> dict:
        kind, value, option, starting = bound
        if kind == "earliest":
            return {tp: starts[tp] for tp in tps}
        if kind == "latest":
            return {tp: ends[tp] for tp in tps}
        if kind == "offsets":
            return {tp: starts[tp] if o == EARLIEST else ends[tp] if o == LATEST else o
                    for tp, o in value.items()}
        missing = sorted(tp for tp, off in stamped.items() if off < 0)
        if missing and starting and self.opts.by_timestamp_strategy == "error":
            names = ", ".join(f"{t}-{p}" for t, p in missing)
            raise OptionError(
                f"option '{option}': no record at or after the timestamp in {names}; set "
                f"'startingOffsetsByTimestampStrategy' to 'latest' to start at the end instead")
        return {tp: ends[tp] if off < 0 else off for tp, off in stamped.items()}


_OPTION_NAMES = {"timestamp": "{}Timestamp", "timestamps": "{}OffsetsByTimestamp"}


def bound_spec(bound: tuple, which: str) -> tuple:
    """A parsed starting/ending option as the (kind, value, option name, starting?) tuple
    ``OffsetLookup.bounds`` takes; ``which`` is "starting" or "ending"."""
    option = _OPTION_NAMES.get(bound[0], "{}Offsets").format(which)
    return (bound[0], bound[1] if len(bound) > 1 else None, option, which == "starting")

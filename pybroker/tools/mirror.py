"""``pybroker mirror``: keep the matching topics of one Kafka-protocol cluster copied to another,
as Kafka's MirrorMaker does.

A consumer group on the source (``--group``) reads every topic whose whole name matches
``--topics``; its record batches go, as they were fetched, to the same topic and partition on the
target (``mirror_batches``: keys, values, headers, timestamps and compression kept; an idempotent
acks=all producer, so a partition's batches stay in order). Progress is the group's committed offsets
on the source, committed only after the target acknowledged everything before them: a restart, or a
second instance taking over partitions, resumes from there, and at worst copies again what followed
the last commit (at-least-once). Target topics are set up by ``mirror_topics.TopicSync``, at start and every
``--metadata-refresh-ms``.

SIGTERM or SIGINT: stop polling, commit what the target has, exit 0. Records the target refuses
(or cannot take within two minutes of retries) stop the mirror with exit code 1 and nothing
committed past them.
"""
import re
import signal
import sys
import threading
import time

from pybroker.client import AdminClient, ConfigError, Consumer, KafkaError
from pybroker.client import config as client_config
from pybroker.client.config import COMMON
from pybroker.tools.mirror_batches import MirrorFailed, TargetWriter, split
from pybroker.tools.mirror_topics import TopicSync
from pybroker.tools.wire import ToolError

POLL_MS = 200  # longest a poll blocks, so a signal or a timer is acted on soon
IDLE_CHECK_S = 1.0  # how often --max-idle-ms asks the source for its end offsets
WRITE_BYTES = 16 << 20  # fetched bytes taken per round: one Produce request per target leader

CONSUMER_DEFAULTS = {
    "auto.offset.reset": "earliest",  # a new group copies each topic from its start
    "enable.auto.commit": False,  # commits follow the producer's acknowledgements instead
    "max.poll.records": 100000,  # whole fetched chunks per poll: no slicing, fewer loop turns
    "max.partition.fetch.bytes": 10485760,
    "fetch.max.bytes": 52428800,
    "client.id": "pybroker-mirror",
}
TARGET_TIMEOUT_MS = 30000  # each request to the target


def run(args) -> int:
    try:
        pattern = re.compile(args.topics)
    except re.error as exc:
        raise ToolError(f"--topics: not a regular expression: {exc}") from None
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        mirror = Mirror(args, pattern)
    except (ConfigError, KafkaError) as exc:
        _restore(previous)
        raise ToolError(str(exc)) from None
    except BaseException:
        _restore(previous)
        raise
    try:
        return mirror.run(stop)
    finally:
        _restore(previous)
        mirror.close()


def _restore(handlers: dict) -> None:
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def say(text: str) -> None:
    print(f"mirror: {text}", flush=True)


def _admin_conf(bootstrap: str, props: dict) -> dict:
    """The admin client gets only the common client settings of a consumer/producer override list."""
    return {"bootstrap.servers": bootstrap, **{k: v for k, v in props.items() if k in COMMON}}


class Mirror:
    """One mirroring process: topic sync, the copy loop, commits and the lag line."""

    def __init__(self, args, pattern):
        source_props, target_props = dict(args.source_property), dict(args.target_property)
        self.args = args
        target_security = client_config.parse(_admin_conf(args.target, target_props), "admin").security
        # first: it may fail, and holds no thread
        self.writer = TargetWriter(args.target, TARGET_TIMEOUT_MS, target_security)
        self.source_admin = AdminClient(_admin_conf(args.source, source_props))
        self.target_admin = AdminClient(_admin_conf(args.target, target_props))
        self.topics = TopicSync(self.source_admin, self.target_admin, pattern, args.replication_factor, say)
        refresh = args.metadata_refresh_ms
        # the group looks for new partitions as often as TopicSync adds them to the target
        self.consumer = Consumer({**CONSUMER_DEFAULTS, "metadata.max.age.ms": refresh, **source_props,
                                  "bootstrap.servers": args.source, "group.id": args.group})
        self.subscribed = []
        self.committed = {}  # {TopicPartition: offset} last committed by this process
        self.copied = 0
        self.copying = False  # True while every polled record has been handed to the producer
        self.rate_at, self.rate_copied = time.monotonic(), 0  # where the last lag line's rate began

    def close(self) -> None:
        for client in (self.consumer, self.writer, self.source_admin, self.target_admin):
            try:
                client.close()
            except Exception as exc:  # closing must go on for the others
                print(f"pybroker mirror: closing {type(client).__name__}: {exc}", file=sys.stderr)

    # ---- the loop -------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> int:
        a = self.args
        say(f"copying topics matching {a.topics!r} from {a.source} to {a.target} as group {a.group}")
        self.copying = True
        try:
            self._copy(stop)
            self.commit()
        except MirrorFailed as exc:
            raise ToolError(f"stopping, nothing committed past the last commit: {exc}") from None
        finally:
            self.copying = False  # from here on a revocation (close) must not commit
        self._print_lag()
        say(f"stopped after copying {self.copied} records")
        return 0

    def _copy(self, stop: threading.Event) -> None:
        a = self.args
        now = time.monotonic()
        next_refresh = next_commit = next_lag = next_idle_check = now
        last_record = now
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_refresh:
                self._refresh()
                next_refresh = now + a.metadata_refresh_ms / 1000
            if not self.subscribed:  # nothing to copy yet: wait for the next refresh
                if a.max_idle_ms is not None and now - last_record >= a.max_idle_ms / 1000:
                    say(f"no matching topic for {a.max_idle_ms} ms: exiting")
                    return
                stop.wait(min(POLL_MS / 1000, max(0.0, next_refresh - now)))
                continue
            chunks = self.consumer.poll_raw(POLL_MS, WRITE_BYTES)
            if chunks:
                self.copied += self._write(chunks)
                last_record = time.monotonic()
            now = time.monotonic()
            if now >= next_commit:
                self.commit()
                next_commit = now + a.commit_interval_ms / 1000
            if now >= next_lag:
                self.commit()
                self._print_lag()
                next_lag = now + a.lag_interval_ms / 1000
            if a.max_idle_ms is not None and now - last_record >= a.max_idle_ms / 1000 and now >= next_idle_check:
                next_idle_check = now + IDLE_CHECK_S
                self.commit()
                lag = self.lag()
                if lag is not None and not any(lag.values()):
                    say(f"no new record for {a.max_idle_ms} ms and no lag: exiting")
                    return

    def _write(self, chunks) -> int:
        """Send the fetched batches to the target; the number of offsets they cover from the
        position (below it, a batch is sent again whole: only after a restart mid-batch)."""
        records = 0
        for c in chunks:
            key = (c.topic, c.partition)
            for batch in split(c.data):
                self.writer.add(key, batch)
            records += c.next_offset - c.position
        self.writer.flush()
        return records

    def _refresh(self) -> None:
        """Create/grow target topics, then follow the source's matching topics (a change rebalances)."""
        try:
            names = self.topics.sync()
        except KafkaError as exc:
            if not self.subscribed:  # at start: nothing works without the topics
                raise ToolError(f"cannot set up the topics: {exc}") from None
            say(f"topic refresh failed, copying the known topics and retrying later: {exc}")
            return
        if names and names != self.subscribed:
            added = sorted(set(names) - set(self.subscribed))
            say(f"mirroring {len(names)} topic(s); new: {', '.join(added) or 'none'}")
            self.consumer.subscribe(names, on_revoke=self._on_revoke, on_lost=self._on_lost)
            self.subscribed = names

    def _on_revoke(self, consumer, partitions) -> None:
        """Partitions going to another instance: hand them over with what was copied committed."""
        if self.copying:
            self.commit()

    def _on_lost(self, consumer, partitions) -> None:
        """Partitions already owned by someone else: their next owner resumes from the last commit."""

    # ---- progress -------------------------------------------------------------------------------

    def commit(self) -> None:
        """Commit the positions of everything polled so far: all of it is acknowledged by the target
        (each round's batches are written before the next poll)."""
        try:
            done = self.consumer.commit()
        except KafkaError as exc:  # e.g. a rebalance under way: the next commit covers it
            say(f"offset commit failed, retrying at the next one: {exc}")
            return
        self.committed.update({tp: om.offset for tp, om in (done or {}).items()})

    def lag(self) -> dict | None:
        """{topic: source high watermark - committed offset, over this instance's partitions}; None
        while a partition's position is not committed yet."""
        assigned = self.consumer.assignment()
        if not assigned:
            return None
        try:
            ends = self.consumer.end_offsets(assigned)
        except KafkaError:
            return None
        lag = {}
        for tp in assigned:
            committed = self.committed.get(tp)
            if committed is None or tp not in ends:
                return None
            lag[tp.topic] = lag.get(tp.topic, 0) + max(0, ends[tp] - committed)
        return lag

    def _print_lag(self) -> None:
        lag = self.lag()
        now = time.monotonic()
        seconds, records = now - self.rate_at, self.copied - self.rate_copied
        self.rate_at, self.rate_copied = now, self.copied
        rate = records / seconds if seconds > 0 else 0.0
        if lag is None:
            detail = "lag not known yet (waiting for partitions)"
        else:
            per_topic = ", ".join(f"{t} {n}" for t, n in sorted(lag.items()))
            detail = f"lag {sum(lag.values())} ({per_topic})"
        say(f"copied {self.copied} records, {rate:.0f} records/s; {detail}")


"""The mirror's data path: source record batches re-sent to the target as they are.

A fetched batch already holds what the target must keep (keys, values, headers, timestamps,
compression); only the producer's identity goes: producer id, epoch and sequence become -1 and
the transactional flag is cleared (the target's sequence checks belong to another producer), and
the CRC is computed again. Control batches are dropped. A batch the target would have to rewrite
(LogAppendTime stamps, or gaps in its offsets left by compaction) is rebuilt record by record.

``TargetWriter`` sends them with acks=all, one Produce request per target leader at a time holding
one batch per partition (Kafka's rule for Produce v3+), so a partition's batches go in order; what
a leader change or a timeout interrupted is retried. A retried request may have been written
already: copies are at-least-once.
"""
import struct
import time

from pybroker import core
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode
from pybroker.records import (CONTROL, CRC_START, HEADER, TIMESTAMP_LOG_APPEND, TRANSACTIONAL, Record,
                              build_batch, decode_records)
from pybroker.tools.wire import PRODUCE, RETRIABLE, Client, ToolError

_HEAD = struct.Struct(">qi")  # base offset, batch length
_IDENTITY = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_IDENTITY_AT, _ATTRIBUTES_AT, _LEADER_EPOCH_AT = 43, 21, 12
RETRY_FOR_S = 120  # how long a partition's batches are retried before the mirror gives up
BACKOFF_S = 0.2


class MirrorFailed(Exception):
    """The target did not take some records: stop without committing past them."""


def split(data) -> list:
    """The whole batches of a fetched buffer (a partial one at the end is left out)."""
    view = memoryview(data).cast("B")
    out, pos, n = [], 0, len(view)
    while n - pos >= HEADER.size:
        size = _HEAD.unpack_from(view, pos)[1] + 12
        if pos + size > n:
            break
        out.append(view[pos:pos + size])
        pos += size
    return out


def for_target(batch):
    """The batch as the target should receive it, or None for a control batch."""
    (_, _, _, magic, _, attributes, last_delta, _, _, _, _, _, count) = HEADER.unpack_from(batch, 0)
    if magic != 2:
        raise MirrorFailed(f"a record batch of message format v{magic} (only v2 is copied)")
    if attributes & CONTROL:
        return None
    if attributes & TIMESTAMP_LOG_APPEND or count != last_delta + 1:
        return _rebuilt(batch, attributes)
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, 0)  # a produced batch starts at offset 0; the leader assigns them
    _IDENTITY.pack_into(out, _IDENTITY_AT, -1, -1, -1)
    struct.pack_into(">h", out, _ATTRIBUTES_AT, attributes & ~TRANSACTIONAL)
    struct.pack_into(">i", out, _LEADER_EPOCH_AT, -1)
    struct.pack_into(">I", out, 17, core.crc.crc32c(memoryview(out)[CRC_START:]))
    return out


def _rebuilt(batch, attributes: int):
    """Records re-encoded with the timestamps a source consumer saw and consecutive offsets."""
    records = [Record(r.value, r.key, r.headers, r.timestamp) for r in decode_records(batch)]
    return build_batch(records, attributes=attributes & 0x07) if records else None


class TargetWriter:
    """Produce to the target cluster through the tools' blocking client (one request in flight)."""

    def __init__(self, bootstrap: str, timeout_ms: int):
        self.client = Client(bootstrap, timeout_ms)
        self.timeout_ms = timeout_ms
        self.leaders: dict = {}  # (topic, partition) -> broker id

    def close(self) -> None:
        self.client.close()

    def write(self, pending: dict) -> int:
        """Send {(topic, partition): [batch, ...]} and return the bytes written; raises MirrorFailed
        when a partition's batches cannot be written within RETRY_FOR_S."""
        written, deadline = 0, time.monotonic() + RETRY_FOR_S
        queues = {k: list(reversed(v)) for k, v in pending.items() if v}  # popped from the end
        while queues:
            by_leader: dict = {}
            for key in queues:
                by_leader.setdefault(self._leader(key), []).append(key)
            failed: dict = {}
            for leader, keys in by_leader.items():
                for key, error in self._produce(leader, {k: queues[k][-1] for k in keys}).items():
                    if error:
                        failed[key] = error
                    else:
                        written += len(queues[key].pop())
            queues = {k: q for k, q in queues.items() if q}
            if not failed:
                deadline = time.monotonic() + RETRY_FOR_S
                continue
            fatal = {k: e for k, e in failed.items() if e not in RETRIABLE and e != ErrorCode.NETWORK_EXCEPTION}
            if fatal or time.monotonic() > deadline:
                (t, p), code = next(iter((fatal or failed).items()))
                raise MirrorFailed(f"the target refused the records of {t}-{p}: {_name(code)}")
            self.leaders.clear()  # leaders moved, or a topic is still being created
            time.sleep(BACKOFF_S)
        return written

    def _leader(self, key) -> int:
        if key not in self.leaders:
            topic = self.client.topic_metadata(key[0])
            for p in topic.partitions:
                self.leaders[(key[0], p.partition_index)] = p.leader_id
        return self.leaders.get(key, -1)

    def _produce(self, leader: int, batches: dict) -> dict:
        """{(topic, partition): error code} of one Produce request to ``leader`` (one batch each)."""
        if leader < 0:
            return {k: ErrorCode.LEADER_NOT_AVAILABLE for k in batches}
        api = REQUESTS[PRODUCE]
        topics: dict = {}
        for (t, p), batch in batches.items():
            topics.setdefault(t, []).append(api.PartitionProduceData(index=p, records=batch))
        req = api(transactional_id=None, acks=-1, timeout_ms=self.timeout_ms, topic_data=[
            api.TopicProduceData(name=t, partition_data=ps) for t, ps in topics.items()])
        conn = None
        try:
            conn = self.client.node_conn(leader)
            resp = conn.request(req)
        except ToolError:  # the leader went away: ask again after fresh metadata
            if conn is not None:
                self.client.drop(conn)
            return {k: ErrorCode.NETWORK_EXCEPTION for k in batches}
        return {(t.name, p.index): p.error_code for t in resp.responses for p in t.partition_responses}


def _name(code: int) -> str:
    try:
        return f"{ErrorCode(code).name} ({code})"
    except ValueError:
        return f"error {code}"

"""The mirror's data path: source record batches re-sent to the target as they are.

A fetched batch already holds what the target must keep (keys, values, headers, timestamps,
compression). Its producer identity is replaced by the mirror's own (an idempotent producer id
from the target, and the mirror's sequence numbers per partition), the transactional flag is
cleared, the base offset becomes 0 and the CRC is computed again. Control batches are dropped. A
batch the target would have to rewrite (LogAppendTime stamps, or gaps in its offsets left by
compaction) is rebuilt record by record.

``TargetWriter`` sends them with acks=all, one batch per partition in each Produce request (Kafka's
rule for v3+) and up to ``MAX_IN_FLIGHT`` requests in flight per target broker, as an idempotent
producer may: the target keeps each partition's batches in sequence order and drops a retried
batch it already has. After an error, everything after the last acknowledged batch of a
partition is sent again, in order. Source offsets are committed only after the target
acknowledged the batches before them, so copies are at-least-once (a restart copies again what
followed the last commit).
"""
import struct
import time
from collections import deque

from pybroker import core
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode
from pybroker.records import (CONTROL, CRC_START, HEADER, TIMESTAMP_LOG_APPEND, TRANSACTIONAL, Record,
                              build_batch, decode_records)
from pybroker.tools.wire import INIT_PRODUCER_ID, PRODUCE, RETRIABLE, Client, KafkaError, ToolError

_HEAD = struct.Struct(">qi")  # base offset, batch length
_IDENTITY = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_IDENTITY_AT, _ATTRIBUTES_AT, _LEADER_EPOCH_AT, _CRC_AT = 43, 21, 12, 17
MAX_IN_FLIGHT = 5  # an idempotent producer's limit: the broker remembers the last 5 batches
RETRY_FOR_S = 120  # how long a partition's batches are retried before the mirror gives up
BACKOFF_S = 0.2
SEQUENCE_WRAP = 2**31
# after a failed batch the later ones in flight are refused as out of order: sent again, not errors
AGAIN = set(RETRIABLE) | {ErrorCode.NETWORK_EXCEPTION, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER}
DONE = (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
COORDINATOR_BUSY = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    ErrorCode.NOT_COORDINATOR, ErrorCode.REQUEST_TIMED_OUT}


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


def for_target(batch, producer_id: int, epoch: int, sequence: int):
    """(the batch as the target should receive it, its record count), or None for a control batch."""
    (_, _, _, magic, _, attributes, last_delta, _, _, _, _, _, count) = HEADER.unpack_from(batch, 0)
    if magic != 2:
        raise MirrorFailed(f"a record batch of message format v{magic} (only v2 is copied)")
    if attributes & CONTROL:
        return None
    if attributes & TIMESTAMP_LOG_APPEND or count != last_delta + 1:
        records = [Record(r.value, r.key, r.headers, r.timestamp) for r in decode_records(batch)]
        if not records:
            return None
        return build_batch(records, attributes=attributes & 0x07, producer_id=producer_id, producer_epoch=epoch,
                           base_sequence=sequence), len(records)
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, 0)  # a produced batch starts at offset 0; the leader assigns them
    struct.pack_into(">i", out, _LEADER_EPOCH_AT, -1)
    struct.pack_into(">h", out, _ATTRIBUTES_AT, attributes & ~TRANSACTIONAL)
    _IDENTITY.pack_into(out, _IDENTITY_AT, producer_id, epoch, sequence)
    struct.pack_into(">I", out, _CRC_AT, core.crc.crc32c(memoryview(out)[CRC_START:]))
    return out, count


class TargetWriter:
    """An idempotent producer of ready-made batches, on the tools' blocking client."""

    def __init__(self, bootstrap: str, timeout_ms: int, security=None):
        self.client = Client(bootstrap, timeout_ms, security)
        self.timeout_ms = timeout_ms
        self.leaders: dict = {}  # (topic, partition) -> broker id
        self.queues: dict = {}  # (topic, partition) -> deque of batches not yet acknowledged
        self.sequences: dict = {}  # (topic, partition) -> next base sequence
        self.producer_id, self.epoch = self._init_producer_id()

    def close(self) -> None:
        self.client.close()

    def _init_producer_id(self) -> tuple[int, int]:
        """A producer id of the target's (a fresh Kafka answers "loading" for a while: asked again)."""
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            resp = self.client.any_conn().request(REQUESTS[INIT_PRODUCER_ID](transactional_id=None,
                                                                            transaction_timeout_ms=-1))
            if not resp.error_code:
                return resp.producer_id, resp.producer_epoch
            if resp.error_code not in COORDINATOR_BUSY or time.monotonic() > deadline:
                raise KafkaError(resp.error_code, None, "InitProducerId on the target")
            time.sleep(BACKOFF_S)

    def add(self, key, batch) -> None:
        """Queue one source batch for partition ``key`` of the target."""
        seq = self.sequences.get(key, 0)
        prepared = for_target(batch, self.producer_id, self.epoch, seq)
        if prepared is not None:
            out, count = prepared
            self.sequences[key] = (seq + count) % SEQUENCE_WRAP
            self.queues.setdefault(key, deque()).append(out)

    def flush(self) -> None:
        """Send every queued batch; raises MirrorFailed when a partition's batches cannot be
        written within RETRY_FOR_S."""
        deadline = time.monotonic() + RETRY_FOR_S
        while self.queues:
            by_leader: dict = {}
            for key in self.queues:
                by_leader.setdefault(self._leader(key), []).append(key)
            failed: dict = {}
            for leader, keys in by_leader.items():
                failed.update(self._pipeline(leader, keys))
            self.queues = {k: q for k, q in self.queues.items() if q}
            if not failed:
                deadline = time.monotonic() + RETRY_FOR_S
                continue
            fatal = {k: e for k, e in failed.items() if e not in AGAIN}
            if fatal or time.monotonic() > deadline:
                (t, p), code = next(iter((fatal or failed).items()))
                raise MirrorFailed(f"the target refused the records of {t}-{p}: {_name(code)}")
            self.leaders.clear()  # leaders moved, or a topic is still being created
            time.sleep(BACKOFF_S)

    def _leader(self, key) -> int:
        if key not in self.leaders:
            topic = self.client.topic_metadata(key[0])
            for p in topic.partitions:
                self.leaders[(key[0], p.partition_index)] = p.leader_id
        return self.leaders.get(key, -1)

    def _pipeline(self, leader: int, keys: list) -> dict:
        """Send the queued batches of ``keys`` to ``leader``: request i holds the i-th batch of each
        partition; acknowledged batches leave their queue. {key: error} of partitions that stopped."""
        if leader < 0:
            return {k: ErrorCode.LEADER_NOT_AVAILABLE for k in keys}
        depth = max(len(self.queues[k]) for k in keys)
        acked = {k: 0 for k in keys}
        failed: dict = {}
        in_flight: deque = deque()
        conn = None
        try:
            conn = self.client.node_conn(leader)
            for i in range(depth):
                part = {k: self.queues[k][i] for k in keys if i < len(self.queues[k]) and k not in failed}
                if part:
                    in_flight.append(conn.send(self._request(part)))
                while len(in_flight) >= MAX_IN_FLIGHT:
                    self._settle(conn.receive(PRODUCE, *in_flight.popleft()), acked, failed)
            while in_flight:
                self._settle(conn.receive(PRODUCE, *in_flight.popleft()), acked, failed)
        except ToolError:  # the leader went away: what it did not acknowledge is sent again
            if conn is not None:
                self.client.drop(conn)
            for k in keys:
                failed.setdefault(k, ErrorCode.NETWORK_EXCEPTION)
        for k, n in acked.items():
            for _ in range(n):
                self.queues[k].popleft()
        return failed

    @staticmethod
    def _settle(resp, acked: dict, failed: dict) -> None:
        for t in resp.responses:
            for p in t.partition_responses:
                key = (t.name, p.index)
                if key in failed:
                    continue
                if p.error_code in DONE:
                    acked[key] += 1
                else:
                    failed[key] = p.error_code

    def _request(self, batches: dict):
        api = REQUESTS[PRODUCE]
        topics: dict = {}
        for (t, p), batch in batches.items():
            topics.setdefault(t, []).append(api.PartitionProduceData(index=p, records=batch))
        return api(transactional_id=None, acks=-1, timeout_ms=self.timeout_ms, topic_data=[
            api.TopicProduceData(name=t, partition_data=ps) for t, ps in topics.items()])


def _name(code: int) -> str:
    try:
        return f"{ErrorCode(code).name} ({code})"
    except ValueError:
        return f"error {code}"

"""Committed offsets: kept in memory, made durable in the internal topic ``__consumer_offsets``.

Each commit appends one record batch (one record per partition: key group/topic/partition, value
offset/epoch/metadata/timestamps, codecs in records.py) to the group's partition of the topic,
chosen as Kafka does (``abs(groupId.hashCode()) % partitions``), and updates memory only after
the append succeeded. A null value (tombstone) deletes an offset. The topic is created on first
use, as Kafka does; at start every partition is read from its log start and replayed, last record
wins. The topic is compacted, as in Kafka: the log cleaner keeps the latest commit per key, and
the tombstones of deleted or expired offsets remove them from disk once delete.retention.ms passed.
"""
import logging
import struct

from pybroker.coordinator import records
from pybroker.coordinator.group import now_ms
from pybroker.controller.metadata_store import TopicExistsError
from pybroker.asyncutil import settle
from pybroker.errors import BrokerError
from pybroker.records import Record, build_batch, decode_records

log = logging.getLogger(__name__)

TOPIC = "__consumer_offsets"
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "104857600"}  # Kafka's offsets.topic.segment.bytes
READ_CHUNK = 1 << 20
OFFSET_COMMIT_TIMEOUT_MS = 5000  # offsets.commit.timeout.ms
NOT_COORDINATOR = 16
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length


class OffsetStore:
    """Offsets of the groups whose ``__consumer_offsets`` partition this broker leads.

    A partition is loaded (replayed from its log) when this broker becomes its leader and
    forgotten when it stops leading it; groups in partitions led elsewhere are NOT_COORDINATOR.
    """

    def __init__(self, config, broker):
        self.config = config
        self.broker = broker
        self.coordinator = None  # told when partitions load and unload
        self.partitions = config.offsets_topic_num_partitions
        self.offsets: dict[str, dict[tuple[str, int], records.OffsetValue]] = {}
        self.owned: set[int] = set()

    @property
    def controller(self):
        return self.broker.controller

    @property
    def replicas(self):
        return self.broker.replicas

    # ---- leadership -----------------------------------------------------------------------

    def on_leadership(self, key, is_leader: bool) -> None:
        if key[0] != TOPIC:
            return
        index = key[1]
        record = self.controller.topics.get(TOPIC)
        if record is not None and record.partitions:
            self._use(record)
        self._unload(index)
        if is_leader:
            count = self._load_partition(index)
            self.owned.add(index)
            log.info("loaded %d offset records from %s-%d", count, TOPIC, index)
        if self.coordinator is not None:
            self.coordinator.partition_moved(index, is_leader)

    def _unload(self, index: int) -> None:
        self.owned.discard(index)
        for group in [g for g in self.offsets if self.partition_for(g) == index]:
            del self.offsets[group]

    def owns(self, group: str) -> bool:
        return self.partition_for(group) in self.owned

    async def ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use (FindCoordinator, commit), as Kafka does."""
        record = self.controller.topics.get(TOPIC)
        if record is None:
            rf = min(self.config.offsets_topic_replication_factor, max(len(self.broker.metadata.brokers), 1))
            try:
                record = await settle(self.controller.create_topic(TOPIC, self.partitions, rf, TOPIC_CONFIGS))
            except TopicExistsError:
                record = self.controller.topics.get(TOPIC)
        if record is not None:
            self._use(record)

    def _use(self, record) -> None:
        if record.partitions != self.partitions:
            log.warning("%s has %d partitions, offsets.topic.num.partitions=%d: using %d",
                        TOPIC, record.partitions, self.partitions, record.partitions)
        self.partitions = record.partitions  # the group -> partition map must never change under data

    def _load_partition(self, index: int) -> int:
        partition = self.replicas.get(TOPIC, index)
        if partition is None:
            return 0
        lg, offset, end, count = partition.log, partition.log_start_offset, partition.log_end_offset, 0
        while offset < end:
            data = lg.read(offset, READ_CHUNK, max_offset=end, min_one_batch=True).read()
            if not data:
                break
            pos = 0
            while pos + 12 <= len(data):
                _, length = _BATCH_HEAD.unpack_from(data, pos)
                if pos + 12 + length > len(data):
                    break  # a partial batch at the chunk's end: the next read starts at it
                for rec in decode_records(memoryview(data)[pos:pos + 12 + length]):
                    if rec.offset >= offset:
                        count += 1
                        self._replay(rec.key, rec.value, index, rec.offset)
                offset = max(offset, decode_last_offset(data, pos) + 1)
                pos += 12 + length
            if pos == 0:
                break  # not even one whole batch: never spin
        return count

    def _replay(self, key, value, index: int, offset: int) -> None:
        try:
            k = records.decode_key(key)
            if not isinstance(k, records.OffsetKey):
                return  # group metadata and newer record types: not used here
            if value is None:
                self._forget(k.group, (k.topic, k.partition))
            else:
                self.offsets.setdefault(k.group, {})[(k.topic, k.partition)] = \
                    records.decode_offset_commit_value(value)
        except ValueError as exc:
            log.warning("skipping an unreadable record at %s-%d offset %d: %s", TOPIC, index, offset, exc)

    def _forget(self, group: str, tp) -> None:
        offsets = self.offsets.get(group)
        if offsets is not None:
            offsets.pop(tp, None)
            if not offsets:
                del self.offsets[group]

    # ---- reads ----------------------------------------------------------------------------

    def partition_for(self, group: str) -> int:
        return records.offsets_partition(group, self.partitions)

    def has_offsets(self, group: str) -> bool:
        return bool(self.offsets.get(group))

    def groups(self) -> list[str]:
        return list(self.offsets)

    def fetch(self, group: str, partitions=None) -> dict:
        """(topic, partition) -> OffsetValue for the asked partitions (None: all) that have one."""
        offsets = self.offsets.get(group, {})
        if partitions is None:
            return dict(offsets)
        return {tp: offsets[tp] for tp in partitions if tp in offsets}

    # ---- writes ---------------------------------------------------------------------------

    async def commit(self, group: str, values: dict) -> int:
        """Append ``{(topic, partition): OffsetValue}`` as one batch; an error code (0: done)."""
        if not values:
            return 0
        recs = [Record(key=records.encode_offset_commit_key(group, t, p),
                       value=records.encode_offset_commit_value(v.offset, v.leader_epoch, v.metadata,
                                                                v.commit_timestamp, v.expire_timestamp))
                for (t, p), v in values.items()]
        error = await self._append(group, recs)
        if not error:
            self.offsets.setdefault(group, {}).update(values)
        return error

    async def delete(self, group: str, partitions=None) -> int:
        """Tombstones for the group's offsets (all, or the given partitions); an error code."""
        offsets = self.offsets.get(group, {})
        tps = [tp for tp in (offsets if partitions is None else partitions) if tp in offsets]
        if not tps:
            return 0
        error = await self._append(group, [Record(key=records.encode_offset_commit_key(group, t, p), value=None)
                                     for t, p in tps])
        if not error:
            for tp in tps:
                self._forget(group, tp)
        return error

    async def _append(self, group: str, recs) -> int:
        """Append to the group's partition and wait until it is replicated (HW), as Kafka's commits."""
        try:
            await self.ensure_topic()
        except BrokerError as exc:
            log.error("cannot create %s: %s", TOPIC, exc)
            return exc.code
        key = (TOPIC, self.partition_for(group))
        if key[1] not in self.owned:
            return NOT_COORDINATOR
        outcomes = self.replicas.append(-1, {key: build_batch(recs, base_timestamp=now_ms())})
        error = outcomes[key].error
        if not error:
            waits = self.replicas.pending_acks(outcomes)
            if waits:
                error = (await self.replicas.wait_for_acks(waits, OFFSET_COMMIT_TIMEOUT_MS))[key]
        if error:
            log.error("could not write offsets of group %s to %s-%d: error %d %s", group, *key,
                      error, outcomes[key].message or "")
        return error

    async def expire(self, now: int, retention_ms: int, is_empty) -> int:
        """Tombstone offsets past retention: explicit expire timestamps, or any offset of a group
        without members (``is_empty(group) -> (empty, empty_since_ms)``) older than the retention."""
        removed = 0
        for group in list(self.offsets):
            empty, since = is_empty(group)
            stale = [tp for tp, v in self.offsets[group].items()
                     if (v.expire_timestamp != -1 and now >= v.expire_timestamp)
                     or (empty and now >= max(v.commit_timestamp, since) + retention_ms)]
            if stale and not await self.delete(group, stale):
                removed += len(stale)
        return removed


def decode_last_offset(data, pos: int) -> int:
    """A batch's last offset: base offset + lastOffsetDelta (bytes 23-26 of the header)."""
    base = _BATCH_HEAD.unpack_from(data, pos)[0]
    return base + struct.unpack_from(">i", data, pos + 23)[0]

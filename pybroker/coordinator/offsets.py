"""Committed offsets: kept in memory, made durable in the internal topic ``__consumer_offsets``.

Each commit appends one record batch (one record per partition: key group/topic/partition, value
offset/epoch/metadata/timestamps, codecs in records.py) to the group's partition of the topic,
chosen as Kafka does (``abs(groupId.hashCode()) % partitions``), and updates memory only after
the append succeeded. A null value (tombstone) deletes an offset. The topic is created on first
use, as Kafka does; at start every partition is read from its log start and replayed, last record
wins. The topic is compacted, as in Kafka: the log cleaner keeps the latest commit per key, and
the tombstones of deleted or expired offsets remove them from disk once delete.retention.ms passed.

Transactional commits (TxnOffsetCommit) go in as a transactional batch of the producer and stay
pending (txn_offsets.py) until the producer's COMMIT marker on the same partition makes them
committed, unless a commit appended later in the log already replaced them; ABORT drops them.
Markers arrive through the replica manager's marker listeners; a replay does the same from the
control batches it reads, and what is still pending at the log end stays pending.
"""
import asyncio
import logging
import struct

from pybroker.coordinator import records
from pybroker.coordinator.group import now_ms
from pybroker.errors import TopicExistsError
from pybroker.errors import BrokerError
from pybroker.coordinator.txn_offsets import CoordinatorSequences, PendingOffset, PendingTxnOffsets
from pybroker.protocol.errors import (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
                                      INVALID_COMMIT_OFFSET_SIZE, INVALID_FETCH_SIZE, INVALID_TXN_STATE,
                                      KAFKA_STORAGE_ERROR, MESSAGE_TOO_LARGE, NETWORK_EXCEPTION, NOT_COORDINATOR,
                                      NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER,
                                      RECORD_LIST_TOO_LARGE, TRANSACTION_ABORTABLE, UNKNOWN_TOPIC_OR_PARTITION)
from pybroker.records import (CONTROL, HEADER, TRANSACTIONAL, Record, build_batch, decode_control_record,
                              decode_records)

log = logging.getLogger(__name__)

TOPIC = "__consumer_offsets"
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "104857600"}  # Kafka's offsets.topic.segment.bytes
READ_CHUNK = 1 << 20
OFFSET_COMMIT_TIMEOUT_MS = 5000  # offsets.commit.timeout.ms
MARKER_REPLICATION_WAITS = 12  # rounds of OFFSET_COMMIT_TIMEOUT_MS before a marker's offsets apply anyway
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
# Kafka's maybeConvertOffsetCommitError: append errors as a group coordinator's client understands them
_COMMIT_ERRORS = {NETWORK_EXCEPTION: COORDINATOR_LOAD_IN_PROGRESS,
                  UNKNOWN_TOPIC_OR_PARTITION: COORDINATOR_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS: COORDINATOR_NOT_AVAILABLE,
                  NOT_ENOUGH_REPLICAS_AFTER_APPEND: COORDINATOR_NOT_AVAILABLE,
                  NOT_LEADER_OR_FOLLOWER: NOT_COORDINATOR, KAFKA_STORAGE_ERROR: NOT_COORDINATOR,
                  MESSAGE_TOO_LARGE: INVALID_COMMIT_OFFSET_SIZE, RECORD_LIST_TOO_LARGE: INVALID_COMMIT_OFFSET_SIZE,
                  INVALID_FETCH_SIZE: INVALID_COMMIT_OFFSET_SIZE}


def commit_error(code: int) -> int:
    return _COMMIT_ERRORS.get(code, code)


class OffsetStore:
    """Offsets of the groups whose ``__consumer_offsets`` partition this broker leads.

    A partition is loaded (replayed from its log) when this broker becomes its leader and
    forgotten when it stops leading it; groups in partitions led elsewhere are NOT_COORDINATOR.
    """

    def __init__(self, config, services):
        self.config = config
        self.services = services  # pybroker.services.Services: replicas, metadata, control, transactions
        self.coordinator = None  # told when partitions load and unload
        self.partitions = config.offsets_topic_num_partitions
        self.offsets: dict[str, dict[tuple[str, int], records.OffsetValue]] = {}
        self.positions: dict[str, dict[tuple[str, int], int]] = {}  # log offset of each committed value's batch
        self.owned: set[int] = set()
        self.loads: dict[int, int] = {}  # partition -> load count: completions started before a reload stop
        self.pending = PendingTxnOffsets()
        self.sequences = CoordinatorSequences()
        self.in_flight: dict[tuple[str, tuple[str, int]], int] = {}  # plain commits not replicated yet
        self._completions: set = set()  # tasks waiting for a marker's replication
        listeners = getattr(services.replicas, "marker_listeners", None)
        if listeners is not None:
            listeners.append(self.on_marker)
        deletions = getattr(services.metadata, "deletion_listeners", None)
        if deletions is not None:
            deletions.append(self.on_topics_deleted)

    @property
    def control(self):
        return self.services.control

    @property
    def replicas(self):
        return self.services.replicas

    # ---- leadership -----------------------------------------------------------------------

    def on_leadership(self, key, is_leader: bool) -> None:
        if key[0] != TOPIC:
            return
        index = key[1]
        record = self.control.topics.get(TOPIC)
        if record is not None and record.partitions:
            self._use(record)
        self._unload(index)
        self.loads[index] = self.loads.get(index, 0) + 1
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
            self.positions.pop(group, None)
        self.pending.forget_groups([g for g in self.pending.groups() + list(self.pending.completing)
                                    if self.partition_for(g) == index])
        self.sequences.forget(index)

    def owns(self, group: str) -> bool:
        return self.partition_for(group) in self.owned

    async def ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use (FindCoordinator, commit), as Kafka does."""
        record = self.control.topics.get(TOPIC)
        if record is None:
            rf = min(self.config.offsets_topic_replication_factor, max(len(self.services.metadata.brokers), 1))
            try:
                record = await self.control.create_topic(TOPIC, self.partitions, rf, TOPIC_CONFIGS)
            except TopicExistsError:
                record = self.control.topics.get(TOPIC)
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
                count += self._replay_batch(memoryview(data)[pos:pos + 12 + length], index, offset)
                offset = max(offset, decode_last_offset(data, pos) + 1)
                pos += 12 + length
            if pos == 0:
                break  # not even one whole batch: never spin
        return count

    def _replay_batch(self, batch, index: int, first: int) -> int:
        """Replay one batch's records at or after offset ``first``; how many records that was."""
        head = HEADER.unpack_from(batch, 0)
        base, attributes, producer_id, epoch, sequence = head[0], head[5], head[9], head[10], head[11]
        if attributes & CONTROL:
            if base >= first:
                self._replay_marker(batch, index, producer_id, base)
            return 0
        txn_producer = producer_id if attributes & TRANSACTIONAL else None
        if txn_producer is not None:
            self.sequences.appended(index, producer_id, epoch, sequence, head[6] + 1)
        count = 0
        for rec in decode_records(batch):
            if rec.offset >= first:
                count += 1
                self._replay(rec.key, rec.value, index, rec.offset, base, txn_producer)
        return count

    def _replay_marker(self, batch, index: int, producer_id: int, offset: int) -> None:
        try:
            marker = decode_control_record(batch)
        except ValueError as exc:
            log.warning("skipping an unreadable control batch at %s-%d offset %d: %s", TOPIC, index, offset, exc)
            return
        if marker is None:
            return  # emptied by the cleaner: its transaction's records are gone too
        taken = self.pending.take(producer_id, self._groups_of(producer_id, index), offset)
        self._settle(taken, marker.commit)  # as Kafka: anything but COMMIT drops them

    def _replay(self, key, value, index: int, offset: int, batch_offset: int, txn_producer) -> None:
        try:
            k = records.decode_key(key)
            if not isinstance(k, records.OffsetKey):
                return  # group metadata and newer record types: not used here
            tp = (k.topic, k.partition)
            if txn_producer is not None:  # pending until the producer's marker
                if value is None:
                    self.pending.remove(k.group, txn_producer, tp)
                else:
                    self.pending.put(k.group, txn_producer, tp,
                                     PendingOffset(batch_offset, records.decode_offset_commit_value(value)))
            elif value is None:
                self._forget(k.group, tp)
            else:
                self._put(k.group, tp, records.decode_offset_commit_value(value), batch_offset)
        except ValueError as exc:
            log.warning("skipping an unreadable record at %s-%d offset %d: %s", TOPIC, index, offset, exc)

    def _put(self, group: str, tp, value, log_offset: int) -> None:
        """Make ``value`` the committed offset unless one appended later in the log is already there."""
        known = self.positions.get(group, {}).get(tp)
        if known is not None and known > log_offset:
            return
        self.offsets.setdefault(group, {})[tp] = value
        self.positions.setdefault(group, {})[tp] = log_offset

    def _forget(self, group: str, tp) -> None:
        offsets = self.offsets.get(group)
        if offsets is not None:
            offsets.pop(tp, None)
            self.positions.get(group, {}).pop(tp, None)
            if not offsets:
                del self.offsets[group]
                self.positions.pop(group, None)

    # ---- transaction markers --------------------------------------------------------------

    def _groups_of(self, producer_id: int, index: int) -> list[str]:
        return [g for g in self.pending.groups_of_producer(producer_id) if self.partition_for(g) == index]

    def on_marker(self, topic: str, partition: int, producer_id: int, commit: bool, marker_offset: int) -> None:
        """A COMMIT/ABORT marker was appended here as leader: settle what the producer appended before it,
        once the marker is replicated (as Kafka completes offsets after WriteTxnMarkers' append)."""
        if topic != TOPIC or partition not in self.owned:
            return
        taken = self.pending.take(producer_id, self._groups_of(producer_id, partition), marker_offset)
        if not taken:
            return
        p = self.replicas.get(TOPIC, partition)
        if p is None or p.high_watermark > marker_offset:
            self._settle(taken, commit)
            return
        task = asyncio.get_running_loop().create_task(
            self._settle_when_replicated(partition, taken, commit, marker_offset))
        self._completions.add(task)
        task.add_done_callback(self._completions.discard)

    async def _settle_when_replicated(self, index: int, taken, commit: bool, marker_offset: int) -> None:
        load, key = self.loads.get(index), (TOPIC, index)
        for _ in range(MARKER_REPLICATION_WAITS):
            error = (await self.replicas.wait_for_acks({key: marker_offset + 1}, OFFSET_COMMIT_TIMEOUT_MS))[key]
            if self.loads.get(index) != load:
                return  # unloaded or reloaded meanwhile: the log replay settles them
            if error == NOT_LEADER_OR_FOLLOWER:
                return  # the next leader replays the marker
            if not error:
                break
        else:
            log.warning("marker at %s-%d offset %d is not replicated yet: settling its offsets anyway",
                        TOPIC, index, marker_offset)
        self._settle(taken, commit)

    def _settle(self, taken, commit: bool) -> None:
        """Apply (COMMIT) or drop (ABORT) entries a marker took from the pending ones."""
        if commit:
            for group, tp, entry in taken:
                self._put(group, tp, entry.value, entry.log_offset)
                if self.coordinator is not None:
                    self.coordinator.ensure_group(group)
        self.pending.done(taken)

    # ---- topic deletion -------------------------------------------------------------------

    def on_topics_deleted(self, topics) -> None:
        """Deleted topics take the committed offsets of the groups coordinated here with them, as
        tombstones (as Kafka's coordinator on partition deletion): a restart and a recreated topic of
        the same name find none."""
        names = {t for t in topics if t != TOPIC}
        if not names or not self.owned:
            return
        self.pending.drop_topics(names)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a tool applying metadata offline): nothing is coordinated
            return
        task = loop.create_task(self._remove_topics(names))
        self._completions.add(task)
        task.add_done_callback(self._completions.discard)

    async def _remove_topics(self, names: set) -> None:
        """Tombstones, one batch per group; an Empty group left without offsets stays until the
        housekeeping drops it (as Kafka's consumer-protocol coordinator)."""
        doomed = {g: [tp for tp in offsets if tp[0] in names] for g, offsets in self.offsets.items() if self.owns(g)}
        doomed = {g: tps for g, tps in doomed.items() if tps}
        errors = await asyncio.gather(*(self.delete(g, tps) for g, tps in doomed.items()))
        for group, error in zip(doomed, errors):
            if error:  # the partition moved or is unavailable: its next leader still replays the offsets
                log.warning("could not remove the offsets of deleted topics %s from group %s: error %d",
                            sorted(names), group, error)
        if doomed:
            log.info("removed the offsets of deleted topics %s from %d groups", sorted(names), len(doomed))

    # ---- reads ----------------------------------------------------------------------------

    def partition_for(self, group: str) -> int:
        return records.offsets_partition(group, self.partitions)

    def has_offsets(self, group: str) -> bool:
        """Committed offsets, or transactional ones still waiting for their marker (Kafka's hasOffsets)."""
        return bool(self.offsets.get(group)) or self.pending.has_group(group)

    def groups(self) -> list[str]:
        return list(dict.fromkeys([*self.offsets, *self.pending.groups()]))

    def fetch(self, group: str, partitions=None) -> dict:
        """(topic, partition) -> OffsetValue for the asked partitions (None: all) that have one."""
        offsets = self.offsets.get(group, {})
        if partitions is None:
            return dict(offsets)
        return {tp: offsets[tp] for tp in partitions if tp in offsets}

    def is_unstable(self, group: str, tp) -> bool:
        """A commit of ``tp`` is under way: a transaction not settled yet, or a commit not replicated yet."""
        return self.pending.is_unstable(group, tp) or (group, tp) in self.in_flight

    # ---- writes ---------------------------------------------------------------------------

    async def commit(self, group: str, values: dict) -> int:
        """Append ``{(topic, partition): OffsetValue}`` as one batch; an error code as Kafka answers
        commits (0: done)."""
        if not values:
            return 0
        recs = [Record(key=records.encode_offset_commit_key(group, t, p),
                       value=records.encode_offset_commit_value(v.offset, v.leader_epoch, v.metadata,
                                                                v.commit_timestamp, v.expire_timestamp))
                for (t, p), v in values.items()]
        keys = [(group, tp) for tp in values]
        for key in keys:
            self.in_flight[key] = self.in_flight.get(key, 0) + 1
        try:
            error, base = await self._append(group, recs)
        finally:
            for key in keys:
                left = self.in_flight.pop(key) - 1
                if left:
                    self.in_flight[key] = left
        if not error:
            for tp, value in values.items():
                self._put(group, tp, value, base)
        return commit_error(error)

    async def commit_transactional(self, group: str, transactional_id: str, producer_id: int, producer_epoch: int,
                                   values: dict) -> int:
        """Append ``{(topic, partition): OffsetValue}`` as one transactional batch of the producer, kept
        pending until its marker; an error code (0: done). As Kafka 3.8 (KIP-890 part 1), a producer
        with no open transaction in this partition must have added it (AddOffsetsToTxn) first."""
        try:
            await self.ensure_topic()
        except BrokerError as exc:
            log.error("cannot create %s: %s", TOPIC, exc)
            return exc.code
        index = self.partition_for(group)
        if index not in self.owned:
            return NOT_COORDINATOR
        key = (TOPIC, index)
        error, verification = await self._verify(transactional_id, producer_id, producer_epoch, key)
        if error:
            return error
        if index not in self.owned:
            return NOT_COORDINATOR  # the partition moved away while the transaction was verified
        if producer_id < 0:
            return await self.commit(group, values)  # as Kafka: without a producer id, a plain commit
        recs = [Record(key=records.encode_offset_commit_key(group, t, p),
                       value=records.encode_offset_commit_value(v.offset, v.leader_epoch, v.metadata,
                                                                v.commit_timestamp, v.expire_timestamp))
                for (t, p), v in values.items()]
        sequence = self.sequences.sequence_for(index, producer_id, producer_epoch)
        batch = build_batch(recs, base_timestamp=now_ms(), attributes=TRANSACTIONAL, producer_id=producer_id,
                            producer_epoch=producer_epoch, base_sequence=sequence)
        outcomes = self.replicas.append(-1, {key: batch}, verification=verification)
        outcome = outcomes[key]
        if outcome.error:
            log.error("could not write transactional offsets of group %s (producer %d) to %s-%d: error %d %s",
                      group, producer_id, *key, outcome.error, outcome.message or "")
            return commit_error(outcome.error)
        self.sequences.appended(index, producer_id, producer_epoch, sequence, len(recs))
        entries = {tp: PendingOffset(outcome.result.base_offset, v) for tp, v in values.items()}
        for tp, entry in entries.items():
            self.pending.put(group, producer_id, tp, entry)
        waits = self.replicas.pending_acks(outcomes)
        if waits:
            error = (await self.replicas.wait_for_acks(waits, OFFSET_COMMIT_TIMEOUT_MS))[key]
            if error:
                for tp, entry in entries.items():
                    self.pending.discard(group, producer_id, tp, entry)
                return commit_error(error)
        return 0

    async def _verify(self, transactional_id: str, producer_id: int, producer_epoch: int, key):
        """(error, the append's verification): the transaction coordinator says whether the offsets
        partition is in the producer's transaction, unless one is already open there; the partition's
        guard makes a marker written meanwhile void the answer."""
        transactions = self.services.transactions
        if transactions is None or not getattr(self.config, "transaction_partition_verification_enable", True):
            return 0, None  # no transaction coordinator here, or verification off: appended unchecked
        guards, ask = self.replicas.start_verification([key], producer_id)
        if ask:
            try:
                errors = await transactions.verify(transactional_id, producer_id, producer_epoch, ask)
            except Exception as exc:  # the coordinator cannot answer now: the producer retries
                log.warning("cannot verify the transaction of producer %d: %s", producer_id, exc)
                return commit_error(NETWORK_EXCEPTION), None
            error = errors.get(key, TRANSACTION_ABORTABLE)
            if error == INVALID_TXN_STATE:
                error = TRANSACTION_ABORTABLE  # "not in the transaction": TxnOffsetCommit answers it per version
            if error:
                return commit_error(error), None
        return 0, guards

    async def delete(self, group: str, partitions=None) -> int:
        """Tombstones for the group's offsets (all, or the given partitions); an error code."""
        offsets = self.offsets.get(group, {})
        tps = [tp for tp in (offsets if partitions is None else partitions) if tp in offsets]
        if not tps:
            return 0
        error, base = await self._append(group, [Record(key=records.encode_offset_commit_key(group, t, p), value=None)
                                           for t, p in tps])
        if not error:
            for tp in tps:
                if self.positions.get(group, {}).get(tp, -1) < base:  # not replaced by a later commit meanwhile
                    self._forget(group, tp)
        return error

    async def _append(self, group: str, recs) -> tuple[int, int]:
        """Append to the group's partition and wait until it is replicated (HW), as Kafka's commits:
        (error code, the batch's base offset)."""
        try:
            await self.ensure_topic()
        except BrokerError as exc:
            log.error("cannot create %s: %s", TOPIC, exc)
            return exc.code, -1
        key = (TOPIC, self.partition_for(group))
        if key[1] not in self.owned:
            return NOT_COORDINATOR, -1
        outcomes = self.replicas.append(-1, {key: build_batch(recs, base_timestamp=now_ms())})
        error = outcomes[key].error
        if not error:
            waits = self.replicas.pending_acks(outcomes)
            if waits:
                error = (await self.replicas.wait_for_acks(waits, OFFSET_COMMIT_TIMEOUT_MS))[key]
        if error:
            log.error("could not write offsets of group %s to %s-%d: error %d %s", group, *key,
                      error, outcomes[key].message or "")
            return error, -1
        return 0, outcomes[key].result.base_offset

    async def expire(self, now: int, retention_ms: int, is_empty) -> int:
        """Tombstone offsets past retention: explicit expire timestamps, or any offset of a group
        without members (``is_empty(group) -> (empty, empty_since_ms)``) older than the retention."""
        removed = 0
        for group in list(self.offsets):
            empty, since = is_empty(group)
            stale = [tp for tp, v in self.offsets.get(group, {}).items()
                     if (group, tp) not in self.in_flight  # as Kafka: a commit under way keeps it
                     and ((v.expire_timestamp != -1 and now >= v.expire_timestamp)
                          or (empty and now >= max(v.commit_timestamp, since) + retention_ms))]
            if stale and not await self.delete(group, stale):
                removed += len(stale)
        return removed


def decode_last_offset(data, pos: int) -> int:
    """A batch's last offset: base offset + lastOffsetDelta (bytes 23-26 of the header)."""
    base = _BATCH_HEAD.unpack_from(data, pos)[0]
    return base + struct.unpack_from(">i", data, pos + 23)[0]

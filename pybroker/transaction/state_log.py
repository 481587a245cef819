"""``__transaction_state``: where transactional ids live, how they are read back and written.

The topic is created on first use (FindCoordinator for a transactional id, InitProducerId), as
Kafka does: ``transaction.state.log.num.partitions`` partitions, replication factor
``transaction.state.log.replication.factor`` capped by the live brokers, compacted. An id belongs
to partition ``abs(javaStringHashCode(id)) % partitions``. A partition is replayed (last record per
id wins, a tombstone removes it) when this broker becomes its leader; every write is appended with
acks=all and reported only once the high watermark passed it, so memory changes only for records
that survive a leader change.
"""
import logging
import struct

from pybroker.errors import TopicExistsError
from pybroker.coordinator.group import now_ms
from pybroker.coordinator.offsets import decode_last_offset
from pybroker.coordinator.records import offsets_partition
from pybroker.protocol.errors import (COORDINATOR_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, MESSAGE_TOO_LARGE,
                                      NOT_COORDINATOR, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                                      NOT_LEADER_OR_FOLLOWER, RECORD_LIST_TOO_LARGE, REQUEST_TIMED_OUT,
                                      UNKNOWN_SERVER_ERROR, UNKNOWN_TOPIC_OR_PARTITION)
from pybroker.records import Record, build_batch, decode_records
from pybroker.transaction import records

log = logging.getLogger(__name__)

TOPIC = "__transaction_state"
READ_CHUNK = 1 << 20
_BATCH_HEAD = struct.Struct(">qi")
# a failed append as the client should see it (Kafka's appendTransactionToLog mapping)
_APPEND_ERRORS = {UNKNOWN_TOPIC_OR_PARTITION: COORDINATOR_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS: COORDINATOR_NOT_AVAILABLE,
                  NOT_ENOUGH_REPLICAS_AFTER_APPEND: COORDINATOR_NOT_AVAILABLE,
                  REQUEST_TIMED_OUT: COORDINATOR_NOT_AVAILABLE,
                  NOT_LEADER_OR_FOLLOWER: NOT_COORDINATOR, KAFKA_STORAGE_ERROR: NOT_COORDINATOR,
                  MESSAGE_TOO_LARGE: UNKNOWN_SERVER_ERROR, RECORD_LIST_TOO_LARGE: UNKNOWN_SERVER_ERROR}


class TransactionStateLog:
    def __init__(self, config, services):
        self.config = config
        self.services = services  # pybroker.services.Services: control, replicas, metadata
        self.partitions = config.transaction_state_log_num_partitions

    def topic_configs(self, replication_factor: int) -> dict:
        min_isr = min(self.config.transaction_state_log_min_isr, replication_factor)  # a capped topic stays writable
        return {"cleanup.policy": "compact", "min.insync.replicas": str(min_isr),
                "segment.bytes": str(self.config.transaction_state_log_segment_bytes)}

    def partition_for(self, transactional_id: str) -> int:
        return offsets_partition(transactional_id, self.partitions)

    async def ensure_topic(self) -> None:
        control = self.services.control
        record = control.topics.get(TOPIC)
        if record is None:
            rf = min(self.config.transaction_state_log_replication_factor,
                     max(len(self.services.metadata.brokers), 1))
            try:
                record = await control.create_topic(TOPIC, self.partitions, rf, self.topic_configs(rf))
            except TopicExistsError:
                record = control.topics.get(TOPIC)
        if record is not None:
            self.use(record)

    def use(self, record) -> None:
        """Follow the topic's real partition count: the id -> partition map must never change under data."""
        if record.partitions and record.partitions != self.partitions:
            log.warning("%s has %d partitions, transaction.state.log.num.partitions=%d: using %d",
                        TOPIC, record.partitions, self.partitions, record.partitions)
            self.partitions = record.partitions

    def replay(self, index: int):
        """(transactional_id, TxnLogValue or None) for each record of the partition, in log order."""
        partition = self.services.replicas.get(TOPIC, index)
        if partition is None:
            return
        lg, offset, end = partition.log, partition.log_start_offset, partition.log_end_offset
        while offset < end:
            data = lg.read(offset, READ_CHUNK, max_offset=end, min_one_batch=True).read()
            pos = 0
            while pos + 12 <= len(data):
                _, length = _BATCH_HEAD.unpack_from(data, pos)
                if pos + 12 + length > len(data):
                    break  # a partial batch at the chunk's end: the next read starts at it
                for rec in decode_records(memoryview(data)[pos:pos + 12 + length]):
                    if rec.offset >= offset and rec.key is not None:
                        item = _decode(rec, index)
                        if item is not None:
                            yield item
                offset = max(offset, decode_last_offset(data, pos) + 1)
                pos += 12 + length
            if pos == 0:
                break  # not even one whole batch: never spin

    async def append(self, index: int, transactional_id: str, value: bytes | None, timeout_ms: int) -> int:
        """Append one record and wait until it is replicated; 0 or the error the client gets."""
        key = (TOPIC, index)
        replicas = self.services.replicas
        rec = Record(key=records.encode_key(transactional_id), value=value)
        outcomes = replicas.append(-1, {key: build_batch([rec], base_timestamp=now_ms())})
        error = outcomes[key].error
        if not error:
            waits = replicas.pending_acks(outcomes)
            if waits:
                error = (await replicas.wait_for_acks(waits, timeout_ms))[key]
        if error:
            log.warning("could not write transactional id %s to %s-%d: error %d", transactional_id, *key, error)
        return _APPEND_ERRORS.get(error, error)


def _decode(rec, index: int):
    try:
        tid = records.decode_key(rec.key)
        if tid is None:
            return None
        return tid, (None if rec.value is None else records.decode_value(rec.value))
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        log.warning("skipping an unreadable record at %s-%d offset %d: %s", TOPIC, index, rec.offset, exc)
        return None


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

from pybroker.asyncutil import settle
from pybroker.controller.metadata_store import TopicExistsError
from pybroker.coordinator.group import now_ms
from pybroker.coordinator.offsets import decode_last_offset
from pybroker.coordinator.records import offsets_partition
from pybroker.records import Record, build_batch, decode_records
from pybroker.transaction import records

log = logging.getLogger(__name__)

TOPIC = "__transaction_state"
READ_CHUNK = 1 << 20
_BATCH_HEAD = struct.Struct(">qi")
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, UNKNOWN_SERVER_ERROR = 16, 15, -1
# a failed append as the client should see it (Kafka's appendTransactionToLog mapping)
_APPEND_ERRORS = {3: COORDINATOR_NOT_AVAILABLE, 19: COORDINATOR_NOT_AVAILABLE, 20: COORDINATOR_NOT_AVAILABLE,
                  7: COORDINATOR_NOT_AVAILABLE, 6: NOT_COORDINATOR, 56: NOT_COORDINATOR,
                  10: UNKNOWN_SERVER_ERROR, 18: UNKNOWN_SERVER_ERROR}


class TransactionStateLog:
    def __init__(self, config, broker):
        self.config = config
        self.broker = broker
        self.partitions = config.transaction_state_log_num_partitions

    def topic_configs(self, replication_factor: int) -> dict:
        min_isr = min(self.config.transaction_state_log_min_isr, replication_factor)  # a capped topic stays writable
        return {"cleanup.policy": "compact", "min.insync.replicas": str(min_isr),
                "segment.bytes": str(self.config.transaction_state_log_segment_bytes)}

    def partition_for(self, transactional_id: str) -> int:
        return offsets_partition(transactional_id, self.partitions)

    async def ensure_topic(self) -> None:
        controller = self.broker.controller
        record = controller.topics.get(TOPIC)
        if record is None:
            rf = min(self.config.transaction_state_log_replication_factor,
                     max(len(self.broker.metadata.brokers), 1))
            try:
                record = await settle(controller.create_topic(TOPIC, self.partitions, rf, self.topic_configs(rf)))
            except TopicExistsError:
                record = controller.topics.get(TOPIC)
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
        partition = self.broker.replicas.get(TOPIC, index)
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
        replicas = self.broker.replicas
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


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

from pybroker.coordinator import state_topic
from pybroker.coordinator.records import offsets_partition
from pybroker.transaction import records

log = logging.getLogger(__name__)

TOPIC = "__transaction_state"


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
        record = await state_topic.ensure_topic(self.services, TOPIC, self.partitions,
                                                self.config.transaction_state_log_replication_factor,
                                                self.topic_configs)
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
        for rec in state_topic.replay_records(self.services.replicas, TOPIC, index):
            item = _decode(rec, index)
            if item is not None:
                yield item

    async def append(self, index: int, transactional_id: str, value: bytes | None, timeout_ms: int) -> int:
        """Append one record and wait until it is replicated; 0 or the error the client gets."""
        error = await state_topic.append_record(self.services.replicas, TOPIC, index,
                                                records.encode_key(transactional_id), value, timeout_ms)
        if error:
            log.warning("could not write transactional id %s to %s-%d: error %d", transactional_id, TOPIC, index,
                        error)
        return state_topic.COORDINATOR_ERRORS.get(error, error)


def _decode(rec, index: int):
    try:
        tid = records.decode_key(rec.key)
        if tid is None:
            return None
        return tid, (None if rec.value is None else records.decode_value(rec.value))
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        log.warning("skipping an unreadable record at %s-%d offset %d: %s", TOPIC, index, rec.offset, exc)
        return None


"""An internal compacted topic that a coordinator keeps its state in (``__transaction_state``,
``__share_group_state``): created on first use, replayed when this broker becomes a partition's
leader, appended to with acks=all."""
import struct

from pybroker.coordinator.group import now_ms
from pybroker.coordinator.offsets import decode_last_offset
from pybroker.errors import TopicExistsError
from pybroker.protocol.errors import (COORDINATOR_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, MESSAGE_TOO_LARGE,
                                      NOT_COORDINATOR, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                                      NOT_LEADER_OR_FOLLOWER, RECORD_LIST_TOO_LARGE, REQUEST_TIMED_OUT,
                                      UNKNOWN_SERVER_ERROR, UNKNOWN_TOPIC_OR_PARTITION)
from pybroker.records import Record, build_batch, decode_records

READ_CHUNK = 1 << 20
# a failed append as the client should see it (as Kafka maps a coordinator's append errors)
COORDINATOR_ERRORS = {
    UNKNOWN_TOPIC_OR_PARTITION: COORDINATOR_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS: COORDINATOR_NOT_AVAILABLE,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND: COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT: COORDINATOR_NOT_AVAILABLE,
    NOT_LEADER_OR_FOLLOWER: NOT_COORDINATOR, KAFKA_STORAGE_ERROR: NOT_COORDINATOR,
    MESSAGE_TOO_LARGE: UNKNOWN_SERVER_ERROR, RECORD_LIST_TOO_LARGE: UNKNOWN_SERVER_ERROR}
_BATCH_HEAD = struct.Struct(">qi")


async def ensure_topic(services, topic: str, partitions: int, wanted_rf: int, configs_for):
    """The topic's record, created when missing with ``wanted_rf`` capped by the live brokers;
    ``configs_for(rf)`` gives its configs."""
    control = services.control
    record = control.topics.get(topic)
    if record is None:
        rf = min(wanted_rf, max(len(services.metadata.brokers), 1))
        try:
            record = await control.create_topic(topic, partitions, rf, configs_for(rf))
        except TopicExistsError:
            record = control.topics.get(topic)
    return record


def replay_records(replicas, topic: str, index: int):
    """Every keyed record of a partition of this broker, in log order."""
    partition = replicas.get(topic, index)
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
                    yield rec
            offset = max(offset, decode_last_offset(data, pos) + 1)
            pos += 12 + length
        if pos == 0:
            break  # not even one whole batch: never spin


async def append_record(replicas, topic: str, index: int, key: bytes, value: bytes | None, timeout_ms: int) -> int:
    """Append one record as the partition's leader and wait until it is replicated; 0 or the error."""
    tp = (topic, index)
    outcomes = replicas.append(-1, {tp: build_batch([Record(key=key, value=value)], base_timestamp=now_ms())})
    error = outcomes[tp].error
    if not error:
        waits = replicas.pending_acks(outcomes)
        if waits:
            error = (await replicas.wait_for_acks(waits, timeout_ms))[tp]
    return error

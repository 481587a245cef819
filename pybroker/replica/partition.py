"""One partition replica on this broker: its log and its leadership state.

Carries leader epoch, log end offset, high watermark and ISR from day one. With one
replica the ISR is this broker alone and the high watermark follows the log end offset
at every append; a follower fetcher will move it for larger replica sets without this
class changing shape.
"""
import logging
import os
from dataclasses import dataclass

from pybroker.errors import BrokerError, OffsetOutOfRangeError
from pybroker.records import decode_records
from pybroker.replica.producer_state import ProducerStateManager

log = logging.getLogger(__name__)

EARLIEST, LATEST = -2, -1


class FencedLeaderEpochError(BrokerError):
    code = 74  # FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(BrokerError):
    code = 75  # UNKNOWN_LEADER_EPOCH


class NotEnoughReplicasError(BrokerError):
    code = 19  # NOT_ENOUGH_REPLICAS


@dataclass(frozen=True)
class ProduceResult:
    base_offset: int
    log_append_time: int
    log_start_offset: int
    duplicate: bool = False
    flushed: object = None  # a Future: acknowledge only once it is done (flush.messages reached)


class Partition:
    def __init__(self, topic: str, index: int, topic_id, log, node_id: int, leader_epoch: int = 0,
                 replicas: tuple[int, ...] | None = None):
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.node_id = node_id
        self.leader_id = node_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas or (node_id,)
        self.isr = (node_id,)
        self.producers = ProducerStateManager(log.directory)
        self.producers.load(log)
        self.high_watermark = log.log_end_offset  # one replica: everything written is replicated

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """A client's view of the leader epoch must match ours (-1: it has none)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"epoch {current_leader_epoch} is older than {self.leader_epoch}")
        raise UnknownLeaderEpochError(f"epoch {current_leader_epoch} is newer than {self.leader_epoch}")

    # ---- produce --------------------------------------------------------------------------

    def append_as_leader(self, records, required_acks: int, min_insync_replicas: int) -> ProduceResult:
        """Validate and append a produce request's records for this partition."""
        if required_acks == -1 and len(self.isr) < min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{len(self.isr)} in-sync replicas, min.insync.replicas={min_insync_replicas}")
        batches = self.log.validate(records)
        for _, info in batches:  # duplicates are answered with their first append's offsets
            if info.producer_id >= 0:
                duplicate = self.producers.check(info)
                if duplicate is not None:
                    if len(batches) != 1:
                        raise BrokerError("a duplicate batch must come alone")
                    return ProduceResult(duplicate[0], -1, self.log_start_offset, duplicate=True)
        # the headers as sent: the append rewrites base offsets in place
        sent = [(info, info.last_offset_delta) for _, info in batches]
        result = self.log.append_validated(batches, leader_epoch=self.leader_epoch)
        offset = result.first_offset
        for info, delta in sent:
            self.producers.update(info, offset, offset + delta, info.max_timestamp)
            offset += delta + 1
        self.maybe_increment_high_watermark()
        return ProduceResult(result.first_offset, result.log_append_time, result.log_start_offset,
                             flushed=result.flushed)

    def maybe_increment_high_watermark(self) -> bool:
        """The high watermark is the smallest log end offset in the ISR (here: ours)."""
        new = self.log.log_end_offset
        if new > self.high_watermark:
            self.high_watermark = new
            return True
        return False

    # ---- fetch ----------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, committed_only: bool, min_one_batch: bool):
        """A slice for a consumer: never past the high watermark (no transactions: LSO == HW)."""
        return self.log.read(offset, max_bytes, max_offset=self.high_watermark, min_one_batch=min_one_batch)

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark

    # ---- offsets --------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int, committed_only: bool = False) -> tuple[int, int]:
        """(offset, timestamp) for ListOffsets; (-1, -1) when no record is that recent."""
        if timestamp == EARLIEST:
            return self.log_start_offset, -1
        if timestamp == LATEST:
            return self.high_watermark, -1
        if timestamp < 0:
            raise OffsetOutOfRangeError(timestamp, self.log_start_offset, self.high_watermark)
        return self._first_record_at_or_after(timestamp)

    def _first_record_at_or_after(self, timestamp: int) -> tuple[int, int]:
        lg = self.log
        with lg.lock:
            for segment in list(lg.segments):
                if segment.max_timestamp < timestamp:
                    continue
                _, offset = segment.time_index.lookup(timestamp)
                found = segment.translate_offset(max(offset, lg.log_start_offset))
                position = found[0] if found else segment.size
                while position < segment.size:
                    header = segment.read_header(position)
                    if header.base_offset >= self.high_watermark:
                        return -1, -1
                    if header.max_timestamp >= timestamp and header.last_offset >= lg.log_start_offset:
                        batch = os.pread(segment.fd, header.batch_length + 12, position)
                        for rec in decode_records(batch):
                            if rec.timestamp >= timestamp and rec.offset >= lg.log_start_offset:
                                return rec.offset, rec.timestamp
                    position += header.batch_length + 12
        return -1, -1

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start to ``offset`` (-1: the high watermark); returns it."""
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            raise OffsetOutOfRangeError(offset, self.log_start_offset, self.high_watermark)
        self.log.maybe_increment_log_start_offset(target)
        return self.log_start_offset

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.log.epochs.end_offset_for(epoch, self.log_end_offset)

    def close(self) -> None:
        """Clean shutdown: the producer state snapshot matches the log as it is now."""
        self.producers.save(self.log.log_end_offset)

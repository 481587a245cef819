"""One partition replica on this broker: its log and its leadership state.

As leader it tracks each follower's log end offset and when it was last caught up; the high
watermark (HW) is the smallest log end offset over the in-sync replicas (ISR) and only grows.
As follower it copies the leader's batches byte for byte (offsets and leader epochs kept) and
takes the HW the leader reports, capped by its own log end. A replica factor of one is the same
code with an ISR of one: the HW follows every append.

Transactions: the last stable offset (LSO) is the first offset of a transaction not yet ended (or
ended by a marker the HW has not passed), capped by the HW; read_committed consumers read up to it.
A marker is appended as a control batch in the leader's epoch and replicates like any batch; an
ABORT goes into the txn index of the segment holding it, on leaders and followers alike.
"""
import logging
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass

from pybroker import core
from pybroker.errors import BrokerError, CorruptRecordError, InvalidRecordError, OffsetOutOfRangeError
from pybroker.protocol.errors import (FENCED_LEADER_EPOCH, NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER,
                                      OFFSET_NOT_AVAILABLE, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                      UNKNOWN_LEADER_EPOCH)
from pybroker.records import (CONTROL, TIMESTAMP_LOG_APPEND, TRANSACTIONAL, build_control_batch,
                              decode_control_record, decode_records, recompressed)
from pybroker.replica.producer_state import ProducerStateManager
from pybroker.replica.record_validation import check_records

log = logging.getLogger(__name__)

EARLIEST, LATEST = -2, -1
NO_VERIFICATION = None  # an append nobody asked the transaction coordinator about (internal writers)
NO_TRANSACTIONAL_ID = object()  # a produce request without a transactional id: transactional batches refused
RECOVERED = 0  # KIP-704 leader recovery states; 1 (RECOVERING): elected uncleanly, not yet recovered


class TransactionalIdRequiredError(BrokerError):
    code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED  # Kafka's answer to transactional records without an id


class NotLeaderOrFollowerError(BrokerError):
    code = NOT_LEADER_OR_FOLLOWER


class FencedLeaderEpochError(BrokerError):
    code = FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(BrokerError):
    code = UNKNOWN_LEADER_EPOCH


class NotEnoughReplicasError(BrokerError):
    code = NOT_ENOUGH_REPLICAS


class OffsetNotAvailableError(BrokerError):
    code = OFFSET_NOT_AVAILABLE  # KIP-207: a new leader's high watermark has not reached its epoch's start yet


@dataclass(frozen=True)
class MarkerResult:
    offset: int
    aborted: object = None  # the AbortedTxn indexed, if the marker aborted a transaction with data here
    flushed: object = None


@dataclass(frozen=True)
class ProduceResult:
    base_offset: int
    log_append_time: int
    log_start_offset: int
    duplicate: bool = False
    flushed: object = None  # a Future: acknowledge only once it is done (flush.messages reached)
    last_offset: int = -1


class FollowerState:
    """What the leader knows of one follower (Kafka's Replica)."""
    __slots__ = ("log_end_offset", "last_caught_up_ms", "last_fetch_leader_leo", "last_fetch_ms")

    def __init__(self, now_ms: int, in_sync: bool):
        self.log_end_offset = -1  # unknown until it fetches from this leader
        self.last_caught_up_ms = now_ms if in_sync else 0
        self.last_fetch_leader_leo = -1
        self.last_fetch_ms = 0


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class Partition:
    def __init__(self, topic: str, index: int, topic_id, log, node_id: int, leader_epoch: int = 0,
                 replicas: tuple[int, ...] | None = None, high_watermark: int | None = None):
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.node_id = node_id
        self.leader_id = -1  # set by make_leader / make_follower
        self.leader_epoch = leader_epoch
        self.replicas = tuple(replicas or (node_id,))
        self.isr = (node_id,)
        self.zk_version = 0
        self.controller_epoch = 0
        self.leader_recovery_state = RECOVERED
        self.followers: dict[int, FollowerState] = {}
        self.isr_change_in_flight = False
        self.producers = ProducerStateManager(log.directory)
        self.producers.load(log)
        log.last_batches_of_producers = self.producers.last_batch_offsets  # kept by the log cleaner
        log.first_unstable_offset = self.producers.first_unstable_offset_now  # the cleaner stops before it
        end = log.log_end_offset
        self.high_watermark = end if high_watermark is None else max(min(high_watermark, end), log.log_start_offset)
        self.producers.first_unstable_offset(self.high_watermark)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    # ---- role changes -----------------------------------------------------------------------

    def make_leader(self, state) -> bool:
        """Become leader in ``state``'s epoch (a PartitionState); False when the epoch is stale."""
        if state.leader_epoch < self.leader_epoch and self.leader_id >= 0:
            return False
        if self.is_leader and state.leader_epoch == self.leader_epoch:  # a repeat: keep what we know
            self.zk_version, self.controller_epoch = state.zk_version, state.controller_epoch
            return True
        now = monotonic_ms()
        # a leader that stays leader (a new epoch: reassignment, ISR moves) keeps what it knows of its followers
        known = self.followers if self.is_leader else {}
        self.leader_id, self.leader_epoch = self.node_id, state.leader_epoch
        self.replicas, self.isr = tuple(state.replicas), tuple(state.isr)
        self.zk_version, self.controller_epoch = state.zk_version, state.controller_epoch
        if state.leader_recovery_state != RECOVERED:  # as Kafka: a leader has nothing to recover from
            log.info("%s-%d was elected RECOVERING; leading it as RECOVERED", self.topic, self.index)
        self.leader_recovery_state = RECOVERED
        self.followers = {r: known.get(r) or FollowerState(now, r in self.isr)
                          for r in self.replicas if r != self.node_id}
        self.isr_change_in_flight = False
        self.log.epochs.assign(state.leader_epoch, self.log_end_offset)
        self.maybe_increment_high_watermark()
        return True

    def make_follower(self, state) -> bool:
        """Follow ``state.leader``; False when the epoch is stale. Truncation is the fetcher's job."""
        if state.leader_epoch < self.leader_epoch and self.leader_id >= 0:
            return False
        self.leader_id, self.leader_epoch = state.leader, state.leader_epoch
        self.replicas, self.isr = tuple(state.replicas), tuple(state.isr)
        self.zk_version, self.controller_epoch = state.zk_version, state.controller_epoch
        self.leader_recovery_state = state.leader_recovery_state
        self.followers = {}
        return True

    def resign(self) -> None:
        """Stop acting as leader (ZooKeeper session lost): no acknowledged writes until told again."""
        if self.is_leader:
            self.leader_id = -1

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """A client's view of the leader epoch must match ours (-1: it has none)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"epoch {current_leader_epoch} is older than {self.leader_epoch}")
        raise UnknownLeaderEpochError(f"epoch {current_leader_epoch} is newer than {self.leader_epoch}")

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        self.check_leader_epoch(current_leader_epoch)
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.node_id} is not the leader of {self.topic}-{self.index}")

    # ---- produce --------------------------------------------------------------------------

    def append_as_leader(self, records, required_acks: int, verification=NO_VERIFICATION) -> ProduceResult:
        """Validate and append a produce request's records for this partition.

        ``verification``: the guard from ``start_verification`` when the transaction coordinator
        was asked (KIP-890); NO_VERIFICATION when nobody asked it (no coordinator, internal writers);
        NO_TRANSACTIONAL_ID for a produce request without a transactional id.
        """
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.node_id} is not the leader of {self.topic}-{self.index}")
        if required_acks == -1 and len(self.isr) < self.min_isr:
            raise NotEnoughReplicasError(f"{len(self.isr)} in-sync replicas, min.insync.replicas={self.min_isr}")
        batches = self.log.validate(records)
        try:  # as Kafka's record reader: every record parses whole (uncompressed batches; no decompression here)
            core.offset_map.check_records(records)
        except CorruptRecordError as exc:
            raise InvalidRecordError(exc.reason, exc.offset, exc.position) from None
        config = self.log.config
        if config.produce_checks:  # the topic's settings make the records themselves matter
            batches = self._topic_checks(config, batches)
        for view, info in batches:  # duplicates are answered with their first append's offsets
            if info.attributes & TIMESTAMP_LOG_APPEND:  # a producer's stamp: Kafka refuses it record by record
                self._check_records(((view, info),), False, config.timestamp_bounds)
            if info.producer_id >= 0:
                if verification is not NO_VERIFICATION:
                    if verification is not NO_TRANSACTIONAL_ID:
                        self.producers.check_verified(info, verification)
                    elif info.attributes & TRANSACTIONAL:
                        raise TransactionalIdRequiredError("a transactional batch needs the request's transactional id")
                duplicate = self.producers.check(info)
                if duplicate is not None:
                    if len(batches) != 1:
                        raise BrokerError("a duplicate batch must come alone")
                    # as Kafka: the original batch's max timestamp stands in for the append time
                    return ProduceResult(duplicate[0], duplicate[2], self.log_start_offset, duplicate=True,
                                         last_offset=duplicate[1])
        # the headers as sent: the append rewrites base offsets in place
        sent = [(info, info.last_offset_delta) for _, info in batches]
        result = self.log.append_validated(batches, leader_epoch=self.leader_epoch)
        offset = result.first_offset
        stamped = result.log_append_time  # LogAppendTime: every batch's max timestamp, as stored
        for info, delta in sent:
            self.producers.update(info, offset, offset + delta, info.max_timestamp if stamped < 0 else stamped)
            offset += delta + 1
        self.maybe_increment_high_watermark()
        return ProduceResult(result.first_offset, result.log_append_time, result.log_start_offset,
                             flushed=result.flushed, last_offset=result.last_offset)

    def _topic_checks(self, config, batches):
        """compression.type (batches recompressed into the topic's codec), timestamp bounds and keys on a
        compacted topic; the batches to append."""
        if config.recompression is not None:  # compression.type: stored in the topic's codec, not the producer's
            codec, level = config.recompression
            if any(info.attributes & 0x07 != codec for _, info in batches):
                records = bytearray().join(recompressed(view, codec, level) for view, _ in batches)  # writable
                batches = self.log.validate(records)
        bounds = config.timestamp_bounds
        # the native key scan finds a keyless record fast; only a batch with one (or bounded timestamps) is decoded
        keyless = config.compact and self._has_keyless(batches)
        if keyless or bounds is not None:
            self._check_records(batches, keyless, bounds)
        return batches

    @staticmethod
    def _has_keyless(batches) -> bool:
        try:
            return any(core.offset_map.keyless_offset(view) >= 0 for view, _ in batches)
        except CorruptRecordError as exc:  # records that do not parse: Kafka's record iterator says INVALID_RECORD
            raise InvalidRecordError(exc.reason, exc.offset, exc.position) from None

    def _check_records(self, batches, keys_required: bool, bounds) -> None:
        """Refuse the batch naming each bad record (KIP-467): keyless on a compacted topic, a timestamp
        out of bounds or stamped LogAppendTime by the producer."""
        check_records(batches, self.topic, self.index, keys_required, bounds,
                      self.log.config.message_timestamp_type == "CreateTime", int(time.time() * 1000))

    def start_verification(self, producer_id: int):
        """KIP-890: a guard when the producer has no open transaction here (the coordinator must be
        asked), else VERIFY_NOT_NEEDED."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.node_id} is not the leader of {self.topic}-{self.index}")
        return self.producers.start_verification(producer_id)

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      timestamp: int) -> MarkerResult:
        """Leader: append an end-transaction marker (a control batch) in this leader's epoch."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.node_id} is not the leader of {self.topic}-{self.index}")
        if len(self.isr) < self.min_isr:
            raise NotEnoughReplicasError(f"{len(self.isr)} in-sync replicas, min.insync.replicas={self.min_isr}")
        self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        batch = build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch, timestamp)
        with self.log.lock:  # a flush must not sync past the marker without its txn index entry
            result = self.log.append_validated(self.log.validate(batch, allow_control=True),
                                               leader_epoch=self.leader_epoch)
            aborted = self.producers.end_transaction(producer_id, producer_epoch, commit, coordinator_epoch,
                                                     result.first_offset, timestamp)
            if aborted is not None:
                self.log.append_aborted_txn(aborted)
        self.maybe_increment_high_watermark()
        return MarkerResult(result.first_offset, aborted, result.flushed)

    @property
    def min_isr(self) -> int:
        """min.insync.replicas, capped at the replication factor."""
        return min(self.log.config.min_insync_replicas, len(self.replicas))

    def maybe_increment_high_watermark(self) -> bool:
        """Leader: HW = the smallest log end offset over the ISR; never moves back, and never while
        the ISR is smaller than min.insync.replicas (so a write no quorum holds is never visible)."""
        if len(self.isr) < self.min_isr:
            return False
        new = self.log.log_end_offset
        for r in self.isr:
            if r != self.node_id:
                f = self.followers.get(r)
                if f is None or f.log_end_offset < 0:
                    return False  # an in-sync follower we have not heard from since taking over
                new = min(new, f.log_end_offset)
        if new > self.high_watermark:
            self.high_watermark = new
            if self.producers.unreplicated:
                self.producers.first_unstable_offset(new)
            return True
        return False

    # ---- the leader's view of its followers -------------------------------------------------

    def update_follower(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A follower fetched from ``fetch_offset`` (its log end); True when the HW moved."""
        f = self.followers.get(replica_id)
        if f is None:
            return False
        leo = self.log_end_offset
        if fetch_offset >= leo:
            f.last_caught_up_ms = now_ms
        elif fetch_offset >= f.last_fetch_leader_leo >= 0:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.last_fetch_leader_leo, f.last_fetch_ms = leo, now_ms
        f.log_end_offset = fetch_offset
        return self.maybe_increment_high_watermark()

    def should_join_isr(self, replica_id: int) -> bool:
        """The fetching follower is outside the ISR and reached the HW within this leader's epoch
        (Kafka's rule; only the follower that fetched, so a dead one never rejoins on its last word)."""
        f = self.followers.get(replica_id)
        return (f is not None and replica_id not in self.isr and f.log_end_offset >= self.high_watermark
                and f.log_end_offset >= self._epoch_start())

    def isr_to_shrink(self, now_ms: int, lag_ms: int) -> tuple:
        """In-sync followers that have not caught up for ``lag_ms``."""
        return tuple(r for r in self.isr if r != self.node_id
                     and now_ms - self.followers[r].last_caught_up_ms > lag_ms) if self.followers else ()

    def _epoch_start(self) -> int:
        for epoch, start in reversed(self.log.epochs.entries):
            if epoch == self.leader_epoch:
                return start
        return self.log_end_offset

    # ---- follower ---------------------------------------------------------------------------

    def append_as_follower(self, records) -> int:
        """Append the leader's batches as they are; the new log end offset."""
        # whatever max.message.bytes says now: the leader took these batches (perhaps under a larger limit)
        batches = self.log.validate(records, allow_control=True, compacted=True, ignore_record_size=True)
        markers = [bytes(view) for view, info in batches if info.attributes & CONTROL]  # the append rewrites views
        sent = [info for _, info in batches]
        # with markers, a flush must not sync past one before its txn index entry is written
        with self.log.lock if markers else nullcontext():
            self.log.append_validated(batches, leader_epoch=-1, assign_offsets=False)
            for info in sent:  # idempotence and transactions survive failover: followers know every producer
                if info.attributes & CONTROL:
                    self._follow_marker(info, markers.pop(0))
                else:
                    self.producers.update(info, info.base_offset, info.base_offset + info.last_offset_delta,
                                          info.max_timestamp)
        return self.log_end_offset

    def _follow_marker(self, info, batch: bytes) -> None:
        """A marker copied from the leader: the producer state and the txn index follow it (no checks)."""
        marker = decode_control_record(batch)
        if info.producer_id < 0 or marker is None or marker.type not in (0, 1):
            return
        aborted = self.producers.end_transaction(info.producer_id, info.producer_epoch, marker.commit,
                                                 marker.coordinator_epoch, info.base_offset, info.max_timestamp)
        if aborted is not None:
            self.log.append_aborted_txn(aborted)

    def update_follower_high_watermark(self, leader_hw: int) -> bool:
        """Whether the high watermark moved (consumers reading from this follower may go on)."""
        new = min(leader_hw, self.log_end_offset)
        if new > self.high_watermark:
            self.high_watermark = new
            if self.producers.unreplicated:
                self.producers.first_unstable_offset(new)
            return True
        return False

    def truncate_to(self, offset: int) -> None:
        """Cut the log at ``offset`` (a follower's divergence point); producer state is rebuilt."""
        if offset >= self.log_end_offset:
            return
        log.info("%s-%d: truncating from %d to %d", self.topic, self.index, self.log_end_offset, offset)
        self.log.truncate_to(offset)
        self.producers.rebuild(self.log)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.producers.first_unstable_offset(self.high_watermark)  # the replay lists every closed transaction

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self.producers.rebuild(self.log)
        self.high_watermark = offset

    # ---- fetch ----------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, committed_only: bool, min_one_batch: bool):
        """A slice for a consumer: never past the high watermark, nor past the LSO for read_committed."""
        upper = self.last_stable_offset if committed_only else self.high_watermark
        return self.log.read(offset, max_bytes, max_offset=upper, min_one_batch=min_one_batch)

    def aborted_transactions(self, fetch_offset: int) -> list:
        """(producer id, first offset) of each aborted transaction overlapping [fetch_offset, LSO):
        what a read_committed consumer must skip in what it was sent."""
        return [(t.producer_id, t.first_offset)
                for t in self.log.collect_aborted_transactions(fetch_offset, self.last_stable_offset)]

    def read_for_follower(self, offset: int, max_bytes: int):
        """A slice for a follower: up to the log end, not only the high watermark."""
        return self.log.read(offset, max_bytes, max_offset=None, min_one_batch=True)

    @property
    def last_stable_offset(self) -> int:
        hw = self.high_watermark
        ps = self.producers
        if ps.ongoing or ps.unreplicated:
            first = ps.first_unstable_offset(hw)
            if first is not None and first < hw:
                return first
        return hw

    # ---- offsets --------------------------------------------------------------------------

    def high_watermark_lags_epoch_start(self) -> bool:
        """Right after an election the new leader's high watermark can be below what the previous leader
        already showed: until it reaches the start of this leader's epoch, offsets near the end are not
        answered (KIP-207), so that no client sees the end of the log go backwards."""
        return self.high_watermark < self._epoch_start()

    def offset_for_timestamp(self, timestamp: int, committed_only: bool = False) -> tuple[int, int]:
        """(offset, timestamp) for ListOffsets; (-1, -1) when no record is that recent."""
        if timestamp == EARLIEST:
            return self.log_start_offset, -1
        if timestamp == LATEST:
            if self.high_watermark_lags_epoch_start():
                raise OffsetNotAvailableError(f"{self.topic}-{self.index}: the high watermark has not caught up "
                                              "with the start of the leader's epoch yet")
            return (self.last_stable_offset if committed_only else self.high_watermark), -1
        if timestamp < 0:
            raise OffsetOutOfRangeError(timestamp, self.log_start_offset, self.high_watermark)
        found = self._first_record_at_or_after(timestamp, self.last_stable_offset if committed_only
                                               else self.high_watermark)
        if found[0] < 0 and self.high_watermark_lags_epoch_start():
            raise OffsetNotAvailableError(f"{self.topic}-{self.index}: no record at or after {timestamp} below "
                                          "a high watermark that lags the start of the leader's epoch")
        return found

    def _first_record_at_or_after(self, timestamp: int, upper: int) -> tuple[int, int]:
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
                    if header.base_offset >= upper:
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

"""Producer state of one partition: per producer id, its epoch, last 5 batches and open transaction.

Rules (Kafka's): a batch from an older epoch is fenced; a producer id not seen before may
start at any sequence (its earlier batches may have been deleted); a new epoch must start at sequence
0; a batch equal to one of the last five is a duplicate and is answered with its original
offsets instead of being appended again; any other batch must continue the last sequence
(wrapping at 2**31-1) or it is out of order.

Transactions (Kafka's ProducerAppendInfo): a producer's first transactional batch (attribute 0x10)
opens its transaction at that batch's first offset; a control batch (0x20: an end-transaction
marker) closes it. A marker from an older producer epoch is refused (INVALID_PRODUCER_EPOCH), one
from an older coordinator epoch too (TRANSACTION_COORDINATOR_FENCED); one with a newer producer
epoch starts that epoch (sequences reset). A closed transaction stays unstable until the high
watermark passes its marker. The first unstable offset bounds the last stable offset (LSO); an
ABORT that closes a transaction with data yields an ``AbortedTxn`` for the segment's txn index.

The state is saved to ``producer-state.json`` on clean shutdown and, when that snapshot does not
match the log (or a segment was recovered), rebuilt from the log: batch headers, plus the one
record of each control batch; the replay also rebuilds the txn index of recovered segments.
"""
import json
import logging
import os
from collections import deque
from dataclasses import dataclass, field

from pybroker.errors import BrokerError, InvalidRecordError
from pybroker.log.txn_index import AbortedTxn
from pybroker.protocol.errors import (INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, OUT_OF_ORDER_SEQUENCE_NUMBER,
                                      TRANSACTION_COORDINATOR_FENCED)
from pybroker.records import CONTROL, TRANSACTIONAL, decode_control_record

log = logging.getLogger(__name__)

KEEP_BATCHES = 5
SNAPSHOT = "producer-state.json"
NO_SEQUENCE = -1


class OutOfOrderSequenceError(BrokerError):
    code = OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(BrokerError):
    code = INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(BrokerError):
    code = INVALID_TXN_STATE


class TransactionCoordinatorFencedError(BrokerError):
    code = TRANSACTION_COORDINATOR_FENCED


@dataclass
class ProducerEntry:
    epoch: int
    # (first_seq, last_seq, first_offset, last_offset, max_timestamp) of the last batches
    batches: deque = field(default_factory=lambda: deque(maxlen=KEEP_BATCHES))
    last_timestamp: int = -1
    txn_first_offset: int = -1  # first offset of the open transaction, -1 when none
    coordinator_epoch: int = -1  # of the last marker


class VerificationGuard:
    """Proof that the transaction coordinator said this partition is in the producer's transaction
    (KIP-890); a marker voids it, so a produce verified before that marker cannot append after it."""
    __slots__ = ()


VERIFY_NOT_NEEDED = object()  # the producer already had an open transaction here: nothing was asked


def next_sequence(seq: int, count: int) -> int:
    """Sequence after ``count`` records from ``seq``; sequences wrap at int32 max."""
    return (seq + count) % (2**31)


def _batch(saved: list) -> tuple:
    """A batch entry of a snapshot; one written before timestamps were kept has none (-1)."""
    return tuple(saved) if len(saved) == 5 else (*saved, -1)


class ProducerStateManager:
    def __init__(self, directory: str):
        self.path = os.path.join(directory, SNAPSHOT)
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.unreplicated: list[tuple[int, int]] = []  # closed transactions: (first offset, marker offset)
        self.verifying: dict[int, VerificationGuard] = {}

    def check(self, info) -> tuple[int, int, int] | None:
        """Validate an idempotent batch header; returns a duplicate's original (first offset, last offset,
        max timestamp)."""
        pid, epoch, first_seq = info.producer_id, info.producer_epoch, info.base_sequence
        if pid < 0:
            return None
        if first_seq < 0:  # Kafka's LogValidator: a producer id needs a sequence
            raise InvalidRecordError(f"producer {pid} sent base sequence {first_seq}")
        last_seq = next_sequence(first_seq, info.last_offset_delta)
        entry = self.producers.get(pid)
        if entry is None:
            return None  # as Kafka: an unknown producer (state gone with retention) may start anywhere
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {pid} epoch {epoch} is older than the current epoch {entry.epoch}")
        if entry.txn_first_offset >= 0 and not info.attributes & TRANSACTIONAL:
            raise InvalidTxnStateError(f"producer {pid} has an open transaction: a transactional write was expected")
        if epoch > entry.epoch or not entry.batches:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {pid} epoch {epoch} must start at sequence 0, not {first_seq}")
            return None
        for b_first, b_last, o_first, o_last, max_ts in entry.batches:
            if (b_first, b_last) == (first_seq, last_seq):
                return o_first, o_last, max_ts
        expected = next_sequence(entry.batches[-1][1], 1)
        if first_seq != expected:
            raise OutOfOrderSequenceError(
                f"producer {pid} sent sequence {first_seq}, expected {expected}")
        return None

    def update(self, info, first_offset: int, last_offset: int, timestamp: int) -> None:
        """Record an appended batch (its header ``info`` as sent, offsets as assigned, its max timestamp
        as stored)."""
        pid = info.producer_id
        if pid < 0:
            return
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(info.producer_epoch)
        elif info.producer_epoch > entry.epoch:  # a new epoch: new sequences, the same transaction
            entry = self.producers[pid] = ProducerEntry(info.producer_epoch, txn_first_offset=entry.txn_first_offset,
                                                        coordinator_epoch=entry.coordinator_epoch)
        last_seq = next_sequence(info.base_sequence, info.last_offset_delta)
        entry.batches.append((info.base_sequence, last_seq, first_offset, last_offset, timestamp))
        entry.last_timestamp = timestamp
        if info.attributes & TRANSACTIONAL and entry.txn_first_offset < 0:
            entry.txn_first_offset = self.ongoing[pid] = first_offset
            self.verifying.pop(pid, None)

    # ---- transactions -----------------------------------------------------------------------

    def has_ongoing_transaction(self, pid: int) -> bool:
        return pid in self.ongoing

    def start_verification(self, pid: int):
        """A guard to hold while the coordinator is asked, or VERIFY_NOT_NEEDED (a transaction is open)."""
        if pid in self.ongoing:
            return VERIFY_NOT_NEEDED
        guard = self.verifying.get(pid)
        if guard is None:
            guard = self.verifying[pid] = VerificationGuard()
        return guard

    def check_verified(self, info, guard) -> None:
        """A transactional batch that opens a transaction needs the guard still valid (no marker meanwhile)."""
        pid = info.producer_id
        if not info.attributes & TRANSACTIONAL or pid in self.ongoing:
            return
        if self.verifying.get(pid) is not guard:
            raise InvalidTxnStateError(f"producer {pid}: the partition is not in a verified transaction")

    def check_marker(self, pid: int, epoch: int, coordinator_epoch: int) -> None:
        """A leader's check of a marker the coordinator asks for (Kafka's appendEndTxnMarker checks)."""
        entry = self.producers.get(pid)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {pid} epoch {epoch}, older than the current epoch {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {pid} from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}")

    def end_transaction(self, pid: int, epoch: int, commit: bool, coordinator_epoch: int, marker_offset: int,
                        timestamp: int) -> AbortedTxn | None:
        """Apply an appended marker; the AbortedTxn to index when it aborted a transaction with data."""
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(epoch)
        elif epoch > entry.epoch:  # a bumped epoch: its sequences start over (Kafka's maybeUpdateProducerEpoch)
            entry = self.producers[pid] = ProducerEntry(epoch, txn_first_offset=entry.txn_first_offset)
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        entry.last_timestamp = timestamp
        self.verifying.pop(pid, None)
        first = entry.txn_first_offset
        if first < 0:
            return None  # a marker of a transaction without data here changes nothing stable
        entry.txn_first_offset = -1
        del self.ongoing[pid]
        self.unreplicated.append((first, marker_offset))
        if commit:
            return None
        # the LSO once this transaction ended: the next open transaction's start, else past the marker
        lso = min(self.ongoing.values(), default=marker_offset + 1)
        return AbortedTxn(pid, first, marker_offset, lso)

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of an open transaction, or of a closed one whose marker the HW has not passed."""
        if self.unreplicated:
            self.unreplicated = [t for t in self.unreplicated if t[1] >= high_watermark]
        first = min(self.ongoing.values(), default=None)
        for t in self.unreplicated:
            if first is None or t[0] < first:
                first = t[0]
        return first

    def first_unstable_offset_now(self) -> int | None:
        """The same bound, read-only (any thread may ask: the log cleaner stops before it)."""
        firsts = list(self.ongoing.values()) + [t[0] for t in list(self.unreplicated)]
        return min(firsts, default=None)

    def last_batch_offsets(self) -> set[int]:
        """Base offsets of each producer's last batch: the log cleaner keeps them, even empty."""
        return {e.batches[-1][2] for e in list(self.producers.values()) if e.batches}

    def truncate(self) -> None:
        self.producers.clear()
        self._forget_transactions()

    def _forget_transactions(self) -> None:
        self.ongoing.clear()
        self.unreplicated.clear()
        self.verifying.clear()

    # ---- persistence ----------------------------------------------------------------------

    def save(self, log_end_offset: int) -> None:
        """Snapshot valid for a log ending at ``log_end_offset`` (written at clean shutdown)."""
        data = {"log_end_offset": log_end_offset,
                "producers": {str(pid): {"epoch": e.epoch, "batches": list(e.batches), "ts": e.last_timestamp,
                                         "txn": e.txn_first_offset, "ce": e.coordinator_epoch}
                              for pid, e in self.producers.items()}}
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def load(self, lg) -> None:
        """Take the snapshot if it matches the log's end (and no segment was recovered), else rebuild
        from the log."""
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            os.remove(self.path)  # valid once: a later crash must not reuse it
            if data["log_end_offset"] == lg.log_end_offset and not lg.txn_index_stale:
                self.producers = {int(pid): ProducerEntry(e["epoch"], deque(map(_batch, e["batches"]), KEEP_BATCHES),
                                                          e["ts"], e.get("txn", -1), e.get("ce", -1))
                                  for pid, e in data["producers"].items()}
                self._forget_transactions()
                self.ongoing = {pid: e.txn_first_offset for pid, e in self.producers.items()
                                if e.txn_first_offset >= 0}
                return
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable %s: %s", self.path, exc)
        self.rebuild(lg)

    def rebuild(self, lg) -> None:
        """Replay every producer's batch headers still in the log (and the record of each marker);
        segments recovered from their batches get their txn index back from the replay."""
        self.producers.clear()
        self._forget_transactions()
        for segment in list(lg.segments):
            stale = segment.txn_index_stale
            position = 0
            while position < segment.size:
                header = segment.read_header(position)
                if header.producer_id >= 0 and header.last_offset >= lg.log_start_offset:
                    if header.attributes & CONTROL:
                        self._replay_marker(segment, position, header, stale)
                    else:
                        self.update(header, header.base_offset, header.last_offset, header.max_timestamp)
                position += header.batch_length + 12
            segment.txn_index_stale = False
        lg.any_aborted_txn = None  # the replay may have indexed some: looked at again when asked

    def _replay_marker(self, segment, position: int, header, stale: bool) -> None:
        marker = decode_control_record(os.pread(segment.fd, header.batch_length + 12, position))
        if marker is None or marker.type not in (0, 1):
            return  # emptied by the cleaner, or a control type that ends nothing
        aborted = self.end_transaction(header.producer_id, header.producer_epoch, marker.commit,
                                       marker.coordinator_epoch, header.base_offset, header.max_timestamp)
        if aborted is not None and stale:
            segment.txn_index.append(aborted)

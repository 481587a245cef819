"""Idempotent-producer state of one partition: per producer id, its epoch and last 5 batches.

Rules (Kafka's): a batch from an older epoch is fenced; a producer id not seen before may
start at any sequence (its earlier batches may have been deleted); a new epoch must start at sequence
0; a batch equal to one of the last five is a duplicate and is answered with its original
offsets instead of being appended again; any other batch must continue the last sequence
(wrapping at 2**31-1) or it is out of order. The state is saved to ``producer-state.json``
on clean shutdown and, when that snapshot does not match the log, rebuilt from batch headers.
"""
import json
import logging
import os
from collections import deque
from dataclasses import dataclass, field

from pybroker.errors import BrokerError, InvalidRecordError

log = logging.getLogger(__name__)

KEEP_BATCHES = 5
SNAPSHOT = "producer-state.json"
NO_SEQUENCE = -1


class OutOfOrderSequenceError(BrokerError):
    code = 45  # OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(BrokerError):
    code = 47  # INVALID_PRODUCER_EPOCH


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=KEEP_BATCHES))  # (first_seq, last_seq, first_offset, last_offset)
    last_timestamp: int = -1


def next_sequence(seq: int, count: int) -> int:
    """Sequence after ``count`` records from ``seq``; sequences wrap at int32 max."""
    return (seq + count) % (2**31)


class ProducerStateManager:
    def __init__(self, directory: str):
        self.path = os.path.join(directory, SNAPSHOT)
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, info) -> tuple[int, int] | None:
        """Validate an idempotent batch header; returns the original (first, last) offsets of a duplicate."""
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
        if epoch > entry.epoch or not entry.batches:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {pid} epoch {epoch} must start at sequence 0, not {first_seq}")
            return None
        for b_first, b_last, o_first, o_last in entry.batches:
            if (b_first, b_last) == (first_seq, last_seq):
                return o_first, o_last
        expected = next_sequence(entry.batches[-1][1], 1)
        if first_seq != expected:
            raise OutOfOrderSequenceError(
                f"producer {pid} sent sequence {first_seq}, expected {expected}")
        return None

    def update(self, info, first_offset: int, last_offset: int, timestamp: int) -> None:
        """Record an appended batch (its header ``info`` as sent, offsets as assigned)."""
        pid = info.producer_id
        if pid < 0:
            return
        entry = self.producers.get(pid)
        if entry is None or info.producer_epoch > entry.epoch:
            entry = self.producers[pid] = ProducerEntry(info.producer_epoch)
        last_seq = next_sequence(info.base_sequence, info.last_offset_delta)
        entry.batches.append((info.base_sequence, last_seq, first_offset, last_offset))
        entry.last_timestamp = timestamp

    def last_batch_offsets(self) -> set[int]:
        """Base offsets of each producer's last batch: the log cleaner keeps them, even empty."""
        return {e.batches[-1][2] for e in list(self.producers.values()) if e.batches}

    def truncate(self) -> None:
        self.producers.clear()

    # ---- persistence ----------------------------------------------------------------------

    def save(self, log_end_offset: int) -> None:
        """Snapshot valid for a log ending at ``log_end_offset`` (written at clean shutdown)."""
        data = {"log_end_offset": log_end_offset,
                "producers": {str(pid): {"epoch": e.epoch, "batches": list(e.batches), "ts": e.last_timestamp}
                              for pid, e in self.producers.items()}}
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def load(self, lg) -> None:
        """Take the snapshot if it matches the log's end, else rebuild from the log's batch headers."""
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            os.remove(self.path)  # valid once: a later crash must not reuse it
            if data["log_end_offset"] == lg.log_end_offset:
                self.producers = {int(pid): ProducerEntry(e["epoch"], deque(map(tuple, e["batches"]), KEEP_BATCHES),
                                                          e["ts"]) for pid, e in data["producers"].items()}
                return
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable %s: %s", self.path, exc)
        self.rebuild(lg)

    def rebuild(self, lg) -> None:
        """Replay every idempotent batch header still in the log."""
        self.producers.clear()
        for segment in list(lg.segments):
            position = 0
            while position < segment.size:
                header = segment.read_header(position)
                if header.producer_id >= 0 and header.last_offset >= lg.log_start_offset:
                    self.update(header, header.base_offset, header.last_offset, header.max_timestamp)
                position += header.batch_length + 12

"""Transactional offset commits waiting for their transaction's end (Kafka's pending transactional offsets).

A TxnOffsetCommit appends its offsets to ``__consumer_offsets`` as a transactional batch of the
producer; they stay invisible here until that producer's COMMIT marker lands on the same
partition (then each one becomes the committed offset unless a commit appended later in the log
already replaced it) or its ABORT marker drops them. Entries remember the log offset of their
batch: a marker only completes what was appended before it, so a next transaction's commits
stay pending. Between the marker's append and its replication the entries are "completing":
gone from the producer's open set, still unstable for OffsetFetch(require_stable).
"""
from dataclasses import dataclass

from pybroker.coordinator.records import OffsetValue


@dataclass(eq=False)  # identity matters: a failed append removes its own entry, never a newer one
class PendingOffset:
    log_offset: int        # base offset of the transactional batch in __consumer_offsets
    value: OffsetValue


class PendingTxnOffsets:
    """group -> producer id -> (topic, partition) -> PendingOffset, plus the completing ones."""

    def __init__(self):
        self.by_group: dict[str, dict[int, dict[tuple[str, int], PendingOffset]]] = {}
        self.completing: dict[str, dict[tuple[str, int], int]] = {}  # group -> tp -> entries completing

    def put(self, group: str, producer_id: int, tp, entry: PendingOffset) -> None:
        self.by_group.setdefault(group, {}).setdefault(producer_id, {})[tp] = entry

    def discard(self, group: str, producer_id: int, tp, entry: PendingOffset) -> None:
        """Remove ``entry`` if it is still the pending one (its append failed)."""
        by_tp = self.by_group.get(group, {}).get(producer_id)
        if by_tp is not None and by_tp.get(tp) is entry:
            del by_tp[tp]
            self._prune(group, producer_id)

    def remove(self, group: str, producer_id: int, tp) -> None:
        """A tombstone in the producer's transaction: its earlier offset for ``tp`` is void."""
        by_tp = self.by_group.get(group, {}).get(producer_id)
        if by_tp is not None and by_tp.pop(tp, None) is not None:
            self._prune(group, producer_id)

    def take(self, producer_id: int, groups, before_offset: int) -> list:
        """Pop the producer's entries of ``groups`` appended before ``before_offset`` (its marker):
        [(group, tp, PendingOffset)], marked completing until ``done`` is called for them."""
        taken = []
        for group in groups:
            by_tp = self.by_group.get(group, {}).get(producer_id)
            if not by_tp:
                continue
            for tp, entry in list(by_tp.items()):
                if entry.log_offset < before_offset:
                    del by_tp[tp]
                    taken.append((group, tp, entry))
                    counts = self.completing.setdefault(group, {})
                    counts[tp] = counts.get(tp, 0) + 1
            self._prune(group, producer_id)
        return taken

    def done(self, taken) -> None:
        """The completion of ``take``'s entries is over (applied, dropped or abandoned)."""
        for group, tp, _ in taken:
            counts = self.completing.get(group)
            if counts is None or tp not in counts:
                continue  # the partition was unloaded meanwhile
            counts[tp] -= 1
            if not counts[tp]:
                del counts[tp]
            if not counts:
                del self.completing[group]

    def _prune(self, group: str, producer_id: int) -> None:
        by_pid = self.by_group.get(group)
        if by_pid is not None and not by_pid.get(producer_id, True):
            del by_pid[producer_id]
            if not by_pid:
                del self.by_group[group]

    # ---- queries --------------------------------------------------------------------------

    def is_unstable(self, group: str, tp) -> bool:
        """Some transaction has an offset for ``tp`` that is not settled yet."""
        if tp in self.completing.get(group, ()):
            return True
        return any(tp in by_tp for by_tp in self.by_group.get(group, {}).values())

    def has_group(self, group: str) -> bool:
        return group in self.by_group or group in self.completing

    def groups(self) -> list[str]:
        return list(self.by_group)

    def groups_of_producer(self, producer_id: int) -> list[str]:
        return [g for g, by_pid in self.by_group.items() if producer_id in by_pid]

    def drop_topics(self, topics) -> None:
        """The topics were deleted: open transactions lose their offsets, so a COMMIT applies none of them."""
        for group, by_pid in list(self.by_group.items()):
            for producer_id, by_tp in list(by_pid.items()):
                for tp in [tp for tp in by_tp if tp[0] in topics]:
                    del by_tp[tp]
                self._prune(group, producer_id)

    def forget_groups(self, groups) -> None:
        """The groups' partition is no longer led here: the next leader replays them."""
        for group in groups:
            self.by_group.pop(group, None)
            self.completing.pop(group, None)


class CoordinatorSequences:
    """The next sequence of each producer's transactional offset batches in one offsets partition.

    The coordinator is the only writer of these batches, so the partition's producer-state rules
    (a new epoch starts at 0, then each batch continues the last one) are met by counting them.
    """

    def __init__(self):
        self.next: dict[tuple[int, int], tuple[int, int]] = {}  # (partition, producer id) -> (epoch, next seq)

    def sequence_for(self, index: int, producer_id: int, epoch: int) -> int:
        known = self.next.get((index, producer_id))
        if known is None or epoch != known[0]:
            return 0  # an unknown producer, or a new epoch, starts at sequence 0
        return known[1]

    def appended(self, index: int, producer_id: int, epoch: int, base_sequence: int, count: int) -> None:
        known = self.next.get((index, producer_id))
        if known is None or epoch >= known[0]:
            self.next[(index, producer_id)] = (epoch, (base_sequence + count) % (2 ** 31))

    def forget(self, index: int) -> None:
        for key in [k for k in self.next if k[0] == index]:
            del self.next[key]

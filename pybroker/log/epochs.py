"""Leader-epoch cache of one partition: (epoch, start offset) pairs in ``leader-epoch-checkpoint``.

Followers use it (through OffsetForLeaderEpoch) to find where their log diverges from the
leader's after a leader change; it is rewritten whenever it changes.
"""
import logging
import os

from pybroker.log import checkpoint

log = logging.getLogger(__name__)


def end_offset_for(entries, requested: int, log_end_offset: int) -> tuple[int, int]:
    """Kafka's end of leader epoch ``requested`` over (epoch, start offset) ``entries``: (the largest
    epoch <= requested, where the next epoch starts); the latest epoch ends at the log end; an epoch
    older than any known ends where the first starts; (-1, -1) past every known epoch or for -1."""
    if requested < 0 or not entries:
        return -1, -1
    if entries[-1][0] == requested:
        return requested, log_end_offset
    floor = None
    for epoch, start in entries:
        if epoch > requested:
            return (requested if floor is None else floor), start
        floor = epoch
    return -1, -1


class LeaderEpochCache:
    def __init__(self, directory: str):
        self.path = os.path.join(directory, checkpoint.LEADER_EPOCH)
        try:
            self.entries = checkpoint.read_epochs(self.path)
        except checkpoint.CheckpointError as exc:
            log.warning("ignoring unreadable %s: %s", self.path, exc)
            self.entries = []
        self._refresh()

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op for an epoch already known)."""
        if epoch < 0 or (self.entries and epoch <= self.latest_epoch):
            return
        self.entries.append((epoch, start_offset))
        self._save()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        return end_offset_for(self.entries, epoch, log_end_offset)

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after ``end_offset`` (the log was truncated there)."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch covering it starts there too."""
        older = [i for i, (_, o) in enumerate(self.entries) if o <= start_offset]
        if older and (older[-1] > 0 or self.entries[older[-1]][1] != start_offset):
            keep = self.entries[older[-1]:]
            self.entries = [(keep[0][0], start_offset)] + keep[1:]
            self._save()

    def _save(self) -> None:
        self._refresh()
        checkpoint.write_epochs(self.path, self.entries)

    def _refresh(self) -> None:
        # a plain attribute: every append compares against it
        self.latest_epoch = self.entries[-1][0] if self.entries else -1

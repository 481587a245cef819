"""One transactional id's state and the transitions of Kafka's transaction state machine.

States (ids as stored in ``__transaction_state``):
    Empty(0) -> Ongoing(1) -> PrepareCommit(2)/PrepareAbort(3) -> CompleteCommit(4)/CompleteAbort(5)
    Dead(6): being removed (expired id); PrepareEpochFence(7): a pending-only state on the way from
    Ongoing to PrepareAbort when a newer producer or the timeout fences the current one.
A change is two steps, as in Kafka: ``prepare_*`` builds the next ``Transit`` and marks it pending
(so a second change waits: CONCURRENT_TRANSACTIONS), the record is appended and replicated, and
only then ``complete`` applies it; ``abandon`` drops a pending change whose append failed.
"""
import enum
from dataclasses import dataclass, field

from pybroker.protocol.errors import PRODUCER_FENCED

NO_PRODUCER_ID = -1
NO_EPOCH = -1
MAX_EPOCH = 32767  # Short.MaxValue


class TxnState(enum.Enum):
    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def label(self) -> str:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> "TxnState":
        for s in cls:
            if s.id == state_id:
                return s
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_label(cls, label: str):
        return next((s for s in cls if s.label == label), None)


S = TxnState
# the states each state may be entered from (Kafka's validPreviousStates)
VALID_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}
EXPIRABLE = {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
PREPARING = {S.PREPARE_COMMIT, S.PREPARE_ABORT}


def epoch_exhausted(epoch: int) -> bool:
    """One epoch is kept in reserve so that a producer can always be fenced."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True)
class Transit:
    """The next state of a transactional id, as it will be written."""
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset
    start_ms: int
    last_update_ms: int


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = S.EMPTY
    partitions: set = field(default_factory=set)  # {(topic, partition)}
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_EPOCH
    pending: TxnState | None = None
    failed_epoch_fence: bool = False  # a fence whose record was not written: its epoch is reused

    @property
    def in_transition(self) -> bool:
        return self.pending is not None

    # ---- prepare ---------------------------------------------------------------------------

    def _to(self, state: TxnState, producer_id=None, epoch=None, last_epoch=None, timeout_ms=None,
            partitions=None, start_ms=None, now=None, last_producer_id=None) -> Transit:
        if self.pending is not None:
            raise RuntimeError(f"{self.transactional_id}: a transition to {self.pending.label} is pending")
        if self.state not in VALID_PREVIOUS[state]:
            raise RuntimeError(f"{self.transactional_id}: {self.state.label} -> {state.label} is not allowed")
        self.pending = state
        return Transit(
            producer_id=self.producer_id if producer_id is None else producer_id,
            last_producer_id=self.last_producer_id if last_producer_id is None else last_producer_id,
            producer_epoch=self.producer_epoch if epoch is None else epoch,
            last_producer_epoch=self.last_producer_epoch if last_epoch is None else last_epoch,
            timeout_ms=self.timeout_ms if timeout_ms is None else timeout_ms,
            state=state,
            partitions=frozenset(self.partitions if partitions is None else partitions),
            start_ms=self.start_ms if start_ms is None else start_ms,
            last_update_ms=self.last_update_ms if now is None else now)

    def prepare_fence_epoch(self) -> Transit:
        """Ongoing -> (pending) PrepareEpochFence with the epoch bumped; never written itself."""
        if self.producer_epoch >= MAX_EPOCH:
            raise RuntimeError(f"{self.transactional_id}: cannot fence epoch {self.producer_epoch}")
        epoch = self.producer_epoch if self.failed_epoch_fence else self.producer_epoch + 1
        return self._to(S.PREPARE_EPOCH_FENCE, epoch=epoch, last_epoch=NO_EPOCH)

    def prepare_increment_epoch(self, timeout_ms: int, expected_epoch: int | None, now: int):
        """An epoch bump for InitProducerId -> Transit, or the PRODUCER_FENCED error code."""
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_EPOCH
        elif self.producer_epoch == NO_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:  # a retry of a bump whose answer was lost
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return PRODUCER_FENCED
        return self._to(S.EMPTY, epoch=epoch, last_epoch=last, timeout_ms=timeout_ms, partitions=(),
                        start_ms=-1, now=now)

    def prepare_producer_id_rotation(self, producer_id: int, timeout_ms: int, now: int,
                                     record_last_epoch: bool) -> Transit:
        return self._to(S.EMPTY, producer_id=producer_id, last_producer_id=self.producer_id, epoch=0,
                        last_epoch=self.producer_epoch if record_last_epoch else NO_EPOCH,
                        timeout_ms=timeout_ms, partitions=(), start_ms=-1, now=now)

    def prepare_add_partitions(self, added, now: int) -> Transit:
        start = now if self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) else self.start_ms
        return self._to(S.ONGOING, partitions=self.partitions | set(added), start_ms=start, now=now)

    def prepare_abort_or_commit(self, state: TxnState, now: int) -> Transit:
        return self._to(state, now=now)

    def prepare_complete(self, now: int) -> Transit:
        state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._to(state, partitions=(), now=now)

    def prepare_dead(self) -> Transit:
        return self._to(S.DEAD, partitions=())

    # ---- complete --------------------------------------------------------------------------

    def complete(self, t: Transit) -> None:
        """Apply a transit once its record is replicated."""
        self.pending = None
        self.producer_id, self.last_producer_id = t.producer_id, t.last_producer_id
        self.producer_epoch, self.last_producer_epoch = t.producer_epoch, t.last_producer_epoch
        self.timeout_ms, self.state, self.partitions = t.timeout_ms, t.state, set(t.partitions)
        self.start_ms, self.last_update_ms = t.start_ms, t.last_update_ms
        self.failed_epoch_fence = False

    def abandon(self) -> None:
        self.pending = None

"""The consumer's side of an incremental fetch session with one broker (KIP-227).

The first Fetch to a broker is full (session id 0, epoch 0): it names every fetchable partition
and the broker answers with a session id. Each later Fetch (epoch 1, 2, ...) names only the
partitions that are new or whose fetch parameters changed, and lists in forgotten_topics_data
those no longer fetched; the broker answers only the partitions with news. So a consumer of many
idle partitions sends and receives a few bytes per fetch instead of a line per partition.

When the session is lost the next Fetch is full again: FETCH_SESSION_ID_NOT_FOUND starts from
no session (0, 0); any other failure (INVALID_FETCH_SESSION_EPOCH, a lost connection, a timeout,
another top-level error) asks the broker to close the old session and open a new one (id, 0), as
Kafka's consumer does; a closing consumer ends its sessions with a last empty Fetch (id, -1). A
partition whose topic id changed (the topic was deleted and recreated) is forgotten under its old id
and added under the new one. A broker that answers a full Fetch without a session id (its cache is
full) gets full Fetches until it grants one.
"""
from typing import NamedTuple

from pybroker.protocol.errors import FETCH_SESSION_ID_NOT_FOUND

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1  # closes the session (sent when the consumer closes)
_MAX_EPOCH = (1 << 31) - 1


class FetchParams(NamedTuple):
    """What the broker must know to fetch one partition; a change means "send it again"."""
    topic_id: object  # uuid.UUID, or None when not fetching by id
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    max_bytes: int


class FetchPlan(NamedTuple):
    """One Fetch's session fields: ``send`` {(topic, partition): FetchParams} to name, ``forgotten``
    [(topic, topic_id, partition)] to drop from the session."""
    session_id: int
    epoch: int
    send: dict
    forgotten: list


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (wraps from 2**31-1 to 1: 0 means "full fetch")."""
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


class FetchSession:
    """Session id, epoch and the partitions the broker holds for this consumer."""
    __slots__ = ("session_id", "epoch", "partitions", "by_id", "_pending")

    def __init__(self):
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.partitions: dict = {}  # (topic, partition) -> FetchParams the broker holds
        self.by_id = None  # whether the session names topics by id (Fetch v13+)
        self._pending = None  # (wanted, by_id) of the Fetch in flight

    @property
    def incremental(self) -> bool:
        return self.session_id != INVALID_SESSION_ID and self.epoch != INITIAL_EPOCH

    def plan(self, wanted: dict, by_id: bool) -> FetchPlan:
        """The next Fetch for ``wanted`` {(topic, partition): FetchParams}: every partition when
        full, else only the changed ones plus the partitions to forget."""
        if self.incremental and by_id != self.by_id:
            self.restart()  # the broker refuses to mix names and ids within one session
        self._pending = (wanted, by_id)
        if not self.incremental:
            return FetchPlan(self.session_id, INITIAL_EPOCH, wanted, [])
        held = self.partitions
        send = {k: v for k, v in wanted.items() if held.get(k) != v}
        forgotten = [(k[0], v.topic_id, k[1]) for k, v in held.items()
                     if k not in wanted or wanted[k].topic_id != v.topic_id]
        return FetchPlan(self.session_id, self.epoch, send, forgotten)

    def answered(self, session_id: int) -> None:
        """The planned Fetch was answered without a top-level error."""
        wanted, by_id = self._pending or ({}, self.by_id)
        self._pending = None
        if self.incremental:
            self.epoch = next_epoch(self.epoch)
        elif session_id != INVALID_SESSION_ID:
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
        else:  # no session granted: stay with full fetches
            self.session_id = INVALID_SESSION_ID
        self.partitions = dict(wanted)
        self.by_id = by_id

    def failed(self, error_code: int | None) -> None:
        """The planned Fetch failed (``error_code`` its top-level code, None for a lost request)."""
        self._pending = None
        if error_code == FETCH_SESSION_ID_NOT_FOUND:  # the broker no longer has it
            self.reset()
        else:
            self.restart()

    def restart(self) -> None:
        """Next Fetch full with the current id: the broker closes that session and opens another."""
        self.epoch = INITIAL_EPOCH
        self.partitions = {}

    def reset(self) -> None:
        """Forget the session: the next Fetch is full and asks for a new one."""
        self.session_id = INVALID_SESSION_ID
        self.restart()

"""Share sessions (KIP-932): what a share consumer fetches from this broker, kept between ShareFetches.

One session per (group, member) on each broker the member fetches from. Epoch 0 opens it (replacing
any earlier one), each later request carries the next epoch, -1 closes it. A request adds partitions
(its topics) and drops forgotten ones; a fetch covers every partition of the session. A session ends
with its epoch -1 request, its connection, or a newer session of the same member; the records its
member holds are then released to the others.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pybroker.protocol.errors import (INVALID_REQUEST, INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED,
                                      SHARE_SESSION_NOT_FOUND)

INITIAL_EPOCH = 0
FINAL_EPOCH = -1


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must carry
    connection_id: int
    partitions: set = field(default_factory=set)  # (topic id, partition)


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


class ShareSessions:
    def __init__(self, max_sessions: int = 2000):
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def open(self, group_id: str, member_id: str, connection_id: int) -> tuple[int, ShareSession | None,
                                                                                ShareSession | None]:
        """Epoch 0: (error, the new session, the one it replaced)."""
        key = (group_id, member_id)
        old = self.sessions.pop(key, None)
        if old is None and len(self.sessions) >= self.max_sessions:
            return SHARE_SESSION_LIMIT_REACHED, None, None
        session = self.sessions[key] = ShareSession(group_id, member_id, next_epoch(INITIAL_EPOCH), connection_id)
        return 0, session, old

    def use(self, group_id: str, member_id: str, epoch: int) -> tuple[int, ShareSession | None]:
        """A request with ``epoch`` > 0: (error, the session), its epoch moved on."""
        if epoch < FINAL_EPOCH:
            return INVALID_REQUEST, None
        session = self.sessions.get((group_id, member_id))
        if session is None:
            return SHARE_SESSION_NOT_FOUND, None
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            return INVALID_SHARE_SESSION_EPOCH, None
        if epoch != FINAL_EPOCH:
            session.epoch = next_epoch(session.epoch)
        return 0, session

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)

    def of_group(self, group_id: str) -> list[ShareSession]:
        return [s for s in self.sessions.values() if s.group_id == group_id]

    def of_connection(self, connection_id: int) -> list[ShareSession]:
        return [s for s in self.sessions.values() if s.connection_id == connection_id]

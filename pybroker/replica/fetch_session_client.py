"""The fetching side of a KIP-227 fetch session with one leader (the follower's fetcher uses it).

``build`` takes the partitions to fetch now (key -> their fetch parameters) and says what the next
request carries: a full fetch (epoch 0) sends them all and asks for a session; once the leader
gave one, each request sends only the partitions whose parameters changed since the last one
answered, and names those no longer wanted as forgotten. ``answered`` moves the session on from
the response; any session error (or a lost connection, ``reset``) starts over with a full fetch
that closes the old session.
"""
from pybroker.protocol.errors import (FETCH_SESSION_ID_NOT_FOUND, FETCH_SESSION_TOPIC_ID_ERROR,
                                      INVALID_FETCH_SESSION_EPOCH)
from pybroker.replica.fetch_sessions import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch

SESSION_ERRORS = (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR)


class FetchSessionClient:
    def __init__(self):
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.sent: dict = {}     # key -> parameters the session holds
        self._pending: dict | None = None  # key -> parameters of the request in flight; None: none counts

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH

    def build(self, wanted: dict) -> tuple[list, list]:
        """(keys to send, keys to forget) for the next request, whose parameters are ``wanted``."""
        self._pending = dict(wanted)
        if self.full:
            return list(wanted), []
        sent = self.sent
        send = [key for key, params in wanted.items() if sent.get(key) != params]
        forget = [key for key in sent if key not in wanted]
        return send, forget

    def answered(self, error_code: int, session_id: int) -> None:
        """The leader's answer to the request ``build`` described."""
        if self._pending is None:  # reset while it was in flight: the next request starts over anyway
            return
        if error_code in SESSION_ERRORS:
            self.reset()
            return
        if self.full:
            self.session_id = session_id  # INVALID_SESSION_ID: no room; the next request tries again
            self.epoch = next_epoch(INITIAL_EPOCH) if session_id != INVALID_SESSION_ID else INITIAL_EPOCH
        elif session_id == INVALID_SESSION_ID:  # the leader closed it
            self.reset()
            return
        else:
            self.epoch = next_epoch(self.epoch)
        self.sent, self._pending = self._pending, None

    def reset(self) -> None:
        """Start over: the next request is a full fetch that also closes the current session."""
        self.epoch = INITIAL_EPOCH
        self.sent = {}
        self._pending = None

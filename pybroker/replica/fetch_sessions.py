"""Incremental fetch sessions (KIP-227): the broker remembers a fetcher's partitions between requests.

A full fetch (epoch 0) may create a session: its id goes back in the response and the fetcher's
next requests (epoch 1, 2, ...) carry only the partitions whose fetch parameters changed, plus the
partitions to forget. The broker then reads every partition of the session with the cached
parameters, and answers only the partitions with news: records, a moved high watermark or log
start offset, an error or a diverging epoch. Partitions that returned records move to the end of
the session so that the next fetches serve the others first (max bytes fairness).

Request metadata, as Kafka: (0, -1) sessionless full fetch; (0, 0) full fetch that may create a
session; (id, 0) closes session ``id`` and starts over; (id, -1) closes it and fetches without one;
(id, n > 0) incremental: FETCH_SESSION_ID_NOT_FOUND (70) for an unknown id, INVALID_FETCH_SESSION_EPOCH
(71) for a wrong epoch, FETCH_SESSION_TOPIC_ID_ERROR (106) when the request version and the session
disagree on topic ids.

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions. A new one takes a
free slot, else evicts the least recently used session idle for more than EVICTION_MS, else the
least valuable one (unprivileged before followers, then fewer partitions) if it is not worth more
than the newcomer; sessions younger than EVICTION_MS are evicted only by followers, and only when
they belong to consumers. State lives on the event loop: no locks.
"""
import random
import time

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000  # Kafka's minimum idle time (and age) before a session may go
_MAX_ID = (1 << 31) - 1


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: wraps from 2**31-1 to 1; a negative epoch stays final."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_ID else epoch + 1


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class CachedPartition:
    """One partition of a fetch: the request's parameters plus, in a session, what was last answered.

    Duck-types ReplicaManager's FetchRequestPartition (topic, partition, fetch_offset, max_bytes,
    current_leader_epoch), so sessions are read without copying.
    """
    __slots__ = ("topic", "topic_id", "partition", "fetch_offset", "max_bytes", "current_leader_epoch",
                 "last_fetched_epoch", "fetcher_log_start_offset", "high_watermark", "log_start_offset")

    def __init__(self, topic, topic_id, partition: int, fetch_offset: int, max_bytes: int,
                 current_leader_epoch: int = -1, last_fetched_epoch: int = -1, log_start_offset: int = -1):
        self.topic = topic  # None while a topic id is unknown here
        self.topic_id = topic_id
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.current_leader_epoch = current_leader_epoch
        self.last_fetched_epoch = last_fetched_epoch
        self.fetcher_log_start_offset = log_start_offset
        self.high_watermark = -1  # as last answered in the session
        self.log_start_offset = -1

    def update_request(self, p: "CachedPartition") -> None:
        """Take the fetch parameters of ``p`` (the same partition in a newer request)."""
        self.fetch_offset = p.fetch_offset
        self.max_bytes = p.max_bytes
        self.current_leader_epoch = p.current_leader_epoch
        self.last_fetched_epoch = p.last_fetched_epoch
        self.fetcher_log_start_offset = p.fetcher_log_start_offset

    def must_respond(self, r, update: bool) -> bool:
        """Whether result ``r`` has news for the fetcher; ``update`` remembers what was answered."""
        respond = r.records is not None and r.records.length > 0
        if r.high_watermark != self.high_watermark:
            respond = True
            if update:
                self.high_watermark = r.high_watermark
        if r.log_start_offset != self.log_start_offset:
            respond = True
            if update:
                self.log_start_offset = r.log_start_offset
        if r.error:
            respond = True
            if update:
                self.high_watermark = -1  # answered again once the error is gone
        if r.diverging_epoch is not None:
            respond = True
        return respond

    def __repr__(self):
        return (f"CachedPartition({self.topic or self.topic_id}-{self.partition}, offset={self.fetch_offset}, "
                f"hw={self.high_watermark})")


class FetchSession:
    __slots__ = ("id", "privileged", "partitions", "uses_topic_ids", "creation_ms", "last_used_ms", "epoch",
                 "cached_size", "evictable_by_all", "evictable_by_privileged")

    def __init__(self, session_id: int, privileged: bool, partitions: dict, uses_topic_ids: bool, now: int):
        self.id = session_id
        self.privileged = privileged  # a follower's
        self.partitions = partitions  # key -> CachedPartition, in serving order
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now
        self.last_used_ms = now
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.cached_size = -1
        self.evictable_by_all = self.evictable_by_privileged = False

    def evictable_key(self) -> tuple:
        return self.privileged, self.cached_size, self.id

    def update(self, wanted: dict, forgotten) -> None:
        """An incremental request: add or update the ``wanted`` partitions (key -> CachedPartition),
        then drop the ``forgotten`` keys."""
        parts = self.partitions
        for key, p in wanted.items():
            cached = parts.get(key)
            if cached is None:
                parts[key] = p
            else:
                cached.update_request(p)
        for key in forgotten:
            parts.pop(key, None)


class FetchSessionCache:
    """At most ``max_entries`` sessions, evicted as Kafka's FetchSessionCache does."""

    def __init__(self, max_entries: int = 1000, eviction_ms: int = EVICTION_MS):
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}  # by id, least recently used first
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def total_partitions(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def touch(self, session: FetchSession, now: int) -> None:
        """Used now: most recently used; its size and eviction rights are taken as they are now."""
        self.sessions.pop(session.id, None)
        self.sessions[session.id] = session
        session.last_used_ms = now
        session.cached_size = len(session.partitions)
        old = now - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old
        session.evictable_by_all = old

    def maybe_create(self, privileged: bool, partitions: dict, uses_topic_ids: bool, now: int) -> int:
        """A new session holding ``partitions`` (its id), or INVALID_SESSION_ID when there is no room."""
        if self.max_entries <= 0:
            return INVALID_SESSION_ID
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), privileged, partitions, uses_topic_ids, now)
        self.sessions[session.id] = session
        self.touch(session, now)
        return session.id

    def _new_id(self) -> int:
        while True:  # ids are drawn from 2**31 - 1 values: a free one comes at once
            sid = random.randint(1, _MAX_ID)
            if sid not in self.sessions:
                return sid

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        lru = next(iter(self.sessions.values()), None)
        if lru is None:
            return False
        if now - lru.last_used_ms > self.eviction_ms:  # idle too long: goes first
            self._evict(lru)
            return True
        if privileged:
            candidates = [s for s in self.sessions.values() if s.evictable_by_privileged]
        else:
            candidates = [s for s in self.sessions.values() if s.evictable_by_all]
        if not candidates:
            return False
        weakest = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < weakest.evictable_key():
            return False  # the newcomer is worth less than every session it could replace
        self._evict(weakest)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.sessions.pop(session.id, None)
        self.evictions += 1

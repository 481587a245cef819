"""What one Fetch request reads and answers under KIP-227 (the cache: pybroker/replica/fetch_sessions.py).

``new_context`` turns the request's session id and epoch into a context: ``partitions`` are what to
read (the request's for a full fetch, the whole session's for an incremental one) and ``respond``
picks what goes back: (response topics, results, session id, error code).
"""
from typing import NamedTuple

from pybroker.protocol.errors import (FETCH_SESSION_ID_NOT_FOUND, FETCH_SESSION_TOPIC_ID_ERROR,
                                      INVALID_FETCH_SESSION_EPOCH)
from pybroker.replica.fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch, now_ms


class ResponseTopic(NamedTuple):
    """A topic of an incremental response: its partitions are the session's (``.partition``)."""
    topic: str | None
    topic_id: object
    partitions: list


def key_of(p, by_id: bool) -> tuple:
    return (p.topic_id, p.partition) if by_id else (p.topic, p.partition)


class SessionError:
    """The session cannot serve this request: no partitions are read; the error goes back alone."""
    partitions = ()

    def __init__(self, error: int):
        self.error = error

    def respond(self, results):
        return [], [], INVALID_SESSION_ID, self.error


class Sessionless:
    """A full fetch with no session: everything requested is read and answered."""

    def __init__(self, topics, partitions):
        self.topics = topics
        self.partitions = partitions

    def respond(self, results):
        return self.topics, results, INVALID_SESSION_ID, 0


class Full(Sessionless):
    """A full fetch that opens a session holding every requested partition, when the cache has room."""

    def __init__(self, cache, topics, partitions, by_id: bool, privileged: bool):
        super().__init__(topics, partitions)
        self.cache, self.by_id, self.privileged = cache, by_id, privileged

    def respond(self, results):
        cached = {}
        for p, r in zip(self.partitions, results):
            p.high_watermark, p.log_start_offset = r.high_watermark, r.log_start_offset
            cached[key_of(p, self.by_id)] = p
        session_id = self.cache.maybe_create(self.privileged, cached, self.by_id, now_ms())
        return self.topics, results, session_id, 0


class Incremental:
    """Every partition of the session is read; only those with news are answered."""

    def __init__(self, session, request_epoch: int, names: dict | None):
        self.session = session
        self.request_epoch = request_epoch
        if names is not None:  # a topic id unknown when it was added may be known now
            for p in session.partitions.values():
                if p.topic is None:
                    p.topic = names.get(p.topic_id)
        self.partitions = list(session.partitions.values())

    def respond(self, results):
        session = self.session
        if session.epoch != next_epoch(self.request_epoch):  # another request of the session came first
            return [], [], session.id, INVALID_FETCH_SESSION_EPOCH
        topics, picked, last = [], [], None
        rotate = []
        for p, r in zip(self.partitions, results):
            if not p.must_respond(r, True):
                continue
            if r.records is not None and r.records.length > 0:
                rotate.append(p)
            name = p.topic_id if session.uses_topic_ids else p.topic
            if last is None or name != last:
                topics.append(ResponseTopic(p.topic, p.topic_id, []))
                last = name
            topics[-1].partitions.append(p)
            picked.append(r)
        parts = session.partitions
        by_id = session.uses_topic_ids
        for p in rotate:  # served: to the back of the line
            key = key_of(p, by_id)
            if parts.get(key) is p:
                del parts[key]
                parts[key] = p
        return topics, picked, session.id, 0


def new_context(cache, version: int, session_id: int, epoch: int, privileged: bool, topics, partitions,
                forgotten, names: dict | None):
    """The context of a request with ``partitions`` (CachedPartition, request order) and
    ``forgotten`` keys; ``names`` maps topic ids to names (v13+)."""
    by_id = version >= 13
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:  # a full fetch closes the session it names
            cache.remove(session_id)
        if epoch == FINAL_EPOCH:
            return Sessionless(topics, partitions)
        return Full(cache, topics, partitions, by_id, privileged)
    session = cache.get(session_id)
    if session is None:
        return SessionError(FETCH_SESSION_ID_NOT_FOUND)
    if session.epoch != epoch:
        return SessionError(INVALID_FETCH_SESSION_EPOCH)
    if session.uses_topic_ids != by_id:
        return SessionError(FETCH_SESSION_TOPIC_ID_ERROR)
    session.update({key_of(p, by_id): p for p in partitions}, forgotten)
    if not session.partitions:  # everything forgotten: the session ends
        cache.remove(session.id)
        return Sessionless(topics, partitions)
    cache.touch(session, now_ms())
    session.epoch = next_epoch(session.epoch)
    return Incremental(session, epoch, names if by_id else None)

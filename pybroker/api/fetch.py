"""Fetch: long-poll reads answered as header bytes plus file slices (no copy of record data).

v4-v17; v0-3 are read the same way and answered with message sets converted from the records read
(pybroker/api/fetch_legacy.py). Fetch sessions (KIP-227, v7+): pybroker/api/fetch_session.py decides
what is read and what is answered. Topic ids (v13+) are resolved through the metadata cache: an unknown one answers
UNKNOWN_TOPIC_ID (100); every read compares the id with the log's (the topic may be recreated while a
fetch waits), and another id answers INCONSISTENT_TOPIC_ID (103). A full fetch naming a partition
twice reads and answers it once, with the parameters of its last mention, as Kafka.
A partition whose last fetched epoch (v12+) ended before the fetch offset here answers its
diverging epoch instead of records. NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH carry the
current leader, and the response the leaders' endpoints (KIP-951, v16+). read_committed (isolation
level 1) reads up to the last stable offset and lists the aborted transactions overlapping what it
returns; read_uncommitted sends a null list. The response is encoded by core.kafka_codec so that
each partition's records field can be a file slice sent with sendfile.
"""
import struct

from pybroker import core
from pybroker.api import fetch_legacy, fetch_session
from pybroker.api.hosting import not_hosted
from pybroker.api.leader_hints import NO_LEADER, LeaderHints
from pybroker.errors import BrokerError
from pybroker.log.epochs import end_offset_for
from pybroker.protocol.errors import (FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE,
                                      TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION)
from pybroker.protocol.parts import Parts
from pybroker.replica.fetch_sessions import FINAL_EPOCH, CachedPartition
from pybroker.replica.manager import DEBUGGING_CONSUMER_ID, FetchResult, errored
from pybroker.security import acl as A

API_KEY = 1
MIN_VERSION = 0
MAX_VERSION = 17
FIRST_ISOLATION_VERSION = 4  # v0-3 (no isolation level, magic 0/1): pybroker/api/fetch_legacy.py
FIRST_SESSION_VERSION, FIRST_DIVERGING_VERSION, FIRST_TOPIC_ID_VERSION = 7, 12, 13
FIRST_REPLICA_STATE_VERSION, FIRST_CURRENT_LEADER_VERSION = 15, 16
FIRST_FOLLOWER_READ_VERSION = 11  # KIP-392: a consumer may read from a follower
UNREAD = ()  # the aborted transactions of a partition refused before reading: an empty list, not null

_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_I64 = struct.Struct(">q")
_TOPIC_ERROR = struct.Struct(">hi")


async def handle(ctx, request):
    version = ctx.version
    services = ctx.services
    if version >= FIRST_REPLICA_STATE_VERSION:  # the follower's id moved into replica_state (KIP-903)
        request.replica_id = request.replica_state.replica_id  # what quotas and logs read
    replica_id = request.replica_id
    names = services.metadata.topic_names if version >= FIRST_TOPIC_ID_VERSION else None
    partitions = _partitions(request, names)
    if _has_duplicates(request.topics):
        request.topics, partitions = _deduplicated(partitions, names is not None)
    if version < FIRST_SESSION_VERSION:
        if version < FIRST_ISOLATION_VERSION:  # v0-3: message sets of magic 0/1, converted from what is read
            results, _ = await _read(ctx, request, partitions, replica_id, False)
            return fetch_legacy.response(ctx, version, request.topics, partitions, results, replica_id)
        context = fetch_session.Sessionless(request.topics, partitions)
    elif request.session_id == 0 and request.session_epoch == FINAL_EPOCH:
        context = fetch_session.Sessionless(request.topics, partitions)  # the common case: no session
    else:
        forgotten = _forgotten(request, names is not None)
        context = fetch_session.new_context(services.fetch_sessions, version, request.session_id, request.session_epoch,
                                            replica_id >= 0, request.topics, partitions, forgotten, names)
    committed_only = request.isolation_level == 1
    results, diverged = await _read(ctx, request, context.partitions, replica_id, committed_only)
    topics, results, session_id, error = context.respond(results)
    endpoints = _current_leaders(ctx, topics, results) if version >= FIRST_CURRENT_LEADER_VERSION else None
    # tagged: some result may carry a diverging epoch or a current leader (else none is looked at)
    return Parts(core.kafka_codec.encode_fetch(version, topics, results, committed_only, session_id, error, endpoints,
                                               diverged or endpoints is not None))


def _partitions(request, names) -> list:
    """The request's partitions in order, each named (None: an id unknown here)."""
    out = []
    for t in request.topics:
        topic_id = t.topic_id
        name = t.topic if names is None else names.get(topic_id)
        for p in t.partitions:
            out.append(CachedPartition(name, topic_id, p.partition, p.fetch_offset, p.partition_max_bytes,
                                       p.current_leader_epoch, p.last_fetched_epoch, p.log_start_offset))
    return out


def _has_duplicates(topics) -> bool:
    """Whether a topic or a partition is named twice (cheap: one set per topic)."""
    if len(topics) > 1 and len({(t.topic, t.topic_id) for t in topics}) != len(topics):
        return True
    for t in topics:
        ps = t.partitions
        if len(ps) > 1 and len({p.partition for p in ps}) != len(ps):
            return True
    return False


def _deduplicated(partitions, by_id: bool) -> tuple[list, list]:
    """(response topics, partitions) with each partition once: in the place of its first mention,
    with the parameters of its last; runs of one topic make one response topic."""
    unique = {}
    for p in partitions:
        key = (p.topic_id if by_id else p.topic, p.partition)
        first = unique.get(key)
        if first is None:
            unique[key] = p
        else:
            first.update_request(p)
    topics, last = [], None
    for (name, _), p in unique.items():
        if last is None or name != last:
            topics.append(fetch_session.ResponseTopic(p.topic, p.topic_id, []))
            last = name
        topics[-1].partitions.append(p)
    return topics, list(unique.values())


def _forgotten(request, by_id: bool) -> list:
    return [((t.topic_id if by_id else t.topic), index)
            for t in request.forgotten_topics_data for index in t.partitions]


async def _read(ctx, request, partitions, replica_id: int, committed_only: bool) -> tuple[list, bool]:
    """(one result per partition, in order, whether one has a diverging epoch): read through the
    replica manager unless answered here."""
    if not partitions:
        return [], False
    authz = ctx.services.authorizer
    # no acls, every topic id known, no last fetched epoch (consumers): nothing to answer here
    plain = authz is None and (ctx.version < FIRST_DIVERGING_VERSION or not _special(partitions))
    fixed = None if plain else _answered_here(ctx, authz, partitions, replica_id)
    wanted = [p for i, p in enumerate(partitions) if i not in fixed] if fixed else partitions
    diverged = bool(fixed) and any(r.diverging_epoch is not None for r in fixed.values())
    max_wait = 0 if diverged else request.max_wait_ms
    read = await ctx.services.replicas.fetch(wanted, max_wait, request.min_bytes, request.max_bytes, committed_only,
                                           replica_id, ctx.version >= FIRST_TOPIC_ID_VERSION,
                                           ctx.version < FIRST_FOLLOWER_READ_VERSION) if wanted else []
    if UNKNOWN_TOPIC_OR_PARTITION in [r.error for r in read]:
        _not_hosted(ctx, wanted, read)
    metrics = ctx.services.metrics
    if metrics is not None:  # pybroker/metrics: bytes out per topic (the slices' lengths)
        metrics.on_fetch(wanted, read, replica_id)
    if not fixed:
        return read, False
    it = iter(read)
    return [fixed[i] if i in fixed else next(it) for i in range(len(partitions))], diverged


def _not_hosted(ctx, wanted, read) -> None:
    """As Kafka: a partition the cluster has but this broker hosts no replica of is NOT_LEADER_OR_FOLLOWER."""
    for p, r in zip(wanted, read):
        if r.error == UNKNOWN_TOPIC_OR_PARTITION:
            r.error = not_hosted(ctx, p.topic, p.partition)
            if r.error == UNKNOWN_TOPIC_OR_PARTITION:
                r.aborted_transactions = UNREAD  # the cluster has no such partition: Kafka answers it unread


def _special(partitions) -> bool:
    """Whether a partition has an unknown topic id or a last fetched epoch (one pass, no calls)."""
    return any([p.topic is None or p.last_fetched_epoch >= 0 for p in partitions])


def _answered_here(ctx, authz, partitions, replica_id: int) -> dict:
    """index -> FetchResult for the partitions not to be read: unknown topic ids, topics the caller
    may not read, diverging epochs. A topic id that differs from the log's is left to the read."""
    fixed = {}
    denied = _denied(ctx, authz, partitions, replica_id) if authz is not None else ()
    replicas = ctx.services.replicas
    for i, p in enumerate(partitions):
        if p.topic is None:
            fixed[i] = FetchResult(UNKNOWN_TOPIC_ID, aborted_transactions=UNREAD)
        elif p.topic in denied:
            fixed[i] = FetchResult(TOPIC_AUTHORIZATION_FAILED, aborted_transactions=UNREAD)
        elif p.last_fetched_epoch >= 0:
            partition = replicas.get(p.topic, p.partition)
            if partition is None or not _same_topic(partition.topic_id, p.topic_id):
                continue  # the read answers UNKNOWN_TOPIC_OR_PARTITION or INCONSISTENT_TOPIC_ID
            r = _divergence(partition, p, replica_id)
            if r is not None:
                fixed[i] = r
    return fixed


def _same_topic(log_id, request_id) -> bool:
    """Kafka's rule: a log or a request without a topic id is consistent with any."""
    return not (log_id and request_id and getattr(log_id, "int", 0) and getattr(request_id, "int", 0)) \
        or log_id == request_id


def _denied(ctx, authz, partitions, replica_id: int) -> set:
    """Topics this fetch may not read: a follower needs CLUSTER_ACTION, a consumer READ per topic."""
    names = {p.topic for p in partitions if p.topic is not None}
    if replica_id >= 0:
        return set() if authz.allowed(ctx, A.CLUSTER_ACTION, A.CLUSTER, A.CLUSTER_NAME) else names
    return {name for name in names if not authz.allowed(ctx, A.READ, A.TOPIC, name)}


def _divergence(partition, p, replica_id: int):
    """A FetchResult when ``p``'s last fetched epoch shows the fetcher's log diverged from ours,
    or when the check itself fails; None to read as usual."""
    entries = partition.log.epochs.entries
    if not entries:
        return None  # a log without epochs cannot tell: read
    try:
        if replica_id == DEBUGGING_CONSUMER_ID:
            partition.check_leader_epoch(p.current_leader_epoch)
        else:
            partition.check_leader(p.current_leader_epoch)
    except BrokerError as exc:
        return errored(exc.code, partition, replica_id)
    epoch, end = end_offset_for(entries, p.last_fetched_epoch, partition.log_end_offset)
    if epoch < 0 or end < 0 or p.fetch_offset < partition.log_start_offset:
        return errored(OFFSET_OUT_OF_RANGE, partition, replica_id)
    if epoch < p.last_fetched_epoch or end < p.fetch_offset:
        return FetchResult(0, partition.high_watermark, partition.last_stable_offset, partition.log_start_offset,
                           diverging_epoch=(epoch, end))
    return None


def _current_leaders(ctx, topics, results) -> list | None:
    """KIP-951: the leader known here for each partition answered NOT_LEADER_OR_FOLLOWER or
    FENCED_LEADER_EPOCH (pybroker/api/leader_hints.py, as Produce), and those leaders' endpoints."""
    errors = {r.error for r in results}  # one pass without a generator: most fetches have no error
    if NOT_LEADER_OR_FOLLOWER not in errors and FENCED_LEADER_EPOCH not in errors:
        return None
    hints = LeaderHints(ctx)
    names = ctx.services.metadata.topic_names
    k = 0
    for t in topics:
        for p in t.partitions:
            r = results[k]
            k += 1
            if r.error not in (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH):
                continue
            name = getattr(p, "topic", None) or t.topic or names.get(t.topic_id)
            leader = hints.leader_of(name, p.partition) if name else NO_LEADER
            r.current_leader = None if leader == NO_LEADER else leader  # (-1, -1) is the field's default
    return hints.sorted_endpoints()


def encode(version: int, topics, results, committed_only: bool) -> Parts:
    """FetchResponse body for ``results`` (one per requested partition, in request order).

    The reference the native encoder (core.kafka_codec.encode_fetch) is tested against.
    """
    out = Parts()
    buf = bytearray(_I32.pack(0))  # throttle_time_ms
    if version >= 7:
        buf += _TOPIC_ERROR.pack(0, 0)  # top-level error, session id
    buf += _I32.pack(len(topics))
    it = iter(results)
    for topic in topics:
        name = topic.topic.encode()
        buf += struct.pack(">h", len(name)) + name + _I32.pack(len(topic.partitions))
        for p in topic.partitions:
            r = next(it)
            buf += _PARTITION_HEAD.pack(p.partition, r.error, r.high_watermark, r.last_stable_offset)
            if version >= 5:
                buf += _I64.pack(r.log_start_offset)
            if committed_only:  # read_committed: the aborted transactions in the records (maybe none)
                txns = r.aborted_transactions or ()
                buf += _I32.pack(len(txns))
                for pid, first in txns:
                    buf += _I64.pack(pid) + _I64.pack(first)
            else:
                # read_uncommitted: null, or empty for an error answered without reading (as Kafka)
                buf += _I32.pack(0 if r.error != 0 and r.aborted_transactions is not None else -1)
            if version >= 11:
                buf += _I32.pack(-1)  # preferred read replica
            if r.records is None:
                buf += _I32.pack(0)
            else:
                buf += _I32.pack(r.records.length)
                out.append(bytes(buf))
                out.append(r.records)
                buf = bytearray()
    if buf:
        out.append(bytes(buf))
    return out

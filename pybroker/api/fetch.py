"""Fetch: long-poll reads answered as header bytes plus file slices (no copy of record data).

v4-v17. Fetch sessions (KIP-227, v7+): pybroker/api/fetch_session.py decides what is read and
what is answered. Topic ids (v13+) are resolved through the metadata cache: an unknown one answers
UNKNOWN_TOPIC_ID (100), one that differs from the id of the log here INCONSISTENT_TOPIC_ID (103).
A partition whose last fetched epoch (v12+) ended before the fetch offset here answers its
diverging epoch instead of records. NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH carry the
current leader, and the response the leaders' endpoints (KIP-951, v16+). read_committed (isolation
level 1) reads up to the last stable offset and lists the aborted transactions overlapping what it
returns; read_uncommitted sends a null list. The response is encoded by core.kafka_codec so that
each partition's records field can be a file slice sent with sendfile.
"""
import struct

from pybroker import core
from pybroker.api import fetch_session
from pybroker.api.context import Parts
from pybroker.errors import BrokerError
from pybroker.replica.fetch_sessions import FINAL_EPOCH, CachedPartition
from pybroker.replica.manager import DEBUGGING_CONSUMER_ID, FetchResult
from pybroker.security import acl as A

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 17
OFFSET_OUT_OF_RANGE = 1
NOT_LEADER_OR_FOLLOWER = 6
TOPIC_AUTHORIZATION_FAILED = 29
FENCED_LEADER_EPOCH = 74
UNKNOWN_TOPIC_ID = 100
INCONSISTENT_TOPIC_ID = 103
FIRST_SESSION_VERSION, FIRST_DIVERGING_VERSION, FIRST_TOPIC_ID_VERSION = 7, 12, 13
FIRST_REPLICA_STATE_VERSION, FIRST_CURRENT_LEADER_VERSION = 15, 16

_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_I64 = struct.Struct(">q")
_TOPIC_ERROR = struct.Struct(">hi")


async def handle(ctx, request):
    version = ctx.version
    broker = ctx.broker
    if version >= FIRST_REPLICA_STATE_VERSION:  # the follower's id moved into replica_state (KIP-903)
        request.replica_id = request.replica_state.replica_id  # what quotas and logs read
    replica_id = request.replica_id
    names = broker.metadata.topic_names if version >= FIRST_TOPIC_ID_VERSION else None
    partitions = _partitions(request, names)
    if version < FIRST_SESSION_VERSION or (request.session_id == 0 and request.session_epoch == FINAL_EPOCH):
        context = fetch_session.Sessionless(request.topics, partitions)  # the common case: no session
    else:
        forgotten = _forgotten(request, names is not None)
        context = fetch_session.new_context(broker.fetch_sessions, version, request.session_id, request.session_epoch,
                                            replica_id >= 0, request.topics, partitions, forgotten, names)
    committed_only = request.isolation_level == 1
    results = await _read(ctx, request, context.partitions, replica_id, committed_only)
    topics, results, session_id, error = context.respond(results)
    endpoints = _current_leaders(ctx, topics, results) if version >= FIRST_CURRENT_LEADER_VERSION else None
    return Parts(core.kafka_codec.encode_fetch(version, topics, results, committed_only, session_id, error, endpoints))


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


def _forgotten(request, by_id: bool) -> list:
    return [((t.topic_id if by_id else t.topic), index) for t in request.forgotten_topics_data for index in t.partitions]


async def _read(ctx, request, partitions, replica_id: int, committed_only: bool) -> list:
    """One result per partition, in order: read through the replica manager unless answered here."""
    if not partitions:
        return []
    authz = ctx.broker.authorizer
    plain = authz is None and ctx.version < FIRST_DIVERGING_VERSION  # no ids, no epochs: nothing to check here
    fixed = None if plain else _answered_here(ctx, authz, partitions, replica_id)
    wanted = [p for i, p in enumerate(partitions) if i not in fixed] if fixed else partitions
    max_wait = 0 if fixed and any(r.diverging_epoch is not None for r in fixed.values()) else request.max_wait_ms
    read = await ctx.broker.replicas.fetch(wanted, max_wait, request.min_bytes, request.max_bytes,
                                           committed_only, replica_id) if wanted else []
    metrics = getattr(ctx.broker, "metrics", None)
    if metrics is not None:  # pybroker/metrics: bytes out per topic (the slices' lengths)
        metrics.on_fetch(wanted, read, replica_id)
    if not fixed:
        return read
    it = iter(read)
    return [fixed[i] if i in fixed else next(it) for i in range(len(partitions))]


def _answered_here(ctx, authz, partitions, replica_id: int) -> dict:
    """index -> FetchResult for the partitions not to be read: unknown or inconsistent topic ids,
    topics the caller may not read, diverging epochs."""
    fixed = {}
    denied = _denied(ctx, authz, partitions, replica_id) if authz is not None else ()
    replicas = ctx.broker.replicas
    for i, p in enumerate(partitions):
        if p.topic is None:
            fixed[i] = FetchResult(UNKNOWN_TOPIC_ID)
        elif p.topic in denied:
            fixed[i] = FetchResult(TOPIC_AUTHORIZATION_FAILED)
        elif p.last_fetched_epoch >= 0 or (p.topic_id is not None and p.topic_id.int):
            partition = replicas.get(p.topic, p.partition)
            if partition is None:
                continue  # the read answers UNKNOWN_TOPIC_OR_PARTITION
            if p.topic_id is not None and p.topic_id.int and isinstance(partition.topic_id, type(p.topic_id)) \
                    and partition.topic_id != p.topic_id:
                fixed[i] = FetchResult(INCONSISTENT_TOPIC_ID)
            elif p.last_fetched_epoch >= 0:
                r = _divergence(partition, p, replica_id)
                if r is not None:
                    fixed[i] = r
    return fixed


def _denied(ctx, authz, partitions, replica_id: int) -> set:
    """Topics this fetch may not read: a follower needs CLUSTER_ACTION, a consumer READ per topic."""
    names = {p.topic for p in partitions if p.topic is not None}
    if replica_id >= 0:
        return set() if authz.allowed(ctx, A.CLUSTER_ACTION, A.CLUSTER, A.CLUSTER_NAME) else names
    return {name for name in names if not authz.allowed(ctx, A.READ, A.TOPIC, name)}


def epoch_end_offset(entries, requested: int, log_end_offset: int) -> tuple[int, int]:
    """Kafka's end offset of leader epoch ``requested`` over (epoch, start offset) ``entries``:
    (epoch, end offset), (-1, -1) when it is past every known epoch."""
    if entries[-1][0] == requested:
        return requested, log_end_offset
    floor = None
    for epoch, start in entries:
        if epoch > requested:
            return (requested if floor is None else floor), start
        floor = epoch
    return -1, -1


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
        return FetchResult(exc.code, partition.high_watermark, partition.last_stable_offset, partition.log_start_offset)
    epoch, end = epoch_end_offset(entries, p.last_fetched_epoch, partition.log_end_offset)
    if epoch < 0 or end < 0 or p.fetch_offset < partition.log_start_offset:
        return FetchResult(OFFSET_OUT_OF_RANGE, partition.high_watermark, partition.last_stable_offset,
                           partition.log_start_offset)
    if epoch < p.last_fetched_epoch or end < p.fetch_offset:
        return FetchResult(0, partition.high_watermark, partition.last_stable_offset, partition.log_start_offset,
                           diverging_epoch=(epoch, end))
    return None


def _current_leaders(ctx, topics, results) -> list:
    """KIP-951: the leader known here for each partition answered NOT_LEADER_OR_FOLLOWER or
    FENCED_LEADER_EPOCH, and those leaders' endpoints on this listener."""
    if not any(r.error in (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH) for r in results):
        return None
    endpoints = {}
    cache = ctx.broker.metadata
    k = 0
    for t in topics:
        for p in t.partitions:
            r = results[k]
            k += 1
            if r.error not in (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH):
                continue
            name = getattr(p, "topic", None) or t.topic or cache.topic_names.get(t.topic_id)
            state = cache.partition(name, p.partition) if name else None
            if state is None or state.leader < 0:
                continue
            r.current_leader = (state.leader, state.leader_epoch)
            if state.leader not in endpoints:
                b = cache.brokers.get(state.leader)
                address = b.address(ctx.connection.server.listener_name) if b is not None else None
                if address is not None:
                    endpoints[state.leader] = (state.leader, address[0], address[1], b.rack)
    return list(endpoints.values())


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
                buf += _I32.pack(-1)  # read_uncommitted: null
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

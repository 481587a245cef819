"""Fetch: long-poll reads answered as header bytes plus file slices (no copy of record data).

Sessions are not kept (session id 0: every request is a full fetch), which every client
accepts. read_committed (isolation level 1) reads up to the last stable offset and lists the aborted
transactions overlapping what it returns; read_uncommitted sends a null list. The response (v4-v11, non-flexible) is encoded here by hand so that each
partition's records field can be a file slice sent with sendfile.
"""
import struct

from pybroker import core
from pybroker.api.context import Parts
from pybroker.replica.manager import FetchRequestPartition, FetchResult
from pybroker.security import acl as A

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 11
TOPIC_AUTHORIZATION_FAILED = 29

_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_I64 = struct.Struct(">q")
_TOPIC_ERROR = struct.Struct(">hi")


async def handle(ctx, request):
    partitions = [FetchRequestPartition(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                                        p.current_leader_epoch)
                  for t in request.topics for p in t.partitions]
    committed_only = request.isolation_level == 1
    authz = ctx.broker.authorizer
    denied = _denied(ctx, authz, request) if authz is not None else None
    if denied:  # ACLs: denied topics answer TOPIC_AUTHORIZATION_FAILED and are not read
        results = await _fetch_allowed(ctx, request, partitions, denied, committed_only)
    else:
        results = await ctx.broker.replicas.fetch(partitions, request.max_wait_ms, request.min_bytes,
                                                  request.max_bytes, committed_only, request.replica_id)
    metrics = getattr(ctx.broker, "metrics", None)
    if metrics is not None:  # pybroker/metrics: bytes out per topic (the slices' lengths)
        metrics.on_fetch(partitions, results, request.replica_id)
    return Parts(core.kafka_codec.encode_fetch(ctx.version, request.topics, results, committed_only))


def _denied(ctx, authz, request) -> set:
    """Topics this fetch may not read: a follower needs CLUSTER_ACTION, a consumer READ per topic."""
    names = {t.topic for t in request.topics}
    if request.replica_id >= 0:
        return set() if authz.allowed(ctx, A.CLUSTER_ACTION, A.CLUSTER, A.CLUSTER_NAME) else names
    return {name for name in names if not authz.allowed(ctx, A.READ, A.TOPIC, name)}


async def _fetch_allowed(ctx, request, partitions, denied, committed_only) -> list:
    allowed = [p for p in partitions if p.topic not in denied]
    read = iter(await ctx.broker.replicas.fetch(allowed, request.max_wait_ms, request.min_bytes, request.max_bytes,
                                                committed_only, request.replica_id) if allowed else ())
    return [FetchResult(TOPIC_AUTHORIZATION_FAILED) if p.topic in denied else next(read) for p in partitions]


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

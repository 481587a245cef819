"""DescribeLogDirs: this broker's log dirs, each with the partitions it holds (all, or those asked
for), their size on disk and offset lag; v4 adds the volume's total and usable bytes.

Partitions not held here (or unknown topics) are left out, as Kafka does: the response has no
per-partition error. Offset lag is Kafka's for a current (non-future) log: max(HW - LEO, 0).
"""
import os

from pybroker.protocol.errors import CLUSTER_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security.acl_checks import cluster_denied

API_KEY = 35
MIN_VERSION = 0
MAX_VERSION = 4

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    if cluster_denied(ctx, 8):  # DESCRIBE: as Kafka, an empty answer (v3+ also says why)
        return Response(throttle_time_ms=0, error_code=CLUSTER_AUTHORIZATION_FAILED if ctx.version >= 3 else 0,
                        results=[])
    wanted = None if request.topics is None else {(t.topic, p) for t in request.topics for p in t.partitions}
    manager = ctx.log_manager
    by_dir: dict[str, dict[str, list]] = {d: {} for d in manager.log_dirs}
    for (topic, index), lg in sorted(manager.logs.items()):
        if wanted is not None and (topic, index) not in wanted:
            continue
        topics = by_dir.setdefault(os.path.dirname(lg.directory), {})
        topics.setdefault(topic, []).append(Response.DescribeLogDirsPartition(
            partition_index=index, partition_size=sum(s.size for s in list(lg.segments)),
            offset_lag=_offset_lag(ctx.replicas, topic, index, lg), is_future_key=False))
    results = []
    for d, topics in by_dir.items():
        total, usable = _volume(d)
        results.append(Response.DescribeLogDirsResult(
            error_code=0, log_dir=d, total_bytes=total, usable_bytes=usable,
            topics=[Response.DescribeLogDirsTopic(name=t, partitions=ps) for t, ps in topics.items()]))
    return Response(throttle_time_ms=0, error_code=0, results=results)


def _offset_lag(replicas, topic: str, index: int, lg) -> int:
    p = replicas.get(topic, index) if replicas is not None else None
    if p is None or p.is_leader:
        return 0
    return max(p.high_watermark - lg.log_end_offset, 0)


def _volume(d: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding ``d``; -1s when it cannot be read."""
    try:
        st = os.statvfs(d)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize

"""OffsetForLeaderEpoch: where a leader epoch ended, so a replica knows where to truncate."""
import logging

from pybroker.api.hosting import not_hosted
from pybroker.errors import BrokerError
from pybroker.protocol.errors import TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 23
MIN_VERSION = 0  # v0 answers no epoch, v0-1 take no current leader epoch
MAX_VERSION = 4

Response = RESPONSES[API_KEY]
log = logging.getLogger(__name__)


def _denied(ctx, authz, request) -> set:
    """A follower (replica id >= 0) needs CLUSTER_ACTION; a client DESCRIBE on each topic."""
    names = {t.topic for t in request.topics}
    if ctx.version >= 3 and request.replica_id >= 0:
        return set() if authz.allowed(ctx, A.CLUSTER_ACTION, A.CLUSTER, A.CLUSTER_NAME) else names
    return {n for n in names if not authz.allowed(ctx, A.DESCRIBE, A.TOPIC, n)}


def handle(ctx, request):
    topics = []
    authz = ctx.authorizer
    denied = _denied(ctx, authz, request) if authz is not None else ()
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            partition = ctx.replicas.get(topic.topic, p.partition)
            error, epoch, end = UNKNOWN_TOPIC_OR_PARTITION, -1, -1
            if topic.topic in denied:
                error = TOPIC_AUTHORIZATION_FAILED
            elif partition is None:
                error = not_hosted(ctx, topic.topic, p.partition)
            else:
                try:
                    partition.check_leader(p.current_leader_epoch)
                    epoch, end = partition.end_offset_for_epoch(p.leader_epoch)
                    error = 0
                    log.debug("%s-%d: epoch %d ends at (%d, %d)", topic.topic, p.partition, p.leader_epoch, epoch, end)
                except BrokerError as exc:
                    error = exc.code
            parts.append(Response.EpochEndOffset(error_code=error, partition=p.partition,
                                                 leader_epoch=epoch, end_offset=end))
        topics.append(Response.OffsetForLeaderTopicResult(topic=topic.topic, partitions=parts))
    return Response(throttle_time_ms=0, topics=topics)

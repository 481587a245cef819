"""AlterReplicaLogDirs: move a partition's replica to another of this broker's log dirs.

Answered per partition as Kafka 3.8 does before it would start a move: a dir that is not one of
this broker's answers LOG_DIR_NOT_FOUND, a partition without a replica here REPLICA_NOT_AVAILABLE,
a replica already in the asked dir NONE. Moving a replica between dirs while it serves is not
done here: a replica in another dir answers KAFKA_STORAGE_ERROR, Kafka's answer when it cannot
create the future log (so the tools report the partition as not moved).
"""
import logging
import os

from pybroker.protocol.errors import (CLUSTER_AUTHORIZATION_FAILED, INVALID_TOPIC_EXCEPTION, KAFKA_STORAGE_ERROR,
                                      LOG_DIR_NOT_FOUND, REPLICA_NOT_AVAILABLE)
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A
from pybroker.security.acl_checks import cluster_denied

API_KEY = 34
MIN_VERSION = 0
MAX_VERSION = 2
MAX_TOPIC_NAME = 249  # Kafka cannot name a future log for a longer topic name

Response = RESPONSES[API_KEY]
log = logging.getLogger(__name__)


def handle(ctx, request):
    if cluster_denied(ctx, A.ALTER):  # as Kafka's refusal: each dir's topics echoed, every partition refused
        return Response(throttle_time_ms=0, results=[Response.AlterReplicaLogDirTopicResult(
            topic_name=t.name, partitions=[Response.AlterReplicaLogDirPartitionResult(
                partition_index=p, error_code=CLUSTER_AUTHORIZATION_FAILED) for p in t.partitions])
            for d in request.dirs for t in d.topics])
    wanted = {}  # (topic, partition) -> dir: the last mention wins, as in Kafka's map
    for d in request.dirs:
        for t in d.topics:
            for p in t.partitions:
                wanted[(t.name, p)] = d.path
    manager = ctx.log_manager
    dirs = set(manager.log_dirs)
    by_topic: dict[str, list] = {}
    for (topic, index), path in wanted.items():
        error = _error(manager, dirs, topic, index, path)
        by_topic.setdefault(topic, []).append(
            Response.AlterReplicaLogDirPartitionResult(partition_index=index, error_code=error))
    return Response(throttle_time_ms=0, results=[Response.AlterReplicaLogDirTopicResult(topic_name=topic, partitions=ps)
                                                 for topic, ps in by_topic.items()])


def _error(manager, dirs: set, topic: str, index: int, path: str) -> int:
    if len(topic) > MAX_TOPIC_NAME:
        return INVALID_TOPIC_EXCEPTION
    target = os.path.abspath(path) if path else ""
    if target not in dirs:
        return LOG_DIR_NOT_FOUND
    current = manager.logs.get((topic, index))
    if current is None:
        return REPLICA_NOT_AVAILABLE
    if os.path.dirname(current.directory) == target:
        return 0
    log.info("%s-%d: not moved from %s to %s (no moves between log dirs)", topic, index,
             os.path.dirname(current.directory), target)
    return KAFKA_STORAGE_ERROR

"""CreateTopics: new topics with partition count, replication factor and topic configs (validate-only too).

v5+ answers what was (or would be) created: the partition count, the replication factor and every
topic config with its source, when the caller may DESCRIBE_CONFIGS the topic (else
topic_config_error_code says TOPIC_AUTHORIZATION_FAILED); v7 adds the new topic's id. A failed
creation answers none of it. A topic named twice in one request is answered once, INVALID_REQUEST;
refusals are worded as KRaft Kafka words them.
"""
from pybroker.controller.topic_rules import InvalidReplicaAssignmentError, describe_topic_configs
from pybroker.errors import BrokerError
from pybroker.protocol.errors import INVALID_REQUEST, TOPIC_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 19
MIN_VERSION = 0  # v0 has no validate_only, v0-1 no throttle time
MAX_VERSION = 7

DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5  # config sources

Response = RESPONSES[API_KEY]


async def handle(ctx, request):
    results = []
    authz = ctx.authorizer
    cluster_create = authz is None or authz.allowed_quietly(ctx, A.CREATE, A.CLUSTER, A.CLUSTER_NAME)
    counts = {}
    for topic in request.topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    answered = set()
    for topic in request.topics:
        if topic.name in answered:
            continue  # as Kafka: a name given twice is answered once
        answered.add(topic.name)
        configs = {c.name: c.value for c in topic.configs}
        result = Response.CreatableTopicResult(name=topic.name, configs=[])
        try:
            if counts[topic.name] > 1:
                raise InvalidRequest("Duplicate topic name.")
            if not cluster_create and not authz.allowed(ctx, A.CREATE, A.TOPIC, topic.name):
                raise TopicAuthorizationFailed(f"not authorized to create topic {topic.name!r}")
            kwargs = {}
            if topic.assignments:
                if topic.replication_factor != -1:
                    raise InvalidRequest("A manual partition assignment was specified, but replication factor was "
                                         "not set to -1.")
                if topic.num_partitions != -1:
                    raise InvalidRequest("A manual partition assignment was specified, but numPartitions was not "
                                         "set to -1.")
                indexes = [a.partition_index for a in topic.assignments]
                twice = [i for n, i in enumerate(indexes) if i in indexes[:n]]
                if twice:
                    raise InvalidReplicaAssignmentError(f"Found multiple manual partition assignments for partition "
                                                        f"{twice[0]}")
                kwargs["assignment"] = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
            record = await ctx.control.create_topic(
                topic.name, topic.num_partitions, topic.replication_factor, configs,
                validate_only=request.validate_only, **kwargs)
            if ctx.version >= 5:
                _describe(ctx, authz, result, topic, configs, record)
        except BrokerError as exc:
            result.error_code, result.error_message = exc.code, str(exc)
            result.num_partitions, result.replication_factor, result.configs = -1, -1, []
            result.topic_config_error_code = 0
        results.append(result)
    return Response(throttle_time_ms=0, topics=results)


def _describe(ctx, authz, result, topic, configs: dict, record) -> None:
    """Fill in what the topic is (or would be, validate-only) when the caller may see its configs."""
    if authz is not None and not authz.allowed_quietly(ctx, A.DESCRIBE_CONFIGS, A.TOPIC, topic.name):
        result.topic_config_error_code = TOPIC_AUTHORIZATION_FAILED
        return
    if record is None:  # validate-only: what creation would have made
        config = ctx.config
        if topic.assignments:
            partitions, rf = len(topic.assignments), len(topic.assignments[0].broker_ids)
        else:
            partitions = config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
            rf = config.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
        record = _Proposed(topic.name, None, partitions, rf, configs)
    else:
        result.topic_id = record.topic_id
    result.num_partitions, result.replication_factor = record.partitions, record.replication_factor
    result.configs = [Response.CreatableTopicConfigs(
        name=name, value=value, read_only=False, is_sensitive=False,
        config_source=DYNAMIC_TOPIC_CONFIG if overridden else DEFAULT_CONFIG)
        for name, value, overridden in describe_topic_configs(record, ctx.config.log)]


class _Proposed:
    """A topic as a validate-only creation would make it (the fields describe_topic_configs reads)."""

    def __init__(self, name, topic_id, partitions, replication_factor, configs):
        self.name, self.topic_id = name, topic_id
        self.partitions, self.replication_factor, self.configs = partitions, replication_factor, configs


class TopicAuthorizationFailed(BrokerError):
    code = TOPIC_AUTHORIZATION_FAILED


class InvalidRequest(BrokerError):
    code = INVALID_REQUEST

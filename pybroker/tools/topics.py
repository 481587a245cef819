"""``pybroker topics``: kafka-topics.sh's create / list / describe / alter / delete."""
import base64
import sys
import uuid

from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode
from pybroker.tools.partition_health import FILTERS, partition_filter
from pybroker.tools.wire import (CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS,
                                 Client, KafkaError, ToolError, check)

TOPIC_RESOURCE = 2
DYNAMIC_TOPIC_CONFIG = 1  # config_source of a per-topic override
ATTEMPTS = 3  # requests retried after NOT_CONTROLLER


def run(args) -> int:
    if not args.describe and any(getattr(args, f, False) for f in FILTERS):
        raise ToolError("the partition filters (--under-replicated-partitions ...) need --describe")
    with Client(args.bootstrap_server, args.command_timeout_ms) as client:
        if args.list:
            return list_topics(client, args)
        if args.describe:
            return describe(client, args)
        if not args.topic:
            raise ToolError(f"--{action_name(args)} needs --topic")
        if args.create:
            return create(client, args)
        if args.delete:
            return delete(client, args)
        return alter(client, args)


def action_name(args) -> str:
    return next(a for a in ("create", "list", "describe", "delete", "alter") if getattr(args, a))


def _to_controller(client: Client, build, results_of):
    """Send an admin request to the controller, following NOT_CONTROLLER a few times."""
    for attempt in range(ATTEMPTS):
        conn = client.controller_conn()
        resp = conn.request(build(conn.version(build.api_key)))
        results = results_of(resp)
        if attempt + 1 < ATTEMPTS and any(r.error_code == ErrorCode.NOT_CONTROLLER for r in results):
            client.metadata([])
            continue
        return results


def create(client: Client, args) -> int:
    api = REQUESTS[CREATE_TOPICS]
    # checked here because -1 on the wire means "the broker's default"
    if args.partitions is not None and args.partitions < 1:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"--partitions must be at least 1, got {args.partitions}",
                         f"cannot create topic {args.topic!r}")
    if args.replication_factor is not None and args.replication_factor < 1:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"--replication-factor must be at least 1, got {args.replication_factor}",
                         f"cannot create topic {args.topic!r}")

    def build(version):
        if version < 4 and (args.partitions is None or args.replication_factor is None):
            raise ToolError("this broker needs both --partitions and --replication-factor")
        topic = api.CreatableTopic(
            name=args.topic,
            num_partitions=-1 if args.partitions is None else args.partitions,  # -1: broker default
            replication_factor=-1 if args.replication_factor is None else args.replication_factor,
            configs=[api.CreatableTopicConfig(name=k, value=v) for k, v in args.config])
        return api(topics=[topic], timeout_ms=args.command_timeout_ms, validate_only=False)
    build.api_key = CREATE_TOPICS

    for r in _to_controller(client, build, lambda resp: resp.topics):
        if r.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
            continue
        check(r.error_code, r.error_message, f"cannot create topic {r.name!r}")
        print(f"Created topic {r.name}.")
    return 0


def delete(client: Client, args) -> int:
    api = REQUESTS[DELETE_TOPICS]

    def build(version):
        if version >= 6:
            return api(topics=[api.DeleteTopicState(name=args.topic)], timeout_ms=args.command_timeout_ms)
        return api(topic_names=[args.topic], timeout_ms=args.command_timeout_ms)
    build.api_key = DELETE_TOPICS

    for r in _to_controller(client, build, lambda resp: resp.responses):
        if r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and args.if_exists:
            continue
        check(r.error_code, r.error_message, f"cannot delete topic {args.topic!r}")
    return 0


def alter(client: Client, args) -> int:
    if args.config:
        raise ToolError("--alter changes only --partitions here (topic configs cannot be altered yet)")
    if args.partitions is None:
        raise ToolError("--alter needs --partitions")
    api = REQUESTS[CREATE_PARTITIONS]

    def build(version):
        return api(topics=[api.CreatePartitionsTopic(name=args.topic, count=args.partitions, assignments=None)],
                   timeout_ms=args.command_timeout_ms, validate_only=False)
    build.api_key = CREATE_PARTITIONS

    for r in _to_controller(client, build, lambda resp: resp.results):
        if r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and args.if_exists:
            continue
        check(r.error_code, r.error_message, f"cannot alter topic {r.name!r}")
    return 0


def _topics(client: Client, args):
    resp = client.metadata(None if not args.topic else [args.topic])
    topics = sorted(resp.topics, key=lambda t: t.name)
    if args.exclude_internal:
        topics = [t for t in topics if not t.is_internal]
    return topics


def list_topics(client: Client, args) -> int:
    for t in _topics(client, args):
        if t.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            print(t.name)
    return 0


def overrides(client: Client, names: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Each topic's config overrides (DescribeConfigs, config source DYNAMIC_TOPIC_CONFIG)."""
    if not names:
        return {}
    api = REQUESTS[DESCRIBE_CONFIGS]
    conn = client.any_conn()
    resp = conn.request(api(resources=[api.DescribeConfigsResource(resource_type=TOPIC_RESOURCE,
                                                                   resource_name=n, configuration_keys=None)
                                       for n in names], include_synonyms=False))
    out = {}
    for r in resp.results:
        check(r.error_code, r.error_message, f"cannot describe the configs of topic {r.resource_name!r}")
        out[r.resource_name] = sorted((c.name, c.value) for c in r.configs
                                      if c.config_source == DYNAMIC_TOPIC_CONFIG)
    return out


def _nodes(ids) -> str:
    return ",".join(str(i) for i in ids)


def _kafka_id(topic_id: uuid.UUID) -> str:
    """Kafka's string form of a topic id: unpadded base64url of its 16 bytes."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def describe(client: Client, args) -> int:
    topics = _topics(client, args)
    for t in topics:
        if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and args.if_exists:
            return 0
        check(t.error_code, None, f"cannot describe topic {t.name!r}")
    keep = partition_filter(client, args, topics)
    configs = overrides(client, [t.name for t in topics]) if keep is None else {}
    for t in topics:
        parts = sorted(t.partitions, key=lambda p: p.partition_index)
        rf = len(parts[0].replica_nodes) if parts else 0
        head = f"Topic: {t.name}"
        if getattr(t, "topic_id", None) not in (None, uuid.UUID(int=0)):
            head += f"\tTopicId: {_kafka_id(t.topic_id)}"
        cfg = ",".join(f"{k}={v}" for k, v in configs.get(t.name, []))
        if keep is None:  # a filtered describe lists partitions only, as kafka-topics does
            print(f"{head}\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}\tConfigs: {cfg}")
        for p in parts:
            if keep is not None and not keep(t, p):
                continue
            leader = p.leader_id if p.leader_id >= 0 else "none"
            line = (f"\tTopic: {t.name}\tPartition: {p.partition_index}\tLeader: {leader}\t"
                    f"Replicas: {_nodes(p.replica_nodes)}\tIsr: {_nodes(p.isr_nodes)}")
            if p.offline_replicas:
                line += f"\tOffline: {_nodes(p.offline_replicas)}"
            if p.error_code:
                known = p.error_code in ErrorCode._value2member_map_
                line += f"\tError: {ErrorCode(p.error_code).name if known else p.error_code}"
            print(line)
    sys.stdout.flush()
    return 0

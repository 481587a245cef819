"""``pybroker leader-election``: kafka-leader-election.sh (ElectLeaders to the controller).

Output as Kafka's tool: a line for the partitions elected, one for those whose leader was already
the right one, and one per failure; exit 1 when any partition failed."""
import json

from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode
from pybroker.tools.wire import ELECT_LEADERS, Client, KafkaError, ToolError

ATTEMPTS = 3  # requests retried after NOT_CONTROLLER (the controller moved)
TYPES = {"preferred": 0, "unclean": 1}


def partitions_of(args) -> list | None:
    """The (topic, partition) pairs asked for; None means every partition."""
    if args.all_topic_partitions:
        return None
    if args.path_to_json_file:
        try:
            with open(args.path_to_json_file) as f:
                entries = json.load(f)["partitions"]
            return [(e["topic"], int(e["partition"])) for e in entries]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ToolError(f"cannot read {args.path_to_json_file}: expected "
                            f'{{"partitions": [{{"topic": ..., "partition": ...}}]}} ({exc})') from None
    if args.topic is None or args.partition is None:
        raise ToolError("name the partitions: --topic with --partition, --path-to-json-file, "
                        "or --all-topic-partitions")
    return [(args.topic, args.partition)]


def elect(client: Client, build):
    for attempt in range(ATTEMPTS):
        conn = client.controller_conn()
        resp = conn.request(build(conn.version(ELECT_LEADERS)))
        if resp.error_code == ErrorCode.NOT_CONTROLLER and attempt + 1 < ATTEMPTS:
            client.metadata([])
            continue
        if resp.error_code:
            raise KafkaError(resp.error_code, None, "leader election")
        return resp


def run(args) -> int:
    wanted = partitions_of(args)
    api = REQUESTS[ELECT_LEADERS]
    topics: dict = {}
    for t, p in wanted or ():
        topics.setdefault(t, []).append(p)

    def build(version):
        return api(election_type=TYPES[args.election_type], timeout_ms=args.admin_timeout_ms,
                   topic_partitions=None if wanted is None else [
                       api.TopicPartitions(topic=t, partitions=ps) for t, ps in topics.items()])
    with Client(args.bootstrap_server, args.admin_timeout_ms) as client:
        resp = elect(client, build)
    results = [(f"{r.topic}-{p.partition_id}", p) for r in resp.replica_election_results for p in r.partition_result]
    kind = args.election_type.upper()
    done = [name for name, p in results if p.error_code == 0]
    already = [name for name, p in results if p.error_code == ErrorCode.ELECTION_NOT_NEEDED]
    failed = [(name, p) for name, p in results if p.error_code not in (0, ErrorCode.ELECTION_NOT_NEEDED)]
    if done:
        print(f"Successfully completed leader election ({kind}) for partitions {', '.join(done)}")
    if already:
        print(f"Valid replica already elected for partitions {', '.join(already)}")
    if not results:
        print(f"No partitions needed a leader election ({kind})")
    for name, p in failed:
        print(f"Error completing leader election ({kind}) for partition: {name}: "
              f"{ErrorCode(p.error_code).name}: {p.error_message or ''}".rstrip(": "))
    return 1 if failed else 0

"""``pybroker reassign-partitions``: kafka-reassign-partitions.sh with Kafka's JSON formats.

``--generate`` proposes a placement of some topics on a broker list (to add or drain brokers),
``--execute`` starts a plan (optionally throttled), ``--verify`` reports progress and removes the
throttles once every move is done, ``--cancel`` reverts the moves still in progress, ``--list``
shows them. A plan is checked in full (partitions, brokers, duplicates) before anything changes.
"""
import json

from pybroker.controller.placement import assign_replicas
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode
from pybroker.tools.wire import (ALTER_REASSIGNMENTS, INCREMENTAL_ALTER_CONFIGS, LIST_REASSIGNMENTS, Client,
                                 KafkaError, ToolError)

ATTEMPTS = 3  # requests retried after NOT_CONTROLLER (the controller moved)
TOPIC, BROKER = 2, 4
SET, DELETE = 0, 1
LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LEADER_REPLICAS, FOLLOWER_REPLICAS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"


def run(args) -> int:
    with Client(args.bootstrap_server, args.command_timeout_ms) as client:
        if args.generate:
            return generate(client, args)
        if args.list:
            return list_moves(client)
        plan = read_plan(args.reassignment_json_file)
        if args.execute:
            return execute(client, args, plan)
        if args.verify:
            return verify(client, args, plan)
        return cancel(client, args, plan)


# ---- plans ----------------------------------------------------------------------------------

def _load_json(path: str, what: str):
    if not path:
        raise ToolError(f"this action needs {what}")
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ToolError(f"{path} is not valid JSON: {exc}") from None


def read_plan(path: str) -> dict:
    """{(topic, partition): [replicas]} from Kafka's reassignment JSON, checked for form."""
    doc = _load_json(path, "--reassignment-json-file")
    try:
        entries = doc["partitions"]
        plan = {}
        for e in entries:
            key, replicas = (str(e["topic"]), int(e["partition"])), [int(b) for b in e["replicas"]]
            if key in plan:
                raise ToolError(f"the reassignment JSON names partition {key[0]}-{key[1]} more than once")
            if len(set(replicas)) != len(replicas):
                raise ToolError(f"partition {key[0]}-{key[1]}: the replica list {replicas} has duplicates")
            if not replicas:
                raise ToolError(f"partition {key[0]}-{key[1]}: the replica list is empty")
            dirs = e.get("log_dirs")
            if dirs is not None and (len(dirs) != len(replicas) or any(d != "any" for d in dirs)):
                raise ToolError(f"partition {key[0]}-{key[1]}: moving replicas between log dirs is not supported "
                                "(log_dirs must be \"any\")")
            plan[key] = replicas
    except (KeyError, TypeError, ValueError) as exc:
        raise ToolError(f"{path}: expected {{\"version\":1,\"partitions\":[{{\"topic\":...,\"partition\":...,"
                        f"\"replicas\":[...]}}]}} ({exc!r})") from None
    if not plan:
        raise ToolError("the partition reassignment list is empty")
    return plan


def plan_json(assignment: dict) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(assignment.items())]}, separators=(",", ":"))


def current_assignment(client: Client, topics) -> dict:
    """{(topic, partition): [replicas]} of ``topics`` from metadata; unknown topics are left out."""
    resp = client.metadata(sorted(set(topics)))
    return {(t.name, p.partition_index): list(p.replica_nodes)
            for t in resp.topics if not t.error_code for p in t.partitions}


def check_plan(client: Client, plan: dict) -> dict:
    """The current assignment of the plan's topics; raises naming every missing partition or broker."""
    current = current_assignment(client, {t for t, _ in plan})
    missing = sorted(k for k in plan if k not in current)
    if missing:
        raise ToolError("the plan names partitions that do not exist: " + ", ".join(f"{t}-{p}" for t, p in missing))
    unknown = sorted({b for r in plan.values() for b in r} - set(client.brokers))
    if unknown:
        raise ToolError(f"the plan names unknown broker ids: {', '.join(map(str, unknown))} "
                        f"(brokers: {', '.join(map(str, sorted(client.brokers)))})")
    return current


# ---- controller requests --------------------------------------------------------------------

def to_controller(client: Client, request):
    for attempt in range(ATTEMPTS):
        conn = client.controller_conn()
        resp = conn.request(request)
        if resp.error_code == ErrorCode.NOT_CONTROLLER and attempt + 1 < ATTEMPTS:
            client.metadata([])
            continue
        if resp.error_code:
            raise KafkaError(resp.error_code, resp.error_message, "reassignment")
        return resp


def ongoing(client: Client) -> dict:
    """{(topic, partition): (replicas, adding, removing)} of the moves in progress."""
    resp = to_controller(client, REQUESTS[LIST_REASSIGNMENTS](timeout_ms=int(client.timeout * 1000), topics=None))
    return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in resp.topics for p in t.partitions}


def alter(client: Client, changes: dict) -> dict:
    """AlterPartitionReassignments: {(topic, partition): (error, message)}."""
    api = REQUESTS[ALTER_REASSIGNMENTS]
    topics: dict = {}
    for (t, p), replicas in sorted(changes.items()):
        topics.setdefault(t, []).append(api.ReassignablePartition(partition_index=p, replicas=replicas))
    resp = to_controller(client, api(timeout_ms=int(client.timeout * 1000), topics=[
        api.ReassignableTopic(name=t, partitions=ps) for t, ps in topics.items()]))
    return {(t.name, p.partition_index): (p.error_code, p.error_message) for t in resp.responses for p in t.partitions}


def _names(keys) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(keys))


def _error(code: int, message) -> str:
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = f"ERROR_{code}"
    return f"{name}: {message}" if message else name


# ---- throttles ------------------------------------------------------------------------------

def alter_configs(client: Client, conn, resource_type: int, name: str, changes: dict) -> None:
    api = REQUESTS[INCREMENTAL_ALTER_CONFIGS]
    req = api(validate_only=False, resources=[api.AlterConfigsResource(
        resource_type=resource_type, resource_name=name, configs=[
            api.AlterableConfig(name=k, config_operation=DELETE if v is None else SET, value=v)
            for k, v in changes.items()])])
    for r in conn.request(req).responses:
        if r.error_code:
            raise KafkaError(r.error_code, r.error_message, f"configs of {name}")


def set_throttles(client: Client, plan: dict, current: dict, rate: int) -> None:
    """Kafka's throttles: the moving partitions' current replicas as leaders, the new ones as followers,
    and the rate on every broker that takes part."""
    leaders: dict = {}
    followers: dict = {}
    for (t, p), target in plan.items():
        leaders.setdefault(t, []).extend(f"{p}:{b}" for b in current[(t, p)])
        followers.setdefault(t, []).extend(f"{p}:{b}" for b in target if b not in current[(t, p)])
    for t in sorted(leaders):
        alter_configs(client, client.any_conn(), TOPIC, t,
                      {LEADER_REPLICAS: ",".join(leaders[t]), FOLLOWER_REPLICAS: ",".join(followers[t]) or None})
    brokers = sorted({b for k in plan for b in plan[k] + current[k]})
    for b in brokers:
        alter_configs(client, client.node_conn(b), BROKER, str(b), {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)})
    print(f"The inter-broker throttle limit was set to {rate} B/s")


def clear_throttles(client: Client, topics) -> None:
    brokers = sorted(client.brokers)
    for b in brokers:
        alter_configs(client, client.node_conn(b), BROKER, str(b), {LEADER_RATE: None, FOLLOWER_RATE: None})
    print(f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}")
    for t in sorted(topics):
        alter_configs(client, client.any_conn(), TOPIC, t, {LEADER_REPLICAS: None, FOLLOWER_REPLICAS: None})
        print(f"Clearing topic-level throttles on topic {t}")


# ---- actions --------------------------------------------------------------------------------

def generate(client: Client, args) -> int:
    doc = _load_json(args.topics_to_move_json_file, "--topics-to-move-json-file")
    try:
        topics = [str(t["topic"]) for t in doc["topics"]]
    except (KeyError, TypeError) as exc:
        raise ToolError(f"{args.topics_to_move_json_file}: expected {{\"topics\":[{{\"topic\":...}}],\"version\":1}} "
                        f"({exc!r})") from None
    if not args.broker_list:
        raise ToolError("--generate needs --broker-list")
    try:
        brokers = sorted({int(b) for b in args.broker_list.split(",") if b.strip()})
    except ValueError:
        raise ToolError(f"--broker-list must be broker ids separated by commas, got {args.broker_list!r}") from None
    current = current_assignment(client, topics)
    unknown_topics = sorted(set(topics) - {t for t, _ in current})
    if unknown_topics:
        raise ToolError(f"unknown topics: {', '.join(unknown_topics)}")
    unknown = sorted(set(brokers) - set(client.brokers))
    if unknown:
        raise ToolError(f"--broker-list names unknown broker ids: {', '.join(map(str, unknown))}")
    proposed = {}
    for t in sorted(set(topics)):
        parts = sorted(p for (name, p) in current if name == t)
        rf = len(current[(t, parts[0])])
        if rf > len(brokers):
            raise ToolError(f"topic {t} has replication factor {rf}, more than the {len(brokers)} brokers listed")
        for p, replicas in assign_replicas(brokers, len(parts), rf).items():
            proposed[(t, p)] = replicas
    print("Current partition replica assignment")
    print(plan_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(plan_json(proposed))
    return 0


def execute(client: Client, args, plan: dict) -> int:
    current = check_plan(client, plan)
    moving = ongoing(client)
    if moving and not args.additional:
        raise ToolError("cannot execute because there is an existing partition reassignment "
                        f"({_names(moving)}); use --additional to add this plan to it")
    print("Current partition replica assignment\n")
    print(plan_json({k: current[k] for k in plan}))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    if args.throttle is not None and args.throttle >= 0:
        set_throttles(client, plan, current, args.throttle)
        print("Warning: You must run --verify periodically, until the reassignment completes, "
              "to ensure the throttle is removed.")
    results = alter(client, plan)
    started = [k for k, (code, _) in results.items() if code == 0]
    failed = {k: v for k, v in results.items() if v[0] != 0}
    if started:
        print(f"Successfully started partition reassignments for {_names(started)}")
    if failed:
        print("Error reassigning partition(s):")
        for (t, p), (code, message) in sorted(failed.items()):
            print(f"{t}-{p}: {_error(code, message)}")
        if started:
            print(f"The other moves started. To revert them: pybroker reassign-partitions --cancel "
                  f"--bootstrap-server {args.bootstrap_server} --reassignment-json-file {args.reassignment_json_file}")
        return 1
    return 0


def verify(client: Client, args, plan: dict) -> int:
    current = current_assignment(client, {t for t, _ in plan})
    moving = ongoing(client)
    print("Status of partition reassignment:")
    done, differ = True, False
    for (t, p), target in sorted(plan.items()):
        if (t, p) in moving:
            print(f"Reassignment of partition {t}-{p} is still in progress.")
            done = False
        elif current.get((t, p)) == target:
            print(f"Reassignment of partition {t}-{p} is completed.")
        else:
            have = ",".join(map(str, current.get((t, p), []))) or "(no such partition)"
            print(f"There is no active reassignment of partition {t}-{p}, but replica set is {have} "
                  f"rather than {','.join(map(str, target))}.")
            differ = True
    if done and not args.preserve_throttles:
        clear_throttles(client, {t for t, _ in plan})
    return 1 if differ else 0


def cancel(client: Client, args, plan: dict) -> int:
    moving = ongoing(client)
    active = [k for k in plan if k in moving]
    results = alter(client, {k: None for k in active}) if active else {}
    cancelled = [k for k, (code, _) in results.items() if code == 0]
    if cancelled:
        print(f"Successfully cancelled partition reassignments for: {_names(cancelled)}")
    if not active:
        print("None of the specified partition reassignments are active.")
    failed = {k: v for k, v in results.items() if v[0] != 0}
    for (t, p), (code, message) in sorted(failed.items()):
        print(f"Error cancelling the reassignment of {t}-{p}: {_error(code, message)}")
    if not args.preserve_throttles:
        clear_throttles(client, {t for t, _ in plan})
    return 1 if failed else 0


def list_moves(client: Client) -> int:
    moving = ongoing(client)
    if not moving:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for (t, p), (replicas, adding, removing) in sorted(moving.items()):
        print(f"{t}-{p}: replicas: {','.join(map(str, replicas))}. adding: {','.join(map(str, adding))}. "
              f"removing: {','.join(map(str, removing))}.")
    return 0

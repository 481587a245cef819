"""``pybroker log-dirs --describe``: kafka-log-dirs.sh's report, the same JSON document
({"version":1,"brokers":[{"broker":1,"logDirs":[...]}]}) after the same two status lines."""
import json

from pybroker.protocol.errors import ErrorCode
from pybroker.tools.describe import describe_cluster, describe_log_dirs
from pybroker.tools.wire import Client, ToolError


def _ids(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ToolError(f"--broker-list must be broker ids separated by commas, got {text!r}") from None


def _error_name(code: int) -> str | None:
    if not code:
        return None
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"ERROR_{code}"


def log_dir_entry(result, topics: set | None) -> dict:
    """One log dir as kafka-log-dirs prints it, keeping only ``topics`` when given."""
    partitions = [{"partition": f"{t.name}-{p.partition_index}", "size": p.partition_size,
                   "offsetLag": p.offset_lag, "isFuture": p.is_future_key}
                  for t in result.topics if topics is None or t.name in topics for p in t.partitions]
    return {"logDir": result.log_dir, "error": _error_name(result.error_code), "partitions": partitions}


def run(args) -> int:
    wanted = _ids(args.broker_list)
    topics = {t.strip() for t in args.topic_list.split(",") if t.strip()} if args.topic_list else None
    with Client(args.bootstrap_server, args.command_timeout_ms) as client:
        live = sorted(describe_cluster(client).brokers)
        if wanted is not None:
            missing = [b for b in wanted if b not in live]
            if missing:
                raise ToolError(f"the given brokers do not exist from --broker-list: "
                                f"{','.join(map(str, missing))}; current brokers: {','.join(map(str, live))}")
        brokers = wanted if wanted is not None else live
        print("Querying brokers for log directories information")
        report = [{"broker": b, "logDirs": [log_dir_entry(r, topics) for r in describe_log_dirs(client, b)]}
                  for b in brokers]
        print(f"Received log directory information from brokers {','.join(map(str, brokers))}")
        print(json.dumps({"version": 1, "brokers": report}))
    return 0

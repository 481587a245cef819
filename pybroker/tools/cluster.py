"""``pybroker cluster --describe``: one view of a cluster: its id and controller, each live broker
(address, rack, partitions it leads and hosts, log dir sizes from DescribeLogDirs), brokers that
replica lists name but that are not live, and the under-replicated and unavailable partition counts."""
import json

from pybroker.tools.describe import describe_cluster, describe_log_dirs
from pybroker.tools.log_dirs import _error_name
from pybroker.tools.partition_health import is_unavailable, is_under_replicated
from pybroker.tools.wire import Client, ToolError


def report(client: Client) -> dict:
    view = describe_cluster(client)
    partitions = [p for t in client.metadata(None).topics for p in t.partitions]
    live = set(view.brokers)
    brokers = []
    for b, (host, port, rack) in sorted(view.brokers.items()):
        entry = {"id": b, "host": host, "port": port, "rack": rack, "controller": b == view.controller_id,
                 "leaderPartitions": sum(p.leader_id == b for p in partitions),
                 "replicas": sum(b in p.replica_nodes for p in partitions), "logDirs": [], "logDirsError": None}
        try:
            for r in describe_log_dirs(client, b):
                entry["logDirs"].append({
                    "logDir": r.log_dir, "error": _error_name(r.error_code),
                    "partitions": sum(len(t.partitions) for t in r.topics),
                    "size": sum(p.partition_size for t in r.topics for p in t.partitions),
                    "totalBytes": getattr(r, "total_bytes", -1), "usableBytes": getattr(r, "usable_bytes", -1)})
        except ToolError as exc:  # one unreachable broker must not hide the rest of the view
            entry["logDirsError"] = str(exc)
        brokers.append(entry)
    named = {r for p in partitions for r in p.replica_nodes} - live
    return {"clusterId": view.cluster_id, "controller": view.controller_id, "brokers": brokers,
            "offlineBrokers": [{"id": b, "replicas": sum(b in p.replica_nodes for p in partitions)}
                               for b in sorted(named)],
            "partitions": len(partitions),
            "underReplicatedPartitions": sum(map(is_under_replicated, partitions)),
            "unavailablePartitions": sum(is_unavailable(p, live) for p in partitions)}


def human(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024


def render(r: dict) -> str:
    lines = [f"Cluster ID: {r['clusterId']}",
             f"Controller: {r['controller'] if r['controller'] >= 0 else 'none'}",
             f"Brokers: {len(r['brokers'])} live" + (f", {len(r['offlineBrokers'])} not live"
                                                     if r["offlineBrokers"] else ""),
             f"Partitions: {r['partitions']}, under-replicated: {r['underReplicatedPartitions']}, "
             f"unavailable: {r['unavailablePartitions']}"]
    for b in r["brokers"]:
        role = " (controller)" if b["controller"] else ""
        lines += ["", f"Broker {b['id']}{role} at {b['host']}:{b['port']}, rack: {b['rack'] or 'none'}",
                  f"    leads {b['leaderPartitions']} partitions, hosts {b['replicas']} replicas"]
        for d in b["logDirs"]:
            text = f"    log dir {d['logDir']}: {d['partitions']} partitions, {human(d['size'])}"
            if d["usableBytes"] >= 0:
                text += f"; volume {human(d['usableBytes'])} free of {human(d['totalBytes'])}"
            lines.append(text + (f"; error {d['error']}" if d["error"] else ""))
        if b["logDirsError"]:
            lines.append(f"    log dirs unknown: {b['logDirsError']}")
    for b in r["offlineBrokers"]:
        lines += ["", f"Broker {b['id']}: not live; a replica of {b['replicas']} partitions"]
    return "\n".join(lines)


def run(args) -> int:
    with Client(args.bootstrap_server, args.command_timeout_ms) as client:
        r = report(client)
    print(json.dumps(r) if args.json else render(r))
    return 0

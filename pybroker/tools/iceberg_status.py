"""``pybroker iceberg status``: how far each topic's Iceberg table is behind the topic.

The view of ``kafka-consumer-groups --describe`` with the table in the consumer's place: for every
topic whose ``iceberg.mode`` is not ``disabled`` (topic list and DescribeConfigs from the brokers)
and each of its partitions, the table's progress (the next offset its snapshot summary holds), the
partition's last stable offset (a read_committed end offset), the lag in offsets, and the lag in
seconds: now minus the timestamp of the first committed record the table does not hold yet. Per
topic, the DLQ table's row count when it exists.

The catalog is the brokers': their server.properties (``--broker-config``, read as a broker reads
its iceberg.* keys and first log dir) or the explicit catalog options, which win over the file.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

from pybroker.iceberg.settings import CATALOG_TYPES, IcebergSettings, from_broker_config

BROKER_DEFAULT_LOG_DIR = "./pybroker-data"  # the broker's log dir when neither log.dirs nor log.dir is set
POLL_MS = 200
FETCH_BYTES = 65536  # per partition: only the first record after the table's progress is wanted
HEADER = ["TOPIC", "PARTITION", "TABLE-OFFSET", "END-OFFSET", "LAG", "LAG-SECONDS"]
TOPIC_HEADER = ["TOPIC", "MODE", "TABLE", "DLQ-TABLE", "DLQ-ROWS"]


def add_parser(sub) -> None:
    from pybroker.tools import _property, _runner
    p = sub.add_parser("iceberg", help="topics as Iceberg tables: how far each table is behind its topic")
    cmds = p.add_subparsers(dest="iceberg_command", required=True)
    s = cmds.add_parser("status", help="per partition: the table's offset, the topic's end offset and the lag",
                        description="For each topic with iceberg.mode set and each partition: the next offset "
                                    "the table holds, the last stable offset, the lag in offsets and in seconds "
                                    "(age of the first record not in the table); and each DLQ table's rows.")
    s.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    s.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties for the connections: TLS (PEM truststore/keystore) and "
                        "SASL (sasl.mechanism, sasl.jaas.config)")
    s.add_argument("--broker-config", metavar="FILE",
                   help="a broker's server.properties: its iceberg.* keys and first log dir name the catalog")
    s.add_argument("--catalog-type", choices=CATALOG_TYPES, help="default: the broker config's, else sql")
    s.add_argument("--catalog-uri", metavar="URI", help="e.g. sqlite:///DATA/iceberg/catalog.db or a REST URL")
    s.add_argument("--warehouse", metavar="URI", help="e.g. file://DATA/iceberg/warehouse")
    s.add_argument("--namespace", help="the tables' namespace (default: the broker config's, else kafka)")
    s.add_argument("--catalog-property", type=_property, action="append", default=[], metavar="KEY=VALUE",
                   help="a pyiceberg catalog property (credential, token, s3.*, ...); repeatable")
    s.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    s.add_argument("--command-timeout-ms", type=int, default=30000, metavar="MS",
                   help="timeout for each broker request, and for reading the first records (default 30000)")
    s.set_defaults(func=_runner("iceberg_status"))


def run(args) -> int:
    from pybroker.client import KafkaError
    from pybroker.tools.wire import ToolError
    settings = catalog_settings(args)
    try:
        doc = status(args, settings)
    except KafkaError as exc:
        raise ToolError(str(exc)) from None
    print(json.dumps(doc) if args.json else render(doc))
    return 0


# ---- settings ----------------------------------------------------------------------------------

def catalog_settings(args) -> IcebergSettings:
    """The broker config's settings (or the defaults), with the explicit options over them."""
    from pybroker.tools.wire import ToolError
    if args.broker_config:
        settings = broker_file_settings(args.broker_config)
    elif args.catalog_uri:
        settings = IcebergSettings()
    else:
        raise ToolError("give --broker-config (a broker's server.properties) or --catalog-uri")
    explicit = {"catalog_type": args.catalog_type, "catalog_uri": args.catalog_uri, "warehouse": args.warehouse,
                "namespace": args.namespace}
    settings = dataclasses.replace(settings, **{k: v for k, v in explicit.items() if v is not None})
    if args.catalog_property:
        settings = dataclasses.replace(settings, catalog_properties={**settings.catalog_properties,
                                                                     **dict(args.catalog_property)})
    return settings


def broker_file_settings(path: str) -> IcebergSettings:
    from pybroker.properties import ConfigError, read_properties_file
    from pybroker.tools.wire import ToolError
    try:
        raw = {k: v for k, v, _ in read_properties_file(path)}
    except ConfigError as exc:
        raise ToolError(f"--broker-config {path}: {exc}") from None
    dirs = [d.strip() for d in raw.get("log.dirs", raw.get("log.dir", BROKER_DEFAULT_LOG_DIR)).split(",")]
    dirs = [d for d in dirs if d]
    if not dirs:
        raise ToolError(f"--broker-config {path}: log.dirs names no directory")
    try:
        return from_broker_config(raw, dirs[0])
    except ValueError as exc:
        raise ToolError(f"--broker-config {path}: {exc}") from None


def client_conf(args) -> dict:
    """Admin/consumer settings: the bootstrap list, the timeouts, and --command-config's security keys."""
    from pybroker.tools.wire import command_client_conf
    return command_client_conf(args.bootstrap_server, args.command_config, args.command_timeout_ms,
                               "pybroker-iceberg-status")


# ---- gathering -----------------------------------------------------------------------------------

def status(args, settings: IcebergSettings) -> dict:
    from pybroker.client import AdminClient, Consumer, TopicPartition
    conf = client_conf(args)
    with AdminClient(conf) as admin:
        topics = iceberg_topics(admin)
    if not topics:
        return {"namespace": settings.namespace, "topics": []}
    tables = read_tables(settings, sorted(topics))  # before the end offsets: progress never passes them
    tps = [TopicPartition(t, p) for t in sorted(topics) for p in topics[t]["partitions"]]
    consumer = Consumer({**conf, "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "max.partition.fetch.bytes": FETCH_BYTES})
    try:
        ends = consumer.end_offsets(tps)
        now = time.time()
        starts = consumer.beginning_offsets(tps)
        froms = {}  # the first offset each partition's table lacks, where there is lag
        for tp in tps:
            progress = tables[tp.topic]["progress"].get(tp.partition)
            begin = progress if progress is not None else starts[tp]
            if ends[tp] > begin:
                froms[tp] = begin
        stamps = first_timestamps(consumer, froms, ends, args.command_timeout_ms / 1000)
    finally:
        consumer.close(autocommit=False)
    out = []
    for topic in sorted(topics):
        t = tables[topic]
        rows = []
        for p in topics[topic]["partitions"]:
            tp = TopicPartition(topic, p)
            progress = t["progress"].get(p)
            lag = max(0, ends[tp] - (progress if progress is not None else starts[tp]))
            rows.append({"partition": p, "table_offset": progress, "end_offset": ends[tp], "lag": lag,
                         "lag_seconds": lag_seconds(tp, froms, stamps, now)})
        out.append({"topic": topic, "mode": topics[topic]["mode"], "table": t["table"], "table_exists": t["exists"],
                    "dlq_table": t["dlq_table"], "dlq_rows": t["dlq_rows"], "partitions": rows})
    return {"namespace": settings.namespace, "topics": out}


def lag_seconds(tp, froms: dict, stamps: dict, now: float) -> float | None:
    """0 when caught up (or only aborted records and markers are left); None when the record was not read."""
    if tp not in froms:
        return 0.0
    if tp not in stamps:
        return None
    stamp = stamps[tp]
    return 0.0 if stamp is None else round(max(0.0, now - stamp / 1000), 3)


def iceberg_topics(admin) -> dict:
    """{topic: {"mode", "partitions"}} of the topics with iceberg.mode set."""
    from pybroker.client import ConfigResource, KafkaErrors
    meta = admin.list_topics()
    names = sorted(n for n, t in meta.topics.items() if not t.internal and not t.error)
    if not names:
        return {}
    try:
        configs = admin.describe_configs([ConfigResource("topic", n) for n in names])
    except KafkaErrors as exc:  # topics deleted since the listing
        configs = exc.results
    out = {}
    for res, values in configs.items():
        mode = (values.get("iceberg.mode") or "disabled").strip()
        if mode != "disabled":
            out[res.name] = {"mode": mode, "partitions": sorted(meta.topics[res.name].partitions)}
    return out


def read_tables(settings: IcebergSettings, topics: list[str]) -> dict:
    """{topic: {"table", "exists", "progress", "dlq_table", "dlq_rows"}} from the catalog."""
    from pybroker.tools.wire import ToolError
    out = {}
    for topic in topics:
        out[topic] = {"table": ".".join(_ident(settings, topic)), "exists": False, "progress": {},
                      "dlq_table": ".".join(_ident(settings, topic, dlq=True)), "dlq_rows": None}
    if not topics:
        return out
    catalog = _open(settings)
    if catalog is None:
        return out
    from pybroker.iceberg.catalog import read_progress
    try:
        for topic in topics:
            table = _load(catalog, _ident(settings, topic))
            if table is not None:
                out[topic].update(exists=True, progress=read_progress(table))
            dlq = _load(catalog, _ident(settings, topic, dlq=True))
            if dlq is not None:
                out[topic]["dlq_rows"] = row_count(dlq)
    except Exception as exc:  # pyiceberg's and its catalogs' own errors: the catalog cannot be read
        raise ToolError(f"catalog {settings.catalog_uri}: {type(exc).__name__}: {exc}") from None
    return out


def _ident(settings: IcebergSettings, topic: str, dlq: bool = False) -> tuple[str, str]:
    from pybroker.iceberg.catalog import identifier
    return identifier(settings, topic, dlq)


def _open(settings: IcebergSettings):
    """The catalog, or None for a SQLite catalog whose database does not exist yet (no broker has opened it):
    a status must not create one."""
    from pybroker.iceberg.catalog import open_catalog
    from pybroker.tools.wire import ToolError
    uri = settings.catalog_uri
    if settings.catalog_type == "sql" and uri.startswith("sqlite:///") and not os.path.exists(uri[len("sqlite:///"):]):
        print(f"pybroker iceberg status: no catalog database at {uri[len('sqlite:///'):]} yet: no tables",
              file=sys.stderr)
        return None
    try:
        return open_catalog(settings)
    except Exception as exc:  # a bad URI, an unreachable REST catalog, missing credentials...
        raise ToolError(f"catalog {uri}: {type(exc).__name__}: {exc}") from None


def _load(catalog, ident):
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
    try:
        return catalog.load_table(ident)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def row_count(table) -> int:
    """Rows of the current snapshot: its summary's total, or a count of the data files' records."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return 0
    total = snapshot.summary.get("total-records") if snapshot.summary is not None else None
    return int(total) if total is not None else table.scan().count()


def first_timestamps(consumer, froms: dict, ends: dict, timeout_s: float) -> dict:
    """{tp: timestamp ms} of the first committed record at or after ``froms[tp]`` and below ``ends[tp]``;
    None when there is none (only aborted records or markers). Partitions not read in time are left out."""
    found: dict = {}
    if not froms:
        return found
    from pybroker.client import TopicPartition
    consumer.assign(list(froms))
    for tp, offset in froms.items():
        consumer.seek(tp, offset)
    waiting = set(froms)
    deadline = time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        for r in consumer.poll(timeout_ms=POLL_MS):
            tp = TopicPartition(r.topic, r.partition)
            if tp in waiting and r.offset >= froms[tp]:
                found[tp] = r.timestamp if r.offset < ends[tp] else None
                waiting.discard(tp)
                consumer.pause([tp])
        for tp in list(waiting):  # read_committed skipped what is left below the end: nothing committed waits
            if consumer.position(tp) >= ends[tp]:
                found[tp] = None
                waiting.discard(tp)
    return found


# ---- output ----------------------------------------------------------------------------------------

def render(doc: dict) -> str:
    if not doc["topics"]:
        return "No topic has iceberg.mode set."
    rows, topic_rows = [], []
    for t in doc["topics"]:
        for p in t["partitions"]:
            rows.append([t["topic"], p["partition"], _dash(p["table_offset"]), p["end_offset"], p["lag"],
                         _seconds(p["lag_seconds"])])
        topic_rows.append([t["topic"], t["mode"], t["table"] if t["table_exists"] else f"{t['table']} (not yet)",
                           t["dlq_table"] if t["dlq_rows"] is not None else "-", _dash(t["dlq_rows"])])
    return "\n".join(["", *_table(HEADER, rows), "", *_table(TOPIC_HEADER, topic_rows)])


def _table(header: list, rows: list) -> list[str]:
    """Left-aligned columns as wide as their widest cell, one space apart (the last unpadded)."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return [" ".join(str(c).ljust(w) for c, w in zip(r[:-1], widths)) + " " + str(r[-1]) for r in [header, *rows]]


def _dash(value) -> str:
    return "-" if value is None else str(value)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return "0" if value == 0 else f"{value:.3f}"

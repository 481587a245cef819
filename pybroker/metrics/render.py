"""Prometheus text exposition (format 0.0.4) of a broker, computed at scrape time.

Names follow what the Prometheus JMX exporter's usual Kafka rules make of Kafka's MBeans
(``kafka.server<type=BrokerTopicMetrics, name=MessagesInPerSec, topic=orders><>Count`` →
``kafka_server_brokertopicmetrics_messagesinpersec_total{topic="orders"}``; a ``Value`` attribute
becomes a gauge without suffix). All-topic totals carry no ``topic`` label. Request times are
real histograms (``_bucket``/``_sum``/``_count``, milliseconds) rather than the exporter's
percentile gauges. Consumer-group lag uses kafka-lag-exporter's names. Gauges are read from the
replica manager, controller and group coordinator here, never maintained on the request path.
"""
import time

from pybroker.version import __version__
from pybroker.metrics.counters import TIME_BUCKETS_MS, Histogram
from pybroker.metrics.process import process_stats
from pybroker.protocol import API_NAMES

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

TOPIC_SERIES = (  # (Kafka MBean name, TopicCounters field, help)
    ("MessagesInPerSec", "messages_in", "Records appended by produce requests (leader appends)."),
    ("BytesInPerSec", "bytes_in", "Record-batch bytes appended by produce requests."),
    ("BytesOutPerSec", "bytes_out", "Record-batch bytes returned to consumer fetches."),
    ("ReplicationBytesOutPerSec", "replication_bytes_out", "Record-batch bytes returned to follower fetches."),
    ("FailedProduceRequestsPerSec", "failed_produce", "Partitions of produce requests answered with an error."),
    ("FailedFetchRequestsPerSec", "failed_fetch", "Partitions of fetch requests answered with an error."),
    ("TotalProduceRequestsPerSec", "produce_requests", "Partitions of produce requests."),
    ("TotalFetchRequestsPerSec", "fetch_requests", "Partitions of fetch requests."),
)
TIME_SERIES = (("TotalTimeMs", "total"), ("RequestQueueTimeMs", None), ("LocalTimeMs", "local"),
               ("RemoteTimeMs", "remote"), ("ResponseSendTimeMs", "send"), ("RequestBytes", "size"))
_TIME_HELP = {
    "TotalTimeMs": "From the request's frame being complete to its response's last byte written.",
    "RequestQueueTimeMs": "Always 0: a request is handled as soon as its frame is complete.",
    "LocalTimeMs": "Time in the request's handler.",
    "RemoteTimeMs": "Time waiting after the handler: long polls, acks=all, flushes.",
    "ResponseSendTimeMs": "From the response being ready to its last byte written.",
    "RequestBytes": "Request sizes in bytes.",
}


def _escape(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(value) -> str:
    if isinstance(value, int):
        return str(value)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class Exposition:
    """Collects families in order; ``text()`` renders them."""

    def __init__(self):
        self._lines = []

    def family(self, name: str, kind: str, help_text: str, samples) -> None:
        """``samples``: iterable of (labels dict, value); a family with no samples is left out."""
        lines = [f"{name}{_labels(labels)} {_number(value)}" for labels, value in samples]
        if lines:
            self._lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *lines]

    def histogram(self, name: str, help_text: str, series) -> None:
        """``series``: iterable of (labels dict, Histogram)."""
        lines = []
        for labels, h in series:
            for le, n in h.cumulative():
                lines.append(f"{name}_bucket{_labels({**labels, 'le': le if le == '+Inf' else _number(le)})} {n}")
            lines.append(f"{name}_sum{_labels(labels)} {_number(h.sum)}")
            lines.append(f"{name}_count{_labels(labels)} {h.count}")
        if lines:
            self._lines += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram", *lines]

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


def render(services, ready: bool, servers, extra=()) -> str:
    """The exposition of a broker's typed services (pybroker/services.py), its readiness and its listeners;
    ``extra``: more (name, kind, help, samples) families (the Iceberg translation's)."""
    out = Exposition()
    m = services.metrics
    _retire_deleted(services, m)
    out.family("pybroker_build_info", "gauge", "pybroker's version.", [({"version": __version__}, 1)])
    out.family("pybroker_ready", "gauge", "1 once the broker serves clients (as /health).",
               [({}, 1 if ready else 0)])
    _topics(out, m)
    _requests(out, m)
    if services.replicas is not None:
        _replicas(out, services, m)
        _logs(out, services)
    _fetch_sessions(out, services)
    _cleaner(out, services)
    _controller(out, services)
    if services.coordinator is not None:
        _groups(out, services)
    _network(out, servers)
    for name, kind, help_text, samples in extra:
        out.family(name, kind, help_text, samples)
    _process(out, m)
    return out.text()


def _retire_deleted(services, m) -> None:
    if services.control is None:
        return
    topics = services.control.topics
    for name in [t for t in m.topics if t not in topics]:
        m.retire(name)


def _topics(out, m) -> None:
    totals = m.totals()
    topics = sorted(m.topics.items())
    for mbean, field, help_text in TOPIC_SERIES:
        samples = [({}, getattr(totals, field))]
        samples += [({"topic": name}, getattr(c, field)) for name, c in topics]
        out.family(f"kafka_server_brokertopicmetrics_{mbean.lower()}_total", "counter", help_text, samples)


def _requests(out, m) -> None:
    apis = sorted((API_NAMES.get(key, str(key)), api) for key, api in m.apis.items())
    out.family("kafka_network_requestmetrics_requestspersec_total", "counter",
               "Requests answered (or dropped, acks=0), per API and version.",
               [({"request": name, "version": v}, n) for name, api in apis for v, n in sorted(api.versions.items())])
    for mbean, field in TIME_SERIES:
        if field is None:  # no request queue: every request observed as 0
            series = []
            for name, api in apis:
                h = Histogram(TIME_BUCKETS_MS)
                h.counts[0] = api.total.count
                series.append(({"request": name}, h))
        else:
            series = [({"request": name}, getattr(api, field)) for name, api in apis]
        out.histogram(f"kafka_network_requestmetrics_{mbean.lower()}", _TIME_HELP[mbean], series)


def _fetch_sessions(out, services) -> None:
    """Kafka's FetchSessionCache MBeans (KIP-227)."""
    cache = services.fetch_sessions
    out.family("kafka_server_fetchsessioncache_numincrementalfetchsessions", "gauge",
               "Incremental fetch sessions held.", [({}, len(cache))])
    out.family("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached", "gauge",
               "Partitions held by the incremental fetch sessions.", [({}, cache.total_partitions)])
    out.family("kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total", "counter",
               "Sessions evicted to make room for others.", [({}, cache.evictions)])


def _replicas(out, services, m) -> None:
    parts = list(services.replicas.partitions.values())
    leaders = [p for p in parts if p.is_leader]
    out.family("kafka_server_replicamanager_partitioncount", "gauge", "Partitions hosted here.",
               [({}, len(parts))])
    out.family("kafka_server_replicamanager_leadercount", "gauge", "Partitions led here.", [({}, len(leaders))])
    out.family("kafka_server_replicamanager_underreplicatedpartitions", "gauge",
               "Partitions led here whose ISR is smaller than their replica set.",
               [({}, sum(1 for p in leaders if len(p.isr) < len(p.replicas)))])
    out.family("kafka_server_replicamanager_underminisrpartitioncount", "gauge",
               "Partitions led here whose ISR is smaller than min.insync.replicas.",
               [({}, sum(1 for p in leaders if len(p.isr) < p.min_isr))])
    out.family("kafka_server_replicamanager_isrshrinkspersec_total", "counter",
               "ISR shrinks written by this broker as leader.", [({}, m.isr_shrinks)])
    out.family("kafka_server_replicamanager_isrexpandspersec_total", "counter",
               "ISR expansions written by this broker as leader.", [({}, m.isr_expands)])


def _logs(out, services) -> None:
    parts = sorted(services.replicas.partitions.values(), key=lambda p: (p.topic, p.index))
    for name, help_text, value in (
            ("size", "Bytes of the partition's log segments.", lambda p: p.log.size),
            ("logstartoffset", "The partition's log start offset.", lambda p: p.log_start_offset),
            ("logendoffset", "The partition's log end offset.", lambda p: p.log_end_offset),
            ("numlogsegments", "Segments of the partition's log.", lambda p: len(p.log.segments))):
        out.family(f"kafka_log_log_{name}", "gauge", help_text,
                   [({"topic": p.topic, "partition": p.index}, value(p)) for p in parts])
    out.family("kafka_cluster_partition_highwatermark", "gauge", "The partition's high watermark here.",
               [({"topic": p.topic, "partition": p.index}, p.high_watermark) for p in parts])


def _cleaner(out, services) -> None:
    cleaner = getattr(services.log_manager, "cleaner", None) if services.log_manager is not None else None
    if cleaner is None:
        return
    last = cleaner.last_stats
    for name, help_text, value in (
            ("logcleaner_max_clean_time_secs", "Seconds the last cleaning took.", last.seconds if last else 0),
            ("logcleaner_cleaner_recopy_percent",
             "Bytes written as a percentage of the bytes the last cleaning rewrote.",
             100.0 * last.bytes_written / last.bytes_cleaned if last and last.bytes_cleaned else 0),
            ("logcleaner_max_buffer_utilization_percent",
             "Keys in the dedupe map at the last cleaning, percent of its capacity.",
             cleaner.buffer_utilization_percent),
            ("logcleanermanager_max_dirty_percent", "Dirty ratio of the log the cleaner last picked, percent.",
             cleaner.max_dirty_percent),
            ("logcleanermanager_time_since_last_run_ms", "Milliseconds since the last cleaning finished.",
             int((time.monotonic() - cleaner.last_run_monotonic) * 1000))):
        out.family(f"kafka_log_{name}", "gauge", help_text, [({}, value)])
    for name, help_text, value in (("runs", "Cleanings finished.", cleaner.runs),
                                   ("read_bytes", "Log bytes the cleaner read.", cleaner.bytes_read),
                                   ("written_bytes", "Bytes the cleaner wrote.", cleaner.bytes_written)):
        out.family(f"pybroker_log_cleaner_{name}_total", "counter", help_text, [({}, value)])


def _controller(out, services) -> None:
    control = services.control
    active = control is not None and control.is_active_controller
    offline = control.offline_partitions() if active else 0  # as Kafka: only the active controller reports these
    out.family("kafka_controller_kafkacontroller_activecontrollercount", "gauge",
               "1 on the active controller.", [({}, 1 if active else 0)])
    out.family("kafka_controller_kafkacontroller_offlinepartitionscount", "gauge",
               "Partitions without a live leader (reported by the active controller).", [({}, offline)])


def _groups(out, services) -> None:
    from pybroker.coordinator.group import (COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE,
                                            STABLE)
    groups = sorted(services.coordinator.groups.values(), key=lambda g: g.group_id)
    live = [g for g in groups if g.state != DEAD]
    prefix = "kafka_coordinator_group_groupmetadatamanager_"
    out.family(prefix + "numgroups", "gauge", "Consumer groups coordinated here.", [({}, len(live))])
    for state in (STABLE, EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, DEAD):
        out.family(prefix + f"numgroups{state.lower()}", "gauge", f"Groups coordinated here in state {state}.",
                   [({}, sum(1 for g in groups if g.state == state))])
    out.family("kafka_consumergroup_members", "gauge", "Members of each group coordinated here.",
               [({"group": g.group_id}, len(g.members)) for g in live])
    offsets = getattr(services.offsets, "offsets", {}) or {}
    committed, lag, max_lag, sum_lag = [], [], [], []
    for group in sorted(offsets):
        worst = total = None
        for (topic, partition), value in sorted(offsets[group].items()):
            labels = {"group": group, "topic": topic, "partition": partition}
            committed.append((labels, value.offset))
            p = services.replicas.partitions.get((topic, partition))
            if p is None:  # a partition hosted elsewhere: its high watermark is not known here
                continue
            n = max(p.high_watermark - value.offset, 0)
            lag.append((labels, n))
            worst = n if worst is None else max(worst, n)
            total = n if total is None else total + n
        if worst is not None:
            max_lag.append(({"group": group}, worst))
            sum_lag.append(({"group": group}, total))
    out.family("kafka_consumergroup_group_offset", "gauge", "A group's committed offset.", committed)
    out.family("kafka_consumergroup_group_lag", "gauge",
               "High watermark minus the committed offset (partitions hosted here).", lag)
    out.family("kafka_consumergroup_group_max_lag", "gauge", "A group's largest partition lag.", max_lag)
    out.family("kafka_consumergroup_group_sum_lag", "gauge", "A group's lag summed over partitions.", sum_lag)


def _network(out, servers) -> None:
    servers = [(s.listener_name, s.stats) for s in servers]
    prefix = "kafka_server_socket_server_metrics_"
    for name, kind, help_text, value in (
            ("connection_count", "gauge", "Open client connections.", lambda s: s.open_connections),
            ("connection_creation_total", "counter", "Connections accepted.", lambda s: s.accepted),
            ("connection_close_total", "counter", "Connections closed.", lambda s: s.accepted - s.open_connections),
            ("incoming_byte_total", "counter", "Bytes received from clients.", lambda s: s.bytes_in),
            ("outgoing_byte_total", "counter", "Bytes sent to clients.", lambda s: s.bytes_out),
            ("request_total", "counter", "Requests received.", lambda s: s.requests)):
        out.family(prefix + name, kind, help_text, [({"listener": ln}, value(st)) for ln, st in servers])


_PROCESS_HELP = {
    "process_cpu_seconds_total": "User and system CPU time spent in seconds.",
    "process_virtual_memory_bytes": "Virtual memory size in bytes.",
    "process_resident_memory_bytes": "Resident memory size in bytes.",
    "process_open_fds": "Number of open file descriptors.",
    "process_max_fds": "Maximum number of open file descriptors.",
    "process_start_time_seconds": "Start time of the process since unix epoch in seconds.",
}


def _process(out, m) -> None:
    for name, value in process_stats().items():
        kind = "counter" if name.endswith("_total") else "gauge"
        out.family(name, kind, _PROCESS_HELP.get(name, name), [({}, value)])
    out.histogram("pybroker_event_loop_lag_seconds", "How late a periodic timer on the event loop fired.",
                  [({}, m.loop_lag)])
    out.family("pybroker_event_loop_lag_last_seconds", "gauge", "The last event-loop lag measured.",
               [({}, m.loop_lag_last)])

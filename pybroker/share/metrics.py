"""The share-partitions led here on ``/metrics``: in-flight and acquired records, acquisitions,
releases, archivals, acknowledgements and lag per (group, topic, partition)."""


def metric_families(partitions) -> list:
    """(name, kind, help, samples) for pybroker/metrics/render.py, from a SharePartitionManager."""
    rows = {k: [] for k in ("in_flight", "acquired", "lag", "acquisitions", "releases", "archivals", "acks")}
    for h in sorted(partitions.held.values(), key=lambda h: (h.key.group_id, h.topic, h.index)):
        sp = h.sp
        if sp is None:
            continue
        labels = {"group": h.key.group_id, "topic": h.topic, "partition": str(h.index)}
        partition = partitions.services.replicas.get(h.topic, h.index)
        end = partition.high_watermark if partition is not None else sp.start_offset
        rows["in_flight"].append((labels, sp.in_flight()))
        rows["acquired"].append((labels, sp.acquired()))
        rows["lag"].append((labels, sp.lag(end)))
        rows["acquisitions"].append((labels, sp.records_acquired))
        rows["releases"].append((labels, sp.records_released))
        rows["archivals"].append((labels, sp.records_archived))
        rows["acks"].append((labels, sp.records_acknowledged))
    return [
        ("pybroker_share_partition_in_flight_records", "gauge",
         "Records between the share-partition's start and end offsets not yet acknowledged or archived.",
         rows["in_flight"]),
        ("pybroker_share_partition_acquired_records", "gauge", "Records held by members under acquisition locks.",
         rows["acquired"]),
        ("pybroker_share_partition_lag", "gauge",
         "Records of the partition the share group has not yet acknowledged or archived.", rows["lag"]),
        ("pybroker_share_partition_acquisitions_total", "counter", "Record deliveries (acquisitions) to members.",
         rows["acquisitions"]),
        ("pybroker_share_partition_releases_total", "counter",
         "Records released back (RELEASE, lock timeout, member gone).", rows["releases"]),
        ("pybroker_share_partition_archivals_total", "counter",
         "Records archived (REJECT, delivery-count limit, never-delivered control or aborted data).",
         rows["archivals"]),
        ("pybroker_share_partition_acknowledged_total", "counter", "Records acknowledged (ACCEPT).",
         rows["acks"]),
    ]

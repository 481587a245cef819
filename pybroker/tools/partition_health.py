"""kafka-topics' partition filters, with Kafka's definitions, over Metadata partitions:

* under-replicated: fewer in-sync replicas than replicas;
* unavailable: no leader, or a leader that is not a live broker;
* under min ISR: no leader, or fewer in-sync replicas than the topic's min.insync.replicas;
* at min ISR: exactly min.insync.replicas in-sync replicas.
"""
from pybroker.protocol import REQUESTS
from pybroker.tools.wire import DESCRIBE_CONFIGS, Client, check

TOPIC_RESOURCE = 2
MIN_ISR = "min.insync.replicas"
FILTERS = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions",
           "at_min_isr_partitions")


def is_under_replicated(p) -> bool:
    return len(p.isr_nodes) < len(p.replica_nodes)


def is_unavailable(p, live: set) -> bool:
    return p.leader_id < 0 or p.leader_id not in live


def is_under_min_isr(p, min_isr: int | None) -> bool:
    return p.leader_id < 0 or (min_isr is not None and len(p.isr_nodes) < min_isr)


def is_at_min_isr(p, min_isr: int | None) -> bool:
    return min_isr is not None and len(p.isr_nodes) == min_isr


def min_isr_of(client: Client, names: list[str]) -> dict[str, int]:
    """Each topic's effective min.insync.replicas (its override or the broker default)."""
    if not names:
        return {}
    api = REQUESTS[DESCRIBE_CONFIGS]
    resp = client.any_conn().request(api(resources=[
        api.DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=n, configuration_keys=[MIN_ISR])
        for n in names], include_synonyms=False))
    out = {}
    for r in resp.results:
        check(r.error_code, r.error_message, f"cannot describe the configs of topic {r.resource_name!r}")
        for c in r.configs:
            if c.name == MIN_ISR and c.value is not None:
                out[r.resource_name] = int(c.value)
    return out


def partition_filter(client: Client, args, topics):
    """The predicate (topic, partition) -> bool of the filter option given, or None for none."""
    chosen = [f for f in FILTERS if getattr(args, f, False)]
    if not chosen:
        return None
    name = chosen[0]
    if name == "under_replicated_partitions":
        return lambda t, p: is_under_replicated(p)
    if name == "unavailable_partitions":
        live = set(client.brokers)  # Metadata names live brokers only
        return lambda t, p: is_unavailable(p, live)
    min_isr = min_isr_of(client, [t.name for t in topics])
    if name == "under_min_isr_partitions":
        return lambda t, p: is_under_min_isr(p, min_isr.get(t.name))
    return lambda t, p: is_at_min_isr(p, min_isr.get(t.name))

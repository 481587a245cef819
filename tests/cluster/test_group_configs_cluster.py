"""Group configs on a three-broker ZooKeeper cluster: set through one broker and described through each
of the others (each asked on its own connection, so its own view answers), kept in ZooKeeper under
/config/groups/<group> in the topic configs' shape, changed from two brokers at once without losing
either change, refused the same way everywhere, and read again by a restarted broker."""
import json
import threading
import uuid

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from pybroker.protocol.messages import REQUESTS
from tests.clientutil import DEADLINE
from tests.kafka_wire import WireClient

GROUP, INVALID_CONFIG = 32, 40
GROUP_CONFIG, DEFAULT_CONFIG = 8, 5
INC, DESC = REQUESTS[44], REQUESTS[32]


def overrides_seen_by(cluster, broker_id: int, group: str) -> dict:
    """{key: value} of the group's overrides as broker ``broker_id`` describes them."""
    req = DESC(resources=[DESC.DescribeConfigsResource(resource_type=GROUP, resource_name=group,
                                                       configuration_keys=None)],
               include_synonyms=False, include_documentation=False)
    with WireClient(cluster.broker(broker_id).port) as w:
        res = w.request(req, 3).results[0]
    assert res.error_code == 0, res.error_message
    return {c.name: c.value for c in res.configs if c.config_source == GROUP_CONFIG}


def alter_through(cluster, broker_id: int, group: str, ops: dict) -> tuple[int, str | None]:
    """IncrementalAlterConfigs sent to one broker: {key: value or None (delete)} -> (error, message)."""
    req = INC(resources=[INC.AlterConfigsResource(resource_type=GROUP, resource_name=group, configs=[
        INC.AlterableConfig(name=k, config_operation=0 if v is not None else 1, value=v) for k, v in ops.items()])],
        validate_only=False)
    with WireClient(cluster.broker(broker_id).port) as w:
        r = w.request(req, 1).responses[0]
    return r.error_code, r.error_message


def wait_everywhere(cluster, group: str, expected: dict) -> None:
    for broker_id in sorted(cluster.brokers):
        cluster.wait_for(lambda: overrides_seen_by(cluster, broker_id, group) == expected, DEADLINE,
                         f"broker {broker_id} to see the overrides {expected} of {group}")


def test_group_configs_set_through_one_broker_are_seen_by_every_broker(shared_cluster):
    cluster = shared_cluster
    group = f"cluster-group-{uuid.uuid4().hex[:8]}"
    ad = AdminClient({"bootstrap.servers": cluster.bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.record.lock.duration.ms", "40000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    ad.incremental_alter_configs([res])[res].result(DEADLINE)
    wanted = {"share.record.lock.duration.ms": "40000", "share.auto.offset.reset": "earliest"}
    wait_everywhere(cluster, group, wanted)
    data, _ = cluster.zk().get(f"/config/groups/{group}")
    assert json.loads(data) == {"version": 1, "config": wanted}

    assert alter_through(cluster, 1, group, {"share.isolation.level": "read_committed"}) == (0, None)
    wanted["share.isolation.level"] = "read_committed"
    wait_everywhere(cluster, group, wanted)
    assert alter_through(cluster, 3, group, {"share.auto.offset.reset": None}) == (0, None)
    del wanted["share.auto.offset.reset"]
    wait_everywhere(cluster, group, wanted)

    code, message = alter_through(cluster, 2, group, {"share.record.lock.duration.ms": "999999"})
    assert code == INVALID_CONFIG and "group.share.max.record.lock.duration.ms" in message
    code, message = alter_through(cluster, 2, group, {"share.nope": "1"})
    assert (code, message) == (INVALID_CONFIG, "Unknown group config name: share.nope")

    # two brokers change the same group at once: the version-checked writes keep both changes
    results = {}
    threads = [threading.Thread(target=lambda i=i, key=key, value=value: results.__setitem__(
        i, alter_through(cluster, i, group, {key: value})))
        for i, key, value in ((1, "consumer.session.timeout.ms", "50000"), (2, "share.session.timeout.ms", "55000"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    assert results == {1: (0, None), 2: (0, None)}
    wanted.update({"consumer.session.timeout.ms": "50000", "share.session.timeout.ms": "55000"})
    wait_everywhere(cluster, group, wanted)

    cluster.restart(2)  # a broker that starts reads every group's overrides before it serves
    assert overrides_seen_by(cluster, 2, group) == wanted

    assert alter_through(cluster, 2, group, {k: None for k in wanted}) == (0, None)
    wait_everywhere(cluster, group, {})
    assert not cluster.zk().exists(f"/config/groups/{group}")  # a group without overrides has no znode

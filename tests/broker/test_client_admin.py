"""AdminClient / AsyncAdminClient against a real broker, cross-checked with confluent-kafka."""
import asyncio
import time
import warnings

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient as CKAdmin

from pybroker.client import (EARLIEST, LATEST, AdminClient, AsyncAdminClient, ConfigResource, KafkaError,
                             NewTopic, OffsetAndMetadata, TopicPartition)
from pybroker.client.errors import KafkaErrors
from pybroker.client.runner import LoopThread

DEADLINE = 30
BASE_TS = int(time.time() * 1000) - 3_600_000  # recent: retention must not delete the records


def wait_until(pred, what, timeout=DEADLINE):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def admin(broker):
    with AdminClient({"bootstrap.servers": broker.bootstrap}) as a:
        yield a


def produce_confluent(broker, topic, count, partition=0, base_ts=None):
    base_ts = BASE_TS if base_ts is None else base_ts
    p = CKProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(count):
        p.produce(topic, value=b"v%d" % i, partition=partition, timestamp=base_ts + 10 * i)
    assert p.flush(DEADLINE) == 0


def test_topics(broker, admin):
    admin.create_topics([NewTopic("alpha", 3, config={"retention.ms": 123456}), NewTopic("beta", 1)])
    md = admin.list_topics()
    assert {"alpha", "beta"} <= set(md.topics) and md.controller_id in md.brokers
    assert sorted(md.topics["alpha"].partitions) == [0, 1, 2]
    # another client sees what we created
    ck = CKAdmin({"bootstrap.servers": broker.bootstrap})
    seen = ck.list_topics(timeout=DEADLINE).topics
    assert len(seen["alpha"].partitions) == 3 and "beta" in seen

    with pytest.raises(KafkaErrors) as info:
        admin.create_topics([NewTopic("alpha", 1), NewTopic("gamma", 2)])
    assert info.value.errors["alpha"].name == "TOPIC_ALREADY_EXISTS" and set(info.value.errors) == {"alpha"}
    assert "gamma" in info.value.results
    admin.create_topics([NewTopic("dry", 1)], validate_only=True)
    assert "dry" not in admin.list_topics().topics
    with pytest.raises(KafkaErrors) as info:
        admin.create_topics([NewTopic("bad-config", 1, config={"retention.ms": "soon"})])
    assert info.value.errors["bad-config"].name == "INVALID_CONFIG"

    described = admin.describe_topics(["alpha", "gamma"])
    assert sorted(described["gamma"].partitions) == [0, 1]
    with pytest.raises(KafkaErrors) as info:
        admin.describe_topics(["alpha", "nope"])
    assert info.value.errors["nope"].name == "UNKNOWN_TOPIC_OR_PARTITION" and "alpha" in info.value.results

    admin.create_partitions({"beta": 4})
    assert sorted(admin.describe_topics(["beta"])["beta"].partitions) == [0, 1, 2, 3]
    wait_until(lambda: len(ck.list_topics("beta", timeout=DEADLINE).topics["beta"].partitions) == 4,
               "confluent to see 4 partitions")
    with pytest.raises(KafkaErrors) as info:
        admin.create_partitions({"beta": 2})  # shrinking is refused
    assert info.value.errors["beta"].name == "INVALID_PARTITIONS"

    admin.delete_topics(["beta", "gamma"])
    assert not {"beta", "gamma"} & set(admin.list_topics().topics)
    wait_until(lambda: "beta" not in ck.list_topics(timeout=DEADLINE).topics, "confluent to see the delete")
    start = time.monotonic()
    with pytest.raises(KafkaErrors) as info:
        admin.delete_topics(["never-was"])
    assert info.value.errors["never-was"].name == "UNKNOWN_TOPIC_OR_PARTITION"
    assert time.monotonic() - start < 10  # not retried until the deadline


def test_describe_configs(admin):
    admin.create_topics([NewTopic("conf", 1, config={"retention.ms": "7200000", "max.message.bytes": "500000"})])
    res = ConfigResource("topic", "conf")
    configs = admin.describe_configs([res])[res]
    assert configs["retention.ms"] == "7200000" and configs["max.message.bytes"] == "500000"
    assert "segment.bytes" in configs  # defaults are listed too
    overrides = admin.describe_configs([res], include_defaults=False)[res]
    assert overrides == {"retention.ms": "7200000", "max.message.bytes": "500000"}
    node = admin.list_topics().controller_id
    broker_res = ConfigResource("broker", str(node))
    assert "log.dirs" in admin.describe_configs([broker_res])[broker_res]
    with pytest.raises(KafkaErrors) as info:
        admin.describe_configs([ConfigResource("topic", "missing"), res])
    assert info.value.errors[ConfigResource("topic", "missing")].name == "UNKNOWN_TOPIC_OR_PARTITION"
    assert res in info.value.results


def test_offsets_and_records(broker, admin):
    admin.create_topics([NewTopic("off", 2)])
    produce_confluent(broker, "off", 10, partition=0)
    tp0, tp1 = TopicPartition("off", 0), TopicPartition("off", 1)
    got = admin.list_offsets({tp0: EARLIEST, tp1: EARLIEST})
    assert got[tp0].offset == 0 and got[tp1].offset == 0
    got = admin.list_offsets({tp0: LATEST, ("off", 1): LATEST})
    assert got[tp0].offset == 10 and got[tp1].offset == 0
    by_time = admin.list_offsets({tp0: BASE_TS + 35})[tp0]
    assert by_time.offset == 4 and by_time.timestamp == BASE_TS + 40
    assert admin.list_offsets({tp0: BASE_TS + 10**9})[tp0].offset == -1  # after every record

    ck = CKConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm"})
    try:
        assert ck.get_watermark_offsets(CKTopicPartition("off", 0), timeout=DEADLINE) == (0, 10)
        [found] = ck.offsets_for_times([CKTopicPartition("off", 0, BASE_TS + 35)], timeout=DEADLINE)
        assert found.offset == by_time.offset
        assert admin.delete_records({tp0: 3, tp1: -1}) == {tp0: 3, tp1: 0}
        assert admin.list_offsets({tp0: EARLIEST})[tp0].offset == 3
        assert ck.get_watermark_offsets(CKTopicPartition("off", 0), timeout=DEADLINE) == (3, 10)
    finally:
        ck.close()
    with pytest.raises(KafkaErrors) as info:
        admin.delete_records({tp0: 50})
    assert info.value.errors[tp0].name == "OFFSET_OUT_OF_RANGE"
    with pytest.raises(KafkaErrors) as info:
        admin.list_offsets({TopicPartition("nope", 0): LATEST, TopicPartition("off", 9): LATEST, tp0: LATEST})
    assert {e.name for e in info.value.errors.values()} == {"UNKNOWN_TOPIC_OR_PARTITION"}
    assert info.value.results[tp0].offset == 10


def test_groups(broker, admin):
    admin.create_topics([NewTopic("grp", 2)])
    produce_confluent(broker, "grp", 6, partition=0)
    produce_confluent(broker, "grp", 4, partition=1)
    ck = CKConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "g1", "client.id": "ck-member",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    ck.subscribe(["grp"])
    seen = []
    end = time.monotonic() + DEADLINE
    while len(seen) < 10 and time.monotonic() < end:
        m = ck.poll(0.5)
        if m is not None and not m.error():
            seen.append(m)
    assert len(seen) == 10
    ck.commit(asynchronous=False)
    try:
        assert "g1" in {g.group_id for g in admin.list_groups()}
        listing = next(g for g in admin.list_groups() if g.group_id == "g1")
        assert listing.protocol_type == "consumer"
        desc = admin.describe_groups(["g1"])["g1"]
        assert desc.state == "Stable" and desc.protocol_type == "consumer" and len(desc.members) == 1
        member = desc.members[0]
        assert member.client_id == "ck-member"
        assert sorted(member.assignment) == [TopicPartition("grp", 0), TopicPartition("grp", 1)]
        offsets = admin.list_group_offsets("g1")
        assert {tp: (o.offset, o.metadata) for tp, o in offsets.items()} == {
            TopicPartition("grp", 0): (6, ""), TopicPartition("grp", 1): (4, "")}
        assert all(isinstance(o, OffsetAndMetadata) for o in offsets.values())
        assert admin.list_group_offsets("g1", [TopicPartition("grp", 1)]) == {
            TopicPartition("grp", 1): offsets[TopicPartition("grp", 1)]}
        with pytest.raises(KafkaErrors) as info:
            admin.delete_groups(["g1"])  # it still has a member
        assert info.value.errors["g1"].name == "NON_EMPTY_GROUP"
    finally:
        ck.close()
    wait_until(lambda: admin.describe_groups(["g1"])["g1"].state == "Empty", "the group to empty")
    admin.delete_groups(["g1"])
    assert "g1" not in {g.group_id for g in admin.list_groups()}
    assert admin.list_group_offsets("g1") == {}
    with pytest.raises(KafkaErrors) as info:
        admin.delete_groups(["g1", "never"])
    assert info.value.errors["never"].name == "GROUP_ID_NOT_FOUND"
    assert admin.describe_groups(["unknown-group"])["unknown-group"].state == "Dead"
    # confluent sees the deletion too
    ck_admin = CKAdmin({"bootstrap.servers": broker.bootstrap})
    listed = ck_admin.list_consumer_groups().result(DEADLINE)
    assert "g1" not in {g.group_id for g in listed.valid}


def test_async_admin(broker):
    async def main():
        async with AsyncAdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
            await admin.create_topics([NewTopic("async-t", 2)])
            assert sorted((await admin.describe_topics(["async-t"]))["async-t"].partitions) == [0, 1]
            assert "async-t" in (await admin.list_topics()).topics
            await admin.create_partitions({"async-t": 3})
            res = ConfigResource("topic", "async-t")
            assert "retention.ms" in (await admin.describe_configs([res]))[res]
            tp = TopicPartition("async-t", 2)
            assert (await admin.list_offsets({tp: LATEST}))[tp].offset == 0
            assert (await admin.delete_records({tp: 0})) == {tp: 0}
            assert isinstance(await admin.list_groups(), list)
            assert (await admin.list_group_offsets("nobody")) == {}
            with pytest.raises(KafkaErrors):
                await admin.delete_groups(["nobody"])
            assert (await admin.describe_groups(["nobody"]))["nobody"].state == "Dead"
            await admin.delete_topics(["async-t"])
            assert "async-t" not in (await admin.list_topics()).topics
    asyncio.run(asyncio.wait_for(main(), 60))


def test_sync_admin_on_own_loop_and_errors(broker):
    loop = LoopThread()
    try:
        a = AdminClient({"bootstrap.servers": broker.bootstrap}, loop=loop)
        a.create_topics(["by-name"])
        assert "by-name" in a.list_topics().topics
        a.close()
        with pytest.raises(KafkaError):
            a.list_topics()  # closed
    finally:
        loop.stop()
    with pytest.raises(KafkaError) as info:
        AdminClient({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    assert info.value.name == "INVALID_CONFIG"


# ---- altering configs (broker side: AlterConfigs and IncrementalAlterConfigs) ----------------

def topic_overrides(admin, name):
    res = ConfigResource("topic", name)
    return admin.describe_configs([res], include_defaults=False)[res]


def produce_one(broker, topic, size):
    """The delivery error name of one record of ``size`` bytes (None when delivered)."""
    p = CKProducer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 10_000_000,
                    "message.send.max.retries": 0})
    errors = []
    p.produce(topic, value=b"x" * size, on_delivery=lambda err, m: errors.append(err))
    assert p.flush(DEADLINE) == 0
    return errors[0].name() if errors[0] is not None else None


def test_alter_configs(broker_factory):
    broker = broker_factory()
    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("cfg", 1, config={"retention.ms": "3600000"})])
        res = ConfigResource("topic", "cfg")
        admin.alter_configs({res: {"max.message.bytes": 2000, "retention.bytes": "1000000"}})
        assert topic_overrides(admin, "cfg") == {"retention.ms": "3600000", "max.message.bytes": "2000",
                                                 "retention.bytes": "1000000"}
        # the live log enforces the new limit at once, for every client
        assert produce_one(broker, "cfg", 5000) == "MSG_SIZE_TOO_LARGE"
        assert produce_one(broker, "cfg", 500) is None
        admin.alter_configs({res: {"retention.bytes": None}})  # None: back to the default
        assert topic_overrides(admin, "cfg") == {"retention.ms": "3600000", "max.message.bytes": "2000"}
        admin.alter_configs({res: {"retention.ms": "1"}}, validate_only=True)
        assert topic_overrides(admin, "cfg")["retention.ms"] == "3600000"

        with pytest.raises(KafkaErrors) as info:
            admin.alter_configs({res: {"no.such.config": "1"}})
        assert info.value.errors[res].name == "INVALID_CONFIG" and "no.such.config" in info.value.errors[res].message
        with pytest.raises(KafkaErrors) as info:
            admin.alter_configs({res: {"retention.ms": "forever"}})
        assert info.value.errors[res].name == "INVALID_CONFIG"
        with pytest.raises(KafkaErrors) as info:
            admin.alter_configs({ConfigResource("topic", "nope"): {"retention.ms": "1"}})
        assert info.value.errors[ConfigResource("topic", "nope")].name == "UNKNOWN_TOPIC_OR_PARTITION"
        node = admin.list_topics().controller_id
        broker_res = ConfigResource("broker", str(node))
        with pytest.raises(KafkaErrors) as info:
            admin.alter_configs({broker_res: {"log.dirs": "/elsewhere"}})  # static
        err = info.value.errors[broker_res]
        assert err.name == "INVALID_REQUEST" and "dynamically" in err.message
        assert topic_overrides(admin, "cfg") == {"retention.ms": "3600000", "max.message.bytes": "2000"}

    # confluent-kafka: incremental and legacy AlterConfigs
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    from confluent_kafka.admin import ConfigResource as CKResource
    from confluent_kafka.admin import ResourceType
    ck = CKAdmin({"bootstrap.servers": broker.bootstrap})
    inc = CKResource(ResourceType.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("segment.ms", "600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND)])
    for fut in ck.incremental_alter_configs([inc]).values():
        fut.result(DEADLINE)
    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        assert topic_overrides(admin, "cfg") == {"max.message.bytes": "2000", "segment.ms": "600000",
                                                 "cleanup.policy": "delete"}
    bad = CKResource(ResourceType.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND)])
    with pytest.raises(Exception) as info:
        for fut in ck.incremental_alter_configs([bad]).values():
            fut.result(DEADLINE)
    assert "INVALID_REQUEST" in str(info.value) or "append" in str(info.value).lower()
    broker_inc = CKResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET)])  # static
    with pytest.raises(Exception) as info:
        for fut in ck.incremental_alter_configs([broker_inc]).values():
            fut.result(DEADLINE)
    assert "dynamically" in str(info.value)
    # legacy AlterConfigs replaces the whole set of overrides
    legacy = CKResource(ResourceType.TOPIC, "cfg", set_config={"max.message.bytes": "3000",
                                                               "retention.ms": "7200000"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # confluent steers users to the incremental API
        futures = ck.alter_configs([legacy])
    for fut in futures.values():
        fut.result(DEADLINE)
    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        assert topic_overrides(admin, "cfg") == {"max.message.bytes": "3000", "retention.ms": "7200000"}

    # a restart keeps the overrides, and the reopened log applies them
    broker.stop()
    broker.start()
    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        assert topic_overrides(admin, "cfg") == {"max.message.bytes": "3000", "retention.ms": "7200000"}
        assert produce_one(broker, "cfg", 5000) == "MSG_SIZE_TOO_LARGE"
        assert produce_one(broker, "cfg", 1000) is None


def test_alter_configs_async(broker):
    async def main():
        async with AsyncAdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
            await admin.create_topics([NewTopic("acfg", 2)])
            res = ConfigResource("topic", "acfg")
            await admin.alter_configs({res: {"retention.ms": 86400000, "segment.bytes": 1 << 20}})
            got = (await admin.describe_configs([res], include_defaults=False))[res]
            assert got == {"retention.ms": "86400000", "segment.bytes": "1048576"}
            # against a broker without IncrementalAlterConfigs the client merges into AlterConfigs
            conn = await admin.cluster.any_connection()
            del conn.api_versions[44]
            await admin.alter_configs({res: {"segment.bytes": None, "max.message.bytes": "4000"}})
            got = (await admin.describe_configs([res], include_defaults=False))[res]
            assert got == {"retention.ms": "86400000", "max.message.bytes": "4000"}
    asyncio.run(asyncio.wait_for(main(), 60))

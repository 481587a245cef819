"""The request sequences the differential tests send to Kafka 3.8 and to pybroker (tests/differential.py).

Each case uses its own topic, group and transactional-id names, so that every case can run on the same
pair of brokers in any order. ``SINGLE`` runs against one broker per side, ``CLUSTER`` against three.
"""
import uuid

from pybroker.protocol import REQUESTS
from tests.differential import (Batch, Case, Do, Fn, LeaderEpoch, Prev, Step, TopicId, controller, coordinator,
                                create, first, follower, init_transactional, leader, move_leader, outsider, produce,
                                producer_ids_ready, wait, wait_coordinator)

ZERO = uuid.UUID(int=0)
UNKNOWN_ID = uuid.UUID("5b1e0d1c-0000-4000-8000-00000000d1ff")
PROTOCOL = [{"name": "range", "metadata": b"\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00"}]
TOPIC, BROKER = 2, 4  # config resource types


# ---- request builders: one per API, the fields a case varies as arguments -----------------------------

def metadata(topics, auto=False, **kw):
    return Step(3, {"topics": None if topics is None else [{"name": t} for t in topics],
                    "allow_auto_topic_creation": auto}, **kw)


def metadata_by_id(topic_id, **kw):
    return Step(3, {"topics": [{"topic_id": topic_id, "name": None}], "allow_auto_topic_creation": False}, **kw)


def produce_step(topic, partition, batch, acks=-1, txn=None, **kw):
    return Step(0, {"transactional_id": txn, "acks": acks, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]},
                to=kw.pop("to", leader(topic, partition)), **kw)


def fetch(topic, partition, offset, epoch=-1, topic_id=None, isolation=0, **kw):
    return Step(1, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                    "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": topic, "topic_id": topic_id or TopicId(topic), "partitions": [
                        {"partition": partition, "current_leader_epoch": epoch, "fetch_offset": offset,
                         "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                    "forgotten_topics_data": [], "rack_id": ""}, **kw)


def list_offsets(topic, partition, timestamp, epoch=-1, isolation=0, **kw):
    return Step(2, {"replica_id": -1, "isolation_level": isolation, "topics": [{"name": topic, "partitions": [
        {"partition_index": partition, "current_leader_epoch": epoch, "timestamp": timestamp}]}]}, **kw)


def leader_epoch_end(topic, partition, leader_epoch, current=-1, **kw):
    return Step(23, {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
        {"partition": partition, "current_leader_epoch": current, "leader_epoch": leader_epoch}]}]}, **kw)


def commit(group, topic, partition, offset, generation=-1, member="", **kw):
    return Step(8, {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
                    "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                        {"partition_index": partition, "committed_offset": offset, "committed_leader_epoch": -1,
                         "committed_metadata": "m"}]}]}, to=coordinator(group), **kw)


def offset_fetch(group, topic=None, partitions=(0,), **kw):
    topics = None if topic is None else [{"name": topic, "partition_indexes": list(partitions)}]
    return Step(9, {"groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}],
                    "require_stable": True}, to=coordinator(group), **kw)


def join(group, member="", session=10000, protocol_type="consumer", protocols=PROTOCOL, **kw):
    return Step(11, {"group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": 10000,
                     "member_id": member, "group_instance_id": None, "protocol_type": protocol_type,
                     "protocols": protocols, "reason": None}, to=kw.pop("to", coordinator(group)), **kw)


def sync(group, generation, member, assignments=(), **kw):
    return Step(14, {"group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": None,
                     "protocol_type": "consumer", "protocol_name": "range",
                     "assignments": [{"member_id": m, "assignment": a} for m, a in assignments]},
                to=coordinator(group), **kw)


def heartbeat(group, generation, member, **kw):
    return Step(12, {"group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": None},
                to=coordinator(group), **kw)


def leave(group, member, **kw):
    return Step(13, {"group_id": group, "members": [{"member_id": member, "group_instance_id": None,
                                                       "reason": None}]}, to=coordinator(group), **kw)


def describe_groups(*groups, **kw):
    return Step(15, {"groups": list(groups), "include_authorized_operations": False},
                to=coordinator(groups[0]), **kw)


def create_topics(topics, validate_only=False, timeout_ms=20000, **kw):
    full = [{"name": t["name"], "num_partitions": t.get("partitions", 1), "replication_factor": t.get("rf", 1),
             "assignments": [{"partition_index": i, "broker_ids": b} for i, b in enumerate(t.get("assign", []))],
             "configs": [{"name": k, "value": v} for k, v in t.get("configs", {}).items()]} for t in topics]
    return Step(19, {"topics": full, "timeout_ms": timeout_ms, "validate_only": validate_only}, to=controller, **kw)


def init_pid(txn=None, timeout_ms=60000, **kw):
    return Step(22, {"transactional_id": txn, "transaction_timeout_ms": timeout_ms, "producer_id": -1,
                     "producer_epoch": -1}, to=coordinator(txn, 1) if txn else kw.pop("to", controller), **kw)


def add_partitions(txn, pid, epoch, topic, partitions=(0,), **kw):
    return Step(24, {"transactions": [{"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
                                       "verify_only": False,
                                       "topics": [{"name": topic, "partitions": list(partitions)}]}],
                     "v3_and_below_transactional_id": txn, "v3_and_below_producer_id": pid,
                     "v3_and_below_producer_epoch": epoch,
                     "v3_and_below_topics": [{"name": topic, "partitions": list(partitions)}]},
                to=coordinator(txn, 1), **kw)


def end_txn(txn, pid, epoch, committed=True, **kw):
    return Step(26, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "committed": committed},
                to=coordinator(txn, 1), **kw)


def configs_of(kind, name, keys=None, **kw):
    return Step(32, {"resources": [{"resource_type": kind, "resource_name": name, "configuration_keys": keys}],
                     "include_synonyms": False, "include_documentation": False}, **kw)


def incremental(kind, name, ops, validate_only=False, **kw):
    return Step(44, {"resources": [{"resource_type": kind, "resource_name": name, "configs": [
        {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}], "validate_only": validate_only}, **kw)


def txn_state(txn, state):
    """A setup action: wait until DescribeTransactions shows ``txn`` in ``state``."""
    def act(env):
        ask = REQUESTS[65](transactional_ids=[txn])
        wait(lambda: env.client(env.coordinator(txn, 1)).request(ask, 0).transaction_states[0].transaction_state
             == state, f"{txn} {state}")
    return act


def quota_applied(entity_type, name):
    """A setup action: wait until DescribeClientQuotas shows a quota of the entity (applied asynchronously)."""
    def act(env):
        ask = REQUESTS[48](components=[REQUESTS[48].ComponentData(entity_type=entity_type, match_type=0, match=name)],
                           strict=True)
        wait(lambda: env.client(first(env)).request(ask, 1).entries, f"the quota of {name}")
    return act


def pid_of(step):
    return Prev(step, "producer_id")


def epoch_of(step):
    return Prev(step, "producer_epoch")


def member_of(step):
    return Prev(step, "member_id")


def generation_of(step):
    return Prev(step, "generation_id")


# ---- the cases ---------------------------------------------------------------------------------------

def t(case: str) -> str:
    return f"d-{case}"


def common_cases() -> list[Case]:
    c = []
    # ApiVersions, Metadata, DescribeCluster, DescribeTopicPartitions
    c.append(Case("api_versions", [Step(18, {"client_software_name": "differential",
                                             "client_software_version": "1.0"})]))
    c.append(Case("api_versions_bad_client_name", [Step(18, {"client_software_name": "bad name!",
                                                             "client_software_version": "1"})]))
    c.append(Case("metadata_no_topics", [metadata([])]))
    c.append(Case("metadata_unknown_topic", [metadata([t("nosuch")])]))
    c.append(Case("metadata_invalid_topic_name", [metadata(["bad name!"])]))
    c.append(Case("metadata_auto_create", [metadata([t("auto")], auto=True),
                                           Do(lambda env: env.wait_topic(t("auto"), 1)),
                                           metadata([t("auto")])]))
    c.append(Case("metadata_unknown_topic_id", [metadata_by_id(UNKNOWN_ID)]))
    c.append(Case("metadata_topic", [Do(create(t("meta"), 3)), metadata([t("meta")]),
                                     metadata_by_id(TopicId(t("meta")))]))
    c.append(Case("describe_cluster", [Step(60, {"include_cluster_authorized_operations": False,
                                                 "endpoint_type": 1})]))
    # Produce
    tp = t("produce")
    c.append(Case("produce", [Do(create(tp)), produce_step(tp, 0, Batch([b"a", b"b"])),
                              produce_step(tp, 0, Batch([(b"k", b"c")])),
                              produce_step(tp, 0, Batch([b"d"]), acks=1),
                              produce_step(tp, 0, Batch([b"e"]), acks=0, compare=False),
                              list_offsets(tp, 0, -1, to=leader(tp))]))
    c.append(Case("produce_unknown_topic", [produce_step(t("nosuch"), 0, Batch([b"a"]), to=first)]))
    c.append(Case("produce_unknown_partition", [Do(create(t("p-part"))),
                                                produce_step(t("p-part"), 7, Batch([b"a"]), to=leader(t("p-part")))]))
    c.append(Case("produce_invalid_acks", [Do(create(t("p-acks"))),
                                           produce_step(t("p-acks"), 0, Batch([b"a"]), acks=2)]))
    c.append(Case("produce_corrupt_crc", [Do(create(t("p-crc"))), produce_step(t("p-crc"), 0, Fn(
        lambda env: (lambda b: b[:17] + b"\0\0\0\0" + b[21:])(Batch([b"a"]).resolve(env))))]))
    c.append(Case("produce_too_large", [Do(create(t("p-large"), configs={"max.message.bytes": 200})),
                                        produce_step(t("p-large"), 0, Batch([b"x" * 400]))]))
    c.append(Case("produce_keyless_to_compacted", [Do(create(t("p-compact"), configs={"cleanup.policy": "compact"})),
                                                    produce_step(t("p-compact"), 0, Batch([b"a", (b"k", b"b")]))]))
    tpi = t("p-idem")
    c.append(Case("produce_idempotent", [
        Do(create(tpi)), Do(producer_ids_ready), init_pid(),
        produce_step(tpi, 0, Batch([b"a"], pid_of(2), epoch_of(2), 0)),
        produce_step(tpi, 0, Batch([b"a"], pid_of(2), epoch_of(2), 0)),    # a duplicate: the same offset
        produce_step(tpi, 0, Batch([b"b"], pid_of(2), epoch_of(2), 5)),    # a gap: out of order
        produce_step(tpi, 0, Batch([b"c"], pid_of(2), 7, 1)),              # a future epoch, sequence not 0
        produce_step(tpi, 0, Batch([b"c"], 987654321, 0, 3)),              # a producer id never seen
        Step(61, {"topics": [{"name": tpi, "partition_indexes": [0, 1]}]}, to=leader(tpi))]))
    c.append(Case("produce_transactional_outside_txn", [
        Do(create(t("p-txn"))), Do(wait_coordinator("d-txn-outside", 1)), Do(init_transactional("d-txn-outside")),
        produce_step(t("p-txn"), 0, Batch([b"a"], pid_of(2), epoch_of(2), 0, transactional=True),
                     txn="d-txn-outside")]))

    # Fetch, ListOffsets, OffsetForLeaderEpoch
    def seeded(name):
        tf = t(name)
        return tf, [Do(create(tf)), Do(produce(tf, 0, [b"a", b"b", b"c"])), Do(produce(tf, 0, [b"d"]))]
    tf, steps = seeded("fetch")
    c.append(Case("fetch", [*steps, fetch(tf, 0, 0, to=leader(tf)), fetch(tf, 0, 3, to=leader(tf)),
                            fetch(tf, 0, 4, to=leader(tf))]))
    tf, steps = seeded("fetch-oor")
    c.append(Case("fetch_out_of_range", [*steps, fetch(tf, 0, 100, to=leader(tf)), fetch(tf, 0, -5, to=leader(tf))]))
    c.append(Case("fetch_unknown_topic_id", [fetch("", 0, 0, topic_id=UNKNOWN_ID)]))
    tf, steps = seeded("fetch-part")
    c.append(Case("fetch_unknown_partition", [*steps, fetch(tf, 9, 0, to=leader(tf))]))
    tf, steps = seeded("fetch-epoch")
    c.append(Case("fetch_future_leader_epoch", [*steps, fetch(tf, 0, 0, epoch=LeaderEpoch(tf, 0, 1), to=leader(tf))]))
    tf, steps = seeded("fetch-v12")
    c.append(Case("fetch_old_version_by_name", [*steps, fetch(tf, 0, 1, version=12, to=leader(tf)),
                                                fetch(t("nosuch"), 0, 0, version=12)]))
    c.append(Case("list_offsets", [
        Do(create(t("lo"))), produce_step(t("lo"), 0, Batch([b"a", b"b"], timestamp=T(1)), compare=False),
        produce_step(t("lo"), 0, Batch([b"c"], timestamp=T(5)), compare=False),
        *[list_offsets(t("lo"), 0, ts, to=leader(t("lo"))) for ts in (-1, -2, -3, T(0), T(2), T(9))],
        list_offsets(t("lo"), 0, -1, isolation=1, to=leader(t("lo"))),
        list_offsets(t("lo"), 0, -1, version=0, to=leader(t("lo")))]))
    c.append(Case("list_offsets_errors", [
        Do(create(t("lo-err"))), list_offsets(t("lo-err"), 4, -1, to=leader(t("lo-err"))),
        list_offsets(t("nosuch"), 0, -1),
        list_offsets(t("lo-err"), 0, -1, epoch=LeaderEpoch(t("lo-err"), 0, 1), to=leader(t("lo-err"))),
        list_offsets(t("lo-err"), 0, -4, to=leader(t("lo-err")))]))
    tf, steps = seeded("ofle")
    c.append(Case("offset_for_leader_epoch", [
        *steps, leader_epoch_end(tf, 0, 0, to=leader(tf)), leader_epoch_end(tf, 0, 5, to=leader(tf)),
        leader_epoch_end(tf, 0, 0, current=LeaderEpoch(tf, 0, 1), to=leader(tf)),
        leader_epoch_end(tf, 3, 0, to=leader(tf)), leader_epoch_end(t("nosuch"), 0, 0)]))

    # classic groups
    g = "d-group"
    tg = t("group")
    life = [Do(create(tg, 2)), Do(wait_coordinator(g)), join(g), join(g, member_of(2)),
            sync(g, generation_of(3), member_of(3), [(member_of(3), b"\x00\x01")])]
    c.append(Case("group_life", [
        *life, heartbeat(g, generation_of(3), member_of(3)), heartbeat(g, 99, member_of(3)),
        heartbeat(g, generation_of(3), "nobody"), commit(g, tg, 0, 5, generation_of(3), member_of(3)),
        commit(g, tg, 0, 6, 99, member_of(3)), commit(g, tg, 0, 6, generation_of(3), "nobody"),
        commit(g, tg, 7, 6, generation_of(3), member_of(3)), offset_fetch(g, tg, (0, 1)), offset_fetch(g),
        describe_groups(g, "d-group-none"),
        Step(16, {"states_filter": [], "types_filter": []}, keep=("error_code",)),
        sync(g, 99, member_of(3)), join(g, member_of(3), protocol_type="connect"),
        leave(g, "nobody"), leave(g, member_of(3)), describe_groups(g),
        Step(42, {"groups_names": [g, "d-group-none"]}, to=coordinator(g)),
        Step(42, {"groups_names": [g]}, to=coordinator(g))]))
    g2 = "d-group-nonempty"
    c.append(Case("group_delete_nonempty", [
        Do(wait_coordinator(g2)), join(g2), join(g2, member_of(1)), Step(42, {"groups_names": [g2]},
                                                                        to=coordinator(g2))]))
    c.append(Case("group_unknown", [
        Do(wait_coordinator("d-group-unknown")), heartbeat("d-group-unknown", 1, "m"),
        sync("d-group-unknown", 1, "m"), leave("d-group-unknown", "m"),
        offset_fetch("d-group-unknown", t("nosuch"), (0,))]))
    c.append(Case("group_join_errors", [
        Do(wait_coordinator("d-group-bad")), join("d-group-bad", session=1), join("", to=first),
        join("d-group-bad", member="never-joined"),
        join("d-group-bad", protocols=[])]))
    tsc = t("standalone")
    c.append(Case("standalone_commit", [
        Do(create(tsc)), Do(wait_coordinator("d-standalone")), commit("d-standalone", tsc, 0, 3),
        commit("d-standalone", t("nosuch"), 0, 3), offset_fetch("d-standalone", tsc, (0, 3)),
        Step(47, {"group_id": "d-standalone", "topics": [{"name": tsc, "partitions": [{"partition_index": 0}]}]},
             to=coordinator("d-standalone")),
        Step(47, {"group_id": "d-nogroup", "topics": [{"name": tsc, "partitions": [{"partition_index": 0}]}]},
             to=coordinator("d-nogroup")),
        offset_fetch("d-standalone", tsc, (0,))]))
    c.append(Case("find_coordinator", [
        Do(wait_coordinator("d-fc")), Step(10, {"key_type": 0, "coordinator_keys": ["d-fc", ""]}),
        Step(10, {"key_type": 5, "coordinator_keys": ["d-fc"]})]))

    # transactions
    x, tx = "d-txn", t("txn")
    begin = [Do(create(tx, 2)), Do(wait_coordinator(x, 1)), Do(wait_coordinator("d-txn-group")),
             Do(init_transactional(x))]
    c.append(Case("transaction_commit", [
        *begin, add_partitions(x, pid_of(3), epoch_of(3), tx, (0,)),
        produce_step(tx, 0, Batch([b"a"], pid_of(3), epoch_of(3), 0, transactional=True), txn=x),
        Step(25, {"transactional_id": x, "producer_id": pid_of(3), "producer_epoch": epoch_of(3),
                  "group_id": "d-txn-group"}, to=coordinator(x, 1)),
        Step(28, {"transactional_id": x, "group_id": "d-txn-group", "producer_id": pid_of(3),
                  "producer_epoch": epoch_of(3), "generation_id": -1, "member_id": "", "group_instance_id": None,
                  "topics": [{"name": tx, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                          "committed_leader_epoch": -1,
                                                          "committed_metadata": ""}]}]},
             to=coordinator("d-txn-group")),
        Step(65, {"transactional_ids": [x, "d-txn-none"]}, to=coordinator(x, 1)),
        list_offsets(tx, 0, -1, isolation=1, to=leader(tx)),
        end_txn(x, pid_of(3), epoch_of(3), True), Do(txn_state(x, "CompleteCommit")),
        end_txn(x, pid_of(3), epoch_of(3), True),                       # a retried commit: answered as done
        end_txn(x, pid_of(3), epoch_of(3), False),                      # an abort after the commit
        Step(66, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}, keep=("error_code",),
             to=coordinator(x, 1))]))
    y = "d-txn-errors"
    c.append(Case("transaction_errors", [
        Do(create(t("txn-e"))), Do(wait_coordinator(y, 1)), Do(wait_coordinator("d-txn-g2")),
        Do(init_transactional(y)),
        end_txn(y, pid_of(3), epoch_of(3), True),                        # nothing ongoing
        end_txn(y, pid_of(3), 7, False),                                 # a wrong epoch
        add_partitions(y, 123456789, 0, t("txn-e")),                     # an unknown producer id
        add_partitions(y, pid_of(3), epoch_of(3), t("nosuch")),          # an unknown topic
        Step(28, {"transactional_id": y, "group_id": "d-txn-g2", "producer_id": pid_of(3), "producer_epoch": 9,
                  "generation_id": -1, "member_id": "", "group_instance_id": None,
                  "topics": [{"name": t("txn-e"), "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                                  "committed_leader_epoch": -1,
                                                                  "committed_metadata": ""}]}]},
             to=coordinator("d-txn-g2")),
        init_pid(y, timeout_ms=10 ** 9),                                  # a timeout above the maximum
        init_pid("", to=first),
        Step(65, {"transactional_ids": ["d-txn-never"]}, to=coordinator(y, 1))]))

    # topics administration
    c.append(Case("create_topics", [
        create_topics([{"name": t("ct"), "partitions": 2, "configs": {"retention.ms": "1000"}}]),
        create_topics([{"name": t("ct")}]),
        create_topics([{"name": t("ct-v"), "partitions": 1}], validate_only=True),
        metadata([t("ct-v")])], loose=("error_message",)))
    c.append(Case("create_topics_invalid", [
        create_topics([{"name": t("ct-p0"), "partitions": 0}]),
        create_topics([{"name": t("ct-pn"), "partitions": -5}]),
        create_topics([{"name": t("ct-rf0"), "rf": 0}]),
        create_topics([{"name": t("ct-rf9"), "rf": 9}]),
        create_topics([{"name": t("ct-cfg"), "configs": {"no.such.config": "1"}}]),
        create_topics([{"name": t("ct-val"), "configs": {"retention.ms": "abc"}}]),
        create_topics([{"name": t("ct-enum"), "configs": {"cleanup.policy": "sometimes"}}]),
        create_topics([{"name": "bad name!"}]),
        create_topics([{"name": "x" * 250}]),
        create_topics([{"name": t("ct-asg"), "partitions": -1, "rf": -1, "assign": [[99]]}], timeout_ms=3000),
        create_topics([{"name": t("ct-both"), "partitions": 2, "assign": [[1]]}]),
        create_topics([{"name": t("ct-dup")}, {"name": t("ct-dup")}])]))
    c.append(Case("delete_topics", [
        Do(create(t("dt"))), Do(create(t("dt-id"))),
        Step(20, {"topics": [{"name": t("dt"), "topic_id": ZERO}, {"name": t("nosuch"), "topic_id": ZERO}],
                  "timeout_ms": 20000}, to=controller),
        Step(20, {"topics": [{"name": None, "topic_id": UNKNOWN_ID}], "timeout_ms": 20000}, to=controller),
        Step(20, {"topics": [{"name": None, "topic_id": TopicId(t("dt-id"))}], "timeout_ms": 20000}, to=controller),
        Step(20, {"topic_names": [t("nosuch")], "timeout_ms": 20000}, version=5, to=controller)]))
    c.append(Case("delete_records", [
        Do(create(t("dr"))), Do(produce(t("dr"), 0, [b"a", b"b", b"c"])),
        Step(21, {"topics": [{"name": t("dr"), "partitions": [{"partition_index": 0, "offset": 2},
                                                               {"partition_index": 5, "offset": 1}]}],
                  "timeout_ms": 10000}, to=leader(t("dr"))),
        Step(21, {"topics": [{"name": t("dr"), "partitions": [{"partition_index": 0, "offset": 9}]}],
                  "timeout_ms": 10000}, to=leader(t("dr"))),
        Step(21, {"topics": [{"name": t("dr"), "partitions": [{"partition_index": 0, "offset": -1}]}],
                  "timeout_ms": 10000}, to=leader(t("dr"))),
        list_offsets(t("dr"), 0, -2, to=leader(t("dr"))),
        fetch(t("dr"), 0, 0, to=leader(t("dr")))]))
    c.append(Case("create_partitions", [
        Do(create(t("cp"), 2)),
        *[Step(37, {"topics": [{"name": name, "count": n, "assignments": None}], "timeout_ms": 20000,
                    "validate_only": v}, to=controller)
          for name, n, v in ((t("cp"), 3, True), (t("cp"), 4, False), (t("cp"), 4, False), (t("cp"), 1, False),
                             (t("nosuch"), 3, False))],
        Step(37, {"topics": [{"name": t("cp"), "count": 6, "assignments": [{"broker_ids": [99]}]}],
                  "timeout_ms": 20000, "validate_only": False}, to=controller)],
        loose=("error_message",)))

    # configs
    tc = t("cfg")
    c.append(Case("describe_configs", [
        Do(create(tc, configs={"retention.ms": 12345})),
        configs_of(TOPIC, tc, ["retention.ms", "cleanup.policy", "min.insync.replicas", "no.such.config"]),
        configs_of(TOPIC, t("nosuch"), ["retention.ms"]), configs_of(TOPIC, "", ["retention.ms"]),
        configs_of(BROKER, "1", ["log.retention.ms", "num.partitions", "message.max.bytes"], to=first),
        configs_of(BROKER, "abc", ["num.partitions"]),
        configs_of(7, "x", None)]))
    c.append(Case("alter_configs", [
        Do(create(t("ac"))),
        Step(33, {"resources": [{"resource_type": TOPIC, "resource_name": t("ac"), "configs": [
            {"name": "retention.ms", "value": "5000"}]}], "validate_only": False}),
        Step(33, {"resources": [{"resource_type": TOPIC, "resource_name": t("ac"), "configs": [
            {"name": "retention.ms", "value": "soon"}]}], "validate_only": False}),
        Step(33, {"resources": [{"resource_type": TOPIC, "resource_name": t("nosuch"), "configs": [
            {"name": "retention.ms", "value": "5000"}]}], "validate_only": False}),
        configs_of(TOPIC, t("ac"), ["retention.ms"])], loose=("error_message",)))
    c.append(Case("incremental_alter_configs", [
        Do(create(t("iac"))),
        incremental(TOPIC, t("iac"), [("retention.ms", 0, "7000"), ("cleanup.policy", 2, "compact")]),
        incremental(TOPIC, t("iac"), [("retention.ms", 2, "1")]),
        incremental(TOPIC, t("iac"), [("no.such.config", 0, "1")]),
        incremental(TOPIC, t("iac"), [("retention.ms", 1, None)], validate_only=True),
        incremental(TOPIC, t("iac"), [("retention.ms", 0, "a"), ("retention.ms", 1, None)]),
        incremental(TOPIC, t("nosuch"), [("retention.ms", 0, "1")]),
        configs_of(TOPIC, t("iac"), ["retention.ms", "cleanup.policy"])], loose=("error_message",)))

    # the rest of the admin APIs
    c.append(Case("describe_log_dirs", [
        Do(create(t("dld"))), Step(35, {"topics": [{"topic": t("dld"), "partitions": [0, 5]}]}, to=leader(t("dld")))]))
    c.append(Case("elect_leaders", [
        Do(create(t("el"))),
        Step(43, {"election_type": 0, "topic_partitions": [{"topic": t("el"), "partitions": [0]}],
                  "timeout_ms": 10000}, to=controller),
        Step(43, {"election_type": 1, "topic_partitions": [{"topic": t("el"), "partitions": [0]}],
                  "timeout_ms": 10000}, to=controller)]))
    c.append(Case("elect_leaders_unknown", [
        Do(create(t("el-u"))),
        Step(43, {"election_type": 0, "topic_partitions": [{"topic": t("el-u"), "partitions": [4]},
                                                           {"topic": t("nosuch"), "partitions": [0]}],
                  "timeout_ms": 10000}, to=controller),
        Step(43, {"election_type": 5, "topic_partitions": [{"topic": t("el-u"), "partitions": [0]}],
                  "timeout_ms": 10000}, to=controller)]))
    c.append(Case("partition_reassignments", [
        Do(create(t("par"))),
        Step(45, {"timeout_ms": 10000, "topics": [{"name": t("nosuch"), "partitions": [
            {"partition_index": 0, "replicas": [1]}]}]}, to=controller),
        Step(45, {"timeout_ms": 10000, "topics": [{"name": t("par"), "partitions": [
            {"partition_index": 0, "replicas": [99]}, {"partition_index": 3, "replicas": [1]}]}]}, to=controller),
        Step(45, {"timeout_ms": 10000, "topics": [{"name": t("par"), "partitions": [
            {"partition_index": 0, "replicas": None}]}]}, to=controller),
        Step(45, {"timeout_ms": 10000, "topics": [{"name": t("par"), "partitions": [
            {"partition_index": 0, "replicas": []}]}]}, to=controller),
        Step(46, {"timeout_ms": 10000, "topics": [{"name": t("par"), "partition_indexes": [0]}]}, to=controller)],
        loose=("error_message",)))
    c.append(Case("client_quotas", [
        Step(49, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "d-quota-user"}],
                               "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}],
                  "validate_only": False}),
        Do(quota_applied("user", "d-quota-user")),
        Step(48, {"components": [{"entity_type": "user", "match_type": 0, "match": "d-quota-user"}],
                  "strict": True}),
        Step(49, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "d-quota-user"}],
                               "ops": [{"key": "no_such_quota", "value": 1.0, "remove": False}]}],
                  "validate_only": False}),
        Step(49, {"entries": [{"entity": [{"entity_type": "nobody", "entity_name": "x"}],
                               "ops": [{"key": "producer_byte_rate", "value": 1.0, "remove": False}]}],
                  "validate_only": False}),
        Step(48, {"components": [{"entity_type": "nobody", "match_type": 0, "match": "x"}], "strict": False}),
        *[Step(49, {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "d-quota-client"}],
                                 "ops": [{"key": "producer_byte_rate", "value": v, "remove": False}]}],
                    "validate_only": True}) for v in (-5.0, 1.5)]],
        loose=("error_message",)))
    c.append(Case("scram_credentials", [
        Step(50, {"users": [{"name": "d-scram-nobody"}]}),
        Step(51, {"deletions": [], "upsertions": [{"name": "d-scram", "mechanism": 1, "iterations": 4096,
                                                   "salt": b"salt", "salted_password": b"p" * 32}]}, to=controller),
        Step(51, {"deletions": [], "upsertions": [{"name": "d-scram-low", "mechanism": 1, "iterations": 1,
                                                   "salt": b"salt", "salted_password": b"p" * 32}]}, to=controller),
        Step(51, {"deletions": [{"name": "d-scram-none", "mechanism": 1}], "upsertions": []}, to=controller),
        Step(50, {"users": [{"name": "d-scram"}]})], loose=("error_message",)))
    c.append(Case("acls_without_authorizer", [
        Step(29, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                  "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}),
        Step(30, {"creations": [{"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
                                 "principal": "User:a", "host": "*", "operation": 3, "permission_type": 3}]}),
        Step(31, {"filters": [{"resource_type_filter": 2, "resource_name_filter": None, "pattern_type_filter": 1,
                               "principal_filter": None, "host_filter": None, "operation": 1,
                               "permission_type": 1}]})]))
    c.append(Case("sasl_handshake_on_plaintext", [Step(17, {"mechanism": "PLAIN"})]))
    c.append(Case("sasl_authenticate_on_plaintext", [Step(36, {"auth_bytes": b"\0user\0secret"})]))
    c.append(Case("describe_producers_errors", [
        Step(61, {"topics": [{"name": t("nosuch"), "partition_indexes": [0]}]})]))
    return c


def T(n: int) -> int:
    """A record timestamp ``n`` seconds after the cases' epoch."""
    from tests.differential import T0
    return T0 + n * 1000


def single_cases() -> list[Case]:
    """Cases for one broker per side (KRaft Kafka with the consumer group protocol on; DescribeTopicPartitions
    is KRaft Kafka's only)."""
    g, tg = "d-cg", t("cg")
    hb = {"group_id": g, "instance_id": None, "rack_id": None, "subscribed_topic_regex": None,
          "server_assignor": None}
    c = []
    c.append(Case("describe_topic_partitions", [
        Do(create(t("dtp"), 3)),
        Step(75, {"topics": [{"name": t("dtp")}, {"name": t("nosuch")}], "response_partition_limit": 2,
                  "cursor": None}),
        Step(75, {"topics": [{"name": t("dtp")}], "response_partition_limit": 100,
                  "cursor": {"topic_name": t("dtp"), "partition_index": 2}})]))

    c.append(Case("consumer_group_heartbeat", [
        Do(create(tg, 2)), Do(wait_coordinator(g)),
        Step(68, {**hb, "member_id": "", "member_epoch": 0, "rebalance_timeout_ms": 10000,
                  "subscribed_topic_names": [tg], "topic_partitions": []}, version=0, to=coordinator(g)),
        Step(68, {**hb, "member_id": member_of(2), "member_epoch": 9, "rebalance_timeout_ms": -1,
                  "subscribed_topic_names": None, "topic_partitions": None}, version=0, to=coordinator(g)),
        Step(68, {**hb, "member_id": "nobody", "member_epoch": 1, "rebalance_timeout_ms": -1,
                  "subscribed_topic_names": None, "topic_partitions": None}, version=0, to=coordinator(g)),
        Step(68, {**hb, "member_id": "", "member_epoch": 0, "rebalance_timeout_ms": 10000,
                  "subscribed_topic_names": None, "topic_partitions": []}, version=0, to=coordinator(g)),
        Step(69, {"group_ids": [g, "d-cg-none"], "include_authorized_operations": False}, to=coordinator(g)),
        Step(68, {**hb, "member_id": member_of(2), "member_epoch": -1, "rebalance_timeout_ms": -1,
                  "subscribed_topic_names": None, "topic_partitions": None}, version=0, to=coordinator(g))],
        loose=("error_message",)))
    return c


def cluster_cases() -> list[Case]:
    """Cases that need several brokers: the partition's replicas and the brokers outside them."""
    def seeded(case):
        """A topic on one broker and a topic on two, each with records: (names, setup steps)."""
        tn, tr = t(case), t(case + "-rf2")
        return tn, tr, [Do(create(tn)), Do(produce(tn, 0, [b"a", b"b"])), Do(create(tr, 1, 2)),
                        Do(produce(tr, 0, [b"a"]))]
    tn, tr, s1 = seeded("nl-produce")
    cases = [Case("not_leader_produce", [*s1, produce_step(tn, 0, Batch([b"x"]), to=outsider(tn)),
                                         produce_step(tr, 0, Batch([b"x"]), to=follower(tr))])]
    tn, tr, s2 = seeded("nl-fetch")
    cases.append(Case("not_leader_fetch", [*s2, fetch(tn, 0, 0, to=outsider(tn)), fetch(tr, 0, 0, to=follower(tr))]))
    tn, tr, s3 = seeded("nl-lo")
    cases.append(Case("not_leader_list_offsets", [*s3, list_offsets(tn, 0, -1, to=outsider(tn)),
                                                  list_offsets(tr, 0, -1, to=follower(tr))]))
    tn, tr, s4 = seeded("nl-ofle")
    cases.append(Case("not_leader_offset_for_leader_epoch", [*s4, leader_epoch_end(tn, 0, 0, to=outsider(tn)),
                                                             leader_epoch_end(tr, 0, 0, to=follower(tr))]))
    tn, tr, s5 = seeded("nl-dr")
    cases.append(Case("not_leader_delete_records", [*s5, Step(21, {"topics": [{"name": tn, "partitions": [
        {"partition_index": 0, "offset": 1}]}], "timeout_ms": 10000}, to=outsider(tn))]))
    tn, tr, s6 = seeded("nl-dp")
    cases.append(Case("follower_describe_producers", [
        *s6, Step(61, {"topics": [{"name": tr, "partition_indexes": [0]}]}, to=follower(tr))]))
    tf = t("fenced")  # its leader moves from broker 1 to 2: epoch 0 becomes stale (FENCED_LEADER_EPOCH)
    cases.append(Case("fenced_leader_epoch", [
        Do(create(tf, 1, 2)), Do(produce(tf, 0, [b"a"])), Do(move_leader(tf, 0, [2, 1])),
        fetch(tf, 0, 0, epoch=LeaderEpoch(tf, 0, -1), to=leader(tf)),
        list_offsets(tf, 0, -1, epoch=LeaderEpoch(tf, 0, -1), to=leader(tf)),
        leader_epoch_end(tf, 0, 0, current=LeaderEpoch(tf, 0, -1), to=leader(tf)),
        fetch(tf, 0, 0, epoch=LeaderEpoch(tf, 0, 1), to=leader(tf)), fetch(tf, 0, 0, to=leader(tf))]))
    return cases + [
        Case("not_coordinator", [
            Do(wait_coordinator("d-nc")),
            join("d-nc", to=lambda env: min(n for n in env.target.nodes if n != env.coordinator("d-nc"))),
            Step(15, {"groups": ["d-nc"], "include_authorized_operations": False},
                 to=lambda env: min(n for n in env.target.nodes if n != env.coordinator("d-nc")))]),
        Case("create_topics_cluster_rf", [
            create_topics([{"name": t("ct-rf3"), "partitions": 2, "rf": 3}]),
            create_topics([{"name": t("ct-rf4"), "rf": 4}]),
            create_topics([{"name": t("ct-asg2"), "partitions": -1, "rf": -1, "assign": [[1, 1]]}]),
            create_topics([{"name": t("ct-asg3"), "partitions": -1, "rf": -1, "assign": [[1, 2], [3]]}]),
            create_topics([{"name": t("ct-isr"), "configs": {"min.insync.replicas": "5"}}])],
            loose=("error_message",)),
    ]


SINGLE = common_cases() + single_cases()
CLUSTER = common_cases() + cluster_cases()

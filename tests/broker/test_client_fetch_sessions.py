"""Our consumer at Fetch v12-17: incremental fetch sessions (KIP-227), topic ids, diverging epochs.

The session's bookkeeping in-process (what a Fetch names, what it forgets, how it recovers); a
real broker behind a byte-counting proxy: our consumer of 1 000 partitions keeps a session and its
steady-state Fetch requests are small; a session the broker refuses (INVALID_FETCH_SESSION_EPOCH)
is replaced by a full fetch; a topic deleted and recreated under a live consumer is fetched by its
new id. The diverging-epoch reaction is driven with a real FetchResponse object.

The cases of the other tiers: tests/unit/test_client_fetch_sessions.py.
"""
import time
import uuid

import pytest

from pybroker.client import AdminClient, Consumer, NewTopic
from tests.kafka_wire import WireClient
from tests.broker.test_fetch_sessions import PARTITIONS, produce, proxied  # noqa: F401 (proxied is a fixture)

DEADLINE = 60
ID_A, ID_B = uuid.uuid4(), uuid.uuid4()


# ---- the session's bookkeeping ------------------------------------------------------------------


# ---- diverging epochs -----------------------------------------------------------------------------


# ---- a real broker ----------------------------------------------------------------------------------

def consumer_conf(port, **extra) -> dict:
    c = {"bootstrap.servers": f"127.0.0.1:{port}", "fetch.max.wait.ms": 100, "enable.auto.commit": False,
         "auto.offset.reset": "earliest"}
    c.update({k.replace("_", "."): v for k, v in extra.items()})
    return c


def poll_until(consumer, predicate, deadline, got):
    while not predicate() and time.monotonic() < deadline:
        got += [(r.topic, r.partition, r.offset) for r in consumer.poll(200)]
    return predicate()


def incremental_session(consumer, topic, partitions, deadline, got):
    """Assign ``partitions`` of ``topic``, read the first record, wait until the session is incremental."""
    consumer.assign([(topic, i, 0) for i in range(partitions)])
    assert poll_until(consumer, lambda: len(got) >= 1, deadline, got)
    session = session_of(consumer)
    assert poll_until(consumer, lambda: session.incremental, deadline, got)
    return session


def session_of(consumer):
    sessions = consumer._async._fetcher._sessions
    assert len(sessions) == 1
    return next(iter(sessions.values()))


def test_our_consumer_of_1000_partitions_keeps_a_session(proxied):
    b, proxy = proxied
    with WireClient(b.port, timeout=DEADLINE) as w:  # a thousand partition directories take a while
        w.create_topic("wide", partitions=PARTITIONS)
        for i in (0, 499, 999):
            produce(w, "wide", i)
    deadline = time.monotonic() + DEADLINE
    got = []
    with Consumer(consumer_conf(proxy.port)) as c:
        c.assign([("wide", i, 0) for i in range(PARTITIONS)])
        assert poll_until(c, lambda: len(got) >= 3, deadline, got)
        assert sorted(got) == [("wide", 0, 0), ("wide", 499, 0), ("wide", 999, 0)]
        settled = len(proxy.fetches())
        while len(proxy.fetches()) < settled + 10 and time.monotonic() < deadline:
            c.poll(200)  # idle: the session's steady state
        with WireClient(b.port) as w:
            produce(w, "wide", 500)
        assert poll_until(c, lambda: len(got) >= 4, deadline, got)
        assert got[3] == ("wide", 500, 0)
        assert session_of(c).incremental and session_of(c).by_id
    fetches = proxy.fetches()
    assert fetches and all(v == 17 for _, v, _, _ in fetches)
    full = max(size for _, _, size, _ in fetches)
    steady = fetches[settled:settled + 10]
    assert full > 20 * PARTITIONS  # the full fetch names every partition
    assert all(req < 200 and resp < 200 for _, _, req, resp in steady), steady  # then only the session
    assert full / max(req for _, _, req, _ in steady) >= 100


def test_refused_session_falls_back_to_a_full_fetch(proxied):
    b, proxy = proxied
    with WireClient(b.port, timeout=DEADLINE) as w:
        w.create_topic("few", partitions=4)
        produce(w, "few", 0)
    deadline = time.monotonic() + DEADLINE
    got = []
    with Consumer(consumer_conf(proxy.port)) as c:
        session = incremental_session(c, "few", 4, deadline, got)
        session.epoch += 1000  # the broker expects another epoch: INVALID_FETCH_SESSION_EPOCH (71)
        with WireClient(b.port) as w:
            produce(w, "few", 3)
        assert poll_until(c, lambda: len(got) >= 2, deadline, got)
        assert got == [("few", 0, 0), ("few", 3, 0)]
        assert poll_until(c, lambda: session.incremental, deadline, got)
    full_sizes = [req for _, _, req, _ in proxy.fetches() if req > 100]
    assert len(full_sizes) >= 2  # the first fetch and the one after the refusal named every partition


def test_recreated_topic_is_fetched_by_its_new_id(broker):
    admin_conf = {"bootstrap.servers": broker.bootstrap}
    with AdminClient(admin_conf) as admin:
        admin.create_topics([NewTopic("again", 1, 1)])
    with WireClient(broker.port) as w:
        produce(w, "again", 0)
    deadline = time.monotonic() + DEADLINE
    got = []
    with Consumer(consumer_conf(broker.port, metadata_max_age_ms=500)) as c:
        c.assign([("again", 0, 0)])
        assert poll_until(c, lambda: len(got) >= 1, deadline, got)
        session = session_of(c)
        old_id = session.partitions[("again", 0)].topic_id
        with AdminClient(admin_conf) as admin:
            admin.delete_topics(["again"])
            admin.create_topics([NewTopic("again", 1, 1)])
        with WireClient(broker.port) as w:
            produce(w, "again", 0)
            produce(w, "again", 0)
        # the new log starts at 0 again: offset 1 is the second record of the new topic
        assert poll_until(c, lambda: ("again", 0, 1) in got, deadline, got)
        assert poll_until(c, lambda: session.partitions and session.partitions[("again", 0)].topic_id != old_id,
                          deadline, got)


@pytest.mark.parametrize("target", ["kafka", "pybroker"])
def test_session_against_each_broker(target, tmp_path):
    """The same consumer against Apache Kafka 3.8 (the oracle: Fetch v16, topic ids) and pybroker:
    the session becomes incremental and records produced later on any partition arrive."""
    from pybroker.client import Producer
    from tests.txn_brokers import start_target
    b = start_target(target, str(tmp_path / target))
    try:
        with AdminClient({"bootstrap.servers": b.bootstrap}) as admin:
            admin.create_topics([NewTopic("spread", 20, 1)])
        deadline = time.monotonic() + DEADLINE
        got = []
        with Producer({"bootstrap.servers": b.bootstrap}) as p, Consumer(consumer_conf(b.port)) as c:
            c.assign([("spread", i, 0) for i in range(20)])
            for round_ in range(3):
                for i in range(round_, 20, 7):
                    p.produce("spread", b"r%d" % round_, partition=i)
                assert p.flush(DEADLINE) == 0
                want = sum(len(range(r, 20, 7)) for r in range(round_ + 1))
                assert poll_until(c, lambda: len(got) >= want, deadline, got)
                session = session_of(c)
                assert poll_until(c, lambda: session.incremental, deadline, got)
            rounds_of = {i: sum(1 for r in range(3) if i in range(r, 20, 7)) for i in range(20)}
            assert sorted(got) == [("spread", i, n) for i in range(20) for n in range(rounds_of[i])]
            assert session.by_id
    finally:
        b.close()


def test_closing_our_consumer_ends_its_session(broker_factory):
    """The broker holds the session while the consumer lives (its FetchSessionCache gauges say so) and
    frees it when the consumer closes, without waiting for an eviction."""
    from tests.cluster import free_ports
    from tests.broker.test_metrics import scrape, series
    metrics_port, = free_ports(1)
    b = broker_factory({"metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    with WireClient(b.port) as w:
        w.create_topic("closing", partitions=4)
        produce(w, "closing", 0)

    def gauge(name):
        return sum(series(scrape(metrics_port), f"kafka_server_fetchsessioncache_{name}").values())
    deadline = time.monotonic() + DEADLINE
    got = []
    with Consumer(consumer_conf(b.port)) as c:
        incremental_session(c, "closing", 4, deadline, got)
        assert (gauge("numincrementalfetchsessions"), gauge("numincrementalfetchpartitionscached")) == (1, 4)
    assert (gauge("numincrementalfetchsessions"), gauge("numincrementalfetchpartitionscached")) == (0, 0)

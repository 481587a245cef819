"""The schema registry in a three-broker cluster: every broker serves reads from its own copy of
``_schemas``, writes sent to a non-primary are forwarded to the primary (elected through ZooKeeper),
and a primary killed with kill -9 while clients register through the other brokers loses no
acknowledged registration: every id stays the same on every broker, ids stay unique, and writes
resume on the new primary."""
import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.cluster import Cluster, free_ports
from tests.registryutil import registry_ready

ELECTION = "/pybroker/schema_registry/primary"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def call(url: str, method: str, path: str, body=None, timeout: float = 10.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers={"Content-Type": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"null")
        except ValueError:
            return exc.code, None


def schema(name: str) -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "cluster",
                       "fields": [{"name": "x", "type": "string"}]})


@pytest.fixture
def registry_cluster(tmp_path, zookeeper):
    """Three brokers, each serving the registry on its own port: (cluster, {broker id: url})."""
    ports = free_ports(3)
    urls = {i: f"http://127.0.0.1:{port}" for i, port in zip((1, 2, 3), ports)}
    cluster = Cluster(tmp_path, 3, zk=zookeeper,
                      overrides={"min.insync.replicas": 2, "default.replication.factor": 3,
                                 "offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0},
                      broker_overrides={i: {"schema.registry.listeners": url} for i, url in urls.items()})
    try:
        for url in urls.values():
            registry_ready(url)
        yield cluster, urls
    finally:
        cluster.close()
        zookeeper.resume()


def primary_url(cluster) -> str | None:
    zk = cluster.zk()
    if not zk.exists(ELECTION):
        return None
    members = sorted(zk.get_children(ELECTION))
    return zk.get(f"{ELECTION}/{members[0]}")[0].decode() if members else None


def wait_lookup(url: str, subject: str, text: str, timeout: float = 20.0) -> dict:
    """The registry at ``url``'s answer to a lookup of ``text`` under ``subject``, once it has it."""
    deadline = time.monotonic() + timeout
    while True:
        status, got = call(url, "POST", f"/subjects/{subject}", {"schema": text})
        if status == 200 or time.monotonic() > deadline:
            assert status == 200, (url, subject, got)
            return got
        time.sleep(0.05)


def test_reads_everywhere_and_writes_forwarded_to_the_primary(registry_cluster):
    cluster, urls = registry_cluster
    Cluster.wait_for(lambda: primary_url(cluster) in urls.values(), 30, "a registry primary")
    primary = primary_url(cluster)
    others = [u for u in urls.values() if u != primary]
    # the topic is replicated to every broker
    Cluster.wait_for(lambda: sorted(cluster.partition_state("_schemas", 0)["isr"]) == [1, 2, 3], 30,
                     "_schemas in sync on every broker")

    ids = {}
    for n, url in enumerate(others):
        status, got = call(url, "POST", f"/subjects/fwd-{n}/versions", {"schema": schema(f"Fwd{n}")})
        assert status == 200, got
        ids[f"fwd-{n}"] = (schema(f"Fwd{n}"), got["id"])
    status, got = call(primary, "POST", "/subjects/direct/versions", {"schema": schema("Direct")})
    assert status == 200, got
    ids["direct"] = (schema("Direct"), got["id"])
    assert len({i for _, i in ids.values()}) == 3

    for url in urls.values():  # every broker answers from its own copy
        for subject, (text, sid) in ids.items():
            assert wait_lookup(url, subject, text)["id"] == sid
        status, got = call(url, "GET", f"/schemas/ids/{ids['direct'][1]}")
        assert status == 200 and json.loads(got["schema"])["name"] == "Direct"


class Registrar(threading.Thread):
    """Registers distinct schemas through one broker, retrying a failed one until it is acknowledged."""

    def __init__(self, name: str, url: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.name_prefix, self.url, self.stop = name, url, stop
        self.acked: dict = {}  # subject -> (schema text, id)
        self.failures = 0

    def run(self):
        n = 0
        while not self.stop.is_set():
            subject, text = f"{self.name_prefix}-{n}", schema(f"{self.name_prefix.replace('-', '_')}_{n}")
            try:
                status, got = call(self.url, "POST", f"/subjects/{subject}/versions", {"schema": text}, timeout=15)
            except OSError:
                status, got = None, None
            if status == 200:
                self.acked[subject] = (text, got["id"])
                n += 1
            else:
                self.failures += 1
                time.sleep(0.1)


@pytest.mark.parametrize("victim_role", ["primary", "schemas leader"])
def test_broker_killed_mid_registration_loses_nothing_acknowledged(registry_cluster, victim_role):
    """kill -9 of the registry primary (a new one is elected) or of the leader of ``_schemas`` (the
    registries' clients follow the new leader) while two clients register through the other brokers."""
    cluster, urls = registry_cluster
    Cluster.wait_for(lambda: primary_url(cluster) in urls.values(), 30, "a registry primary")
    old_primary = primary_url(cluster)
    if victim_role == "primary":
        victim = next(i for i, u in urls.items() if u == old_primary)
    else:
        victim = cluster.leader("_schemas", 0)
    survivors = {i: u for i, u in urls.items() if i != victim}
    stop = threading.Event()
    clients = [Registrar(f"kill-{i}", u, stop) for i, u in survivors.items()]
    for c in clients:
        c.start()
    try:
        Cluster.wait_for(lambda: all(len(c.acked) >= 3 for c in clients), 30, "registrations before the kill")
        cluster.kill(victim)
        at_kill = {id(c): len(c.acked) for c in clients}
        if urls[victim] == old_primary:
            Cluster.wait_for(lambda: primary_url(cluster) in survivors.values(), 30, "a new registry primary")
        else:
            Cluster.wait_for(lambda: cluster.leader("_schemas", 0) in survivors, 30, "a new leader of _schemas")
        # writes resume on the new primary, through both remaining brokers
        Cluster.wait_for(lambda: all(len(c.acked) >= at_kill[id(c)] + 3 for c in clients), 60,
                         "registrations after the kill")
    finally:
        stop.set()
        for c in clients:
            c.join(30)
    assert primary_url(cluster) in survivors.values()

    acked = {}
    for c in clients:
        acked.update(c.acked)
    ids = [sid for _, sid in acked.values()]
    assert len(set(ids)) == len(ids), "two different schemas share an id"
    for url in survivors.values():
        for subject, (text, sid) in acked.items():
            got = wait_lookup(url, subject, text)
            assert (got["id"], got["version"]) == (sid, 1), (url, subject)
    # the killed broker comes back with every acknowledged registration too
    cluster.restart(victim)
    registry_ready(urls[victim])
    for subject, (text, sid) in acked.items():
        assert wait_lookup(urls[victim], subject, text)["id"] == sid


def test_election_session_loss_demotes_then_rejoins(zookeeper):
    """ZkPrimary alone on a real ZooKeeper: the lowest member is primary and every member knows its
    URL; when the primary's session expires it stops being primary at once, the other takes over,
    and the expired one rejoins (with a new node) as a follower."""
    import asyncio
    import uuid

    from kazoo.client import KazooClient

    from pybroker.registry.zk_primary import ZkPrimary

    chroot = f"/registry-election-{uuid.uuid4().hex[:8]}"
    setup = KazooClient(hosts=zookeeper.connect, timeout=10)
    setup.start(30)
    setup.ensure_path(chroot)
    setup.stop()
    setup.close()

    async def until(predicate, what, timeout=20.0):
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.02)

    async def scenario():
        a = ZkPrimary(zookeeper.connect + chroot, "http://a:1", session_timeout_s=4)
        b = ZkPrimary(zookeeper.connect + chroot, "http://b:2", session_timeout_s=4)
        await a.start()
        await b.start()
        try:
            await until(lambda: a.is_primary and b.primary_url == "http://a:1", "a elected, b knows it")
            assert not b.is_primary
            # expire a's session from outside: a second client on the same session closes it
            session_id, password = a._zk.client_id
            thief = KazooClient(hosts=zookeeper.connect + chroot, client_id=(session_id, password), timeout=4)
            await asyncio.get_running_loop().run_in_executor(None, thief.start, 30)
            await asyncio.get_running_loop().run_in_executor(None, thief.stop)
            thief.close()
            await until(lambda: b.is_primary and b.primary_url == "http://b:2", "b took over")
            def members():
                try:
                    return b._zk.get_children(ELECTION)
                except Exception:  # a reconnecting client: asked again
                    return []

            # a is a member again (a new node, after b's) and follows b
            await until(lambda: len(members()) == 2 and a.primary_url == "http://b:2", "a rejoined and follows b")
            assert not a.is_primary and b.is_primary
        finally:
            await a.close()
            await b.close()

    asyncio.run(scenario())

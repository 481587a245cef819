"""The registry's storage semantics: Confluent's record layout, the state rebuilt from the same log
by a new registry (a restart), writes forwarded from a registry that is not the primary, and two
writers that picked the same id."""
import asyncio
import json

import pytest

from pybroker.registry import records
from pybroker.registry.primary import FixedPrimary
from pybroker.registry.schema_log import MemorySchemaLog
from pybroker.registry.state import RegistryState
from tests.unit.registry_harness import loop, memory_topic, nodes  # noqa: F401 (loop, nodes: fixtures)


def schema(name: str, *fields: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [{"name": f, "type": "int"} for f in fields]})


def test_confluent_layout():
    assert records.schema_key("t-value", 3) == b'{"keytype":"SCHEMA","subject":"t-value","version":3,"magic":1}'
    assert records.config_key(None) == b'{"keytype":"CONFIG","subject":null,"magic":0}'
    assert records.mode_key("s") == b'{"keytype":"MODE","subject":"s","magic":0}'
    assert records.delete_subject_key("s") == b'{"keytype":"DELETE_SUBJECT","subject":"s","magic":0}'
    assert records.noop_key() == b'{"keytype":"NOOP","magic":0}'
    value = json.loads(records.schema_value("s", 1, 7, '"int"'))
    assert value == {"subject": "s", "version": 1, "id": 7, "schema": '"int"', "deleted": False}
    value = json.loads(records.schema_value("s", 2, 8, "syntax = \"proto3\";", "PROTOBUF",
                                            [{"name": "a.proto", "subject": "a", "version": 1}], deleted=True))
    assert value["schemaType"] == "PROTOBUF" and value["references"][0]["subject"] == "a" and value["deleted"]
    assert json.loads(records.config_value("FULL")) == {"compatibilityLevel": "FULL"}
    assert json.loads(records.mode_value("IMPORT")) == {"mode": "IMPORT"}
    r = records.decode(records.schema_key("s", 1), None)
    assert (r.keytype, r.subject, r.version, r.value) == ("SCHEMA", "s", 1, None)
    for bad_key in (b"nope", b"[]", b'{"keytype":"WHAT"}', b'{"keytype":"SCHEMA","subject":"s"}'):
        with pytest.raises(records.BadRecord):
            records.decode(bad_key, b"{}")
    with pytest.raises(records.BadRecord):
        records.decode(records.schema_key("s", 1), b"not json")


def test_state_from_confluent_records():
    """Records as Confluent's registry writes them, including ones this registry does not write."""
    state = RegistryState()
    log = [
        (records.schema_key("a", 1), records.schema_value("a", 1, 1, '"int"')),
        (records.schema_key("a", 2), records.schema_value("a", 2, 2, '"long"')),
        (records.config_key(None), records.config_value("FULL")),
        (records.config_key("a"), records.config_value("NONE")),
        (records.mode_key(None), records.mode_value("READONLY")),
        (records.noop_key(), None),
        (b"garbage", b"garbage"),  # skipped, never fatal
        (records.schema_key("c", 1), b'{"subject": "c"}'),  # no id: skipped
        (records.schema_key("c", 2), b'"text"'),
        (records.delete_subject_key("a"), records.delete_subject_value("a", 1)),
        (records.clear_subject_key("a"), records.clear_subject_value("a")),
        (records.mode_key(None), None),
        (records.schema_key("b", 1), records.schema_value("b", 1, 2, '"long"')),
    ]
    for offset, (key, value) in enumerate(log):
        state.apply(key, value, offset)
    assert [e.version for e in state.versions("a", deleted=True)] == [2]  # 1: soft-deleted, then cleared
    assert state.configs == {None: "FULL", "a": "NONE"} and state.modes == {}
    assert [(e.subject, e.version) for e in state.holders(2)] == [("a", 2), ("b", 1)]
    assert 1 not in state.schemas and state.next_id() == 3 and state.next_version("a") == 3
    assert state.applied_offset == len(log) - 1 and "c" not in state.subjects


def test_conflicting_id_refused():
    """Two writers that both believed they were primary chose id 5: the first in the log keeps it."""
    state = RegistryState()
    assert state.apply(records.schema_key("x", 1), records.schema_value("x", 1, 5, '"int"'), 0)
    assert not state.apply(records.schema_key("y", 1), records.schema_value("y", 1, 5, '"string"'), 1)
    assert 1 in state.refused and state.versions("y") == [] and state.schemas[5].text == '"int"'
    assert state.apply(records.schema_key("z", 1), records.schema_value("z", 1, 5, '"int"'), 2)  # same schema: fine


def test_restart_rebuilds_everything(loop, nodes):
    topic = memory_topic(loop)
    first = nodes(topic)
    assert first.request("POST", "/subjects/a/versions", {"schema": schema("A", "x")})[1] == {"id": 1}
    assert first.request("POST", "/subjects/b/versions", {"schema": schema("B", "x")})[1] == {"id": 2}
    assert first.request("POST", "/subjects/b/versions", {"schema": schema("B", "x", "y")})[0] == 409
    first.request("PUT", "/config/b", {"compatibility": "NONE"})
    assert first.request("POST", "/subjects/b/versions", {"schema": schema("B", "x", "y")})[1] == {"id": 3}
    first.request("DELETE", "/subjects/a")
    first.request("DELETE", "/subjects/a?permanent=true")
    first.request("PUT", "/mode/c", {"mode": "READONLY"})
    snapshot = {path: first.request("GET", path)[1] for path in
                ("/subjects?deleted=true", "/subjects/b/versions", "/subjects/b/versions/2", "/schemas/ids/2",
                 "/config/b", "/mode/c", "/schemas/ids/1")}
    first.stop()
    second = nodes(topic)  # a new registry reading the same records: the broker restarted
    loop.run(second.log.catch_up(5))
    assert {path: second.request("GET", path)[1] for path in snapshot} == snapshot
    # ids go on from the largest ever seen (1 was permanently deleted and is not reused)
    assert second.request("POST", "/subjects/d/versions", {"schema": schema("D", "x")})[1] == {"id": 4}
    assert second.request("POST", "/subjects/c/versions", {"schema": schema("C", "x")})[1]["error_code"] == 42205


def test_writes_forwarded_to_the_primary(loop, nodes):
    topic = memory_topic(loop)
    primary = nodes(topic)
    secondary = nodes(topic, primary=FixedPrimary(primary.url))
    status, body, _ = secondary.request("POST", "/subjects/s/versions", {"schema": schema("S", "x")})
    assert (status, body) == (200, {"id": 1})
    loop.run(secondary.log.catch_up(5))
    assert secondary.request("GET", "/subjects/s/versions/1")[1]["id"] == 1  # read from its own copy
    assert primary.request("GET", "/subjects/s/versions/1")[1]["id"] == 1
    # errors come back as the primary gave them
    status, body, _ = secondary.request("POST", "/subjects/s/versions", {"schema": schema("S", "x", "y")})
    assert (status, body["error_code"]) == (409, 409)
    assert secondary.request("PUT", "/config/s", {"compatibility": "NONE"})[1] == {"compatibility": "NONE"}
    assert secondary.request("DELETE", "/subjects/s")[1] == [1]
    assert secondary.request("PUT", "/mode", {"mode": "READONLY"})[1] == {"mode": "READONLY"}
    loop.run(secondary.log.catch_up(5))
    assert secondary.request("GET", "/mode")[1] == {"mode": "READONLY"}
    assert secondary.request("GET", "/subjects")[1] == []


class ElectedLater(FixedPrimary):
    """No primary known until ``elect(url)`` (an election under way); ``wait_decided`` waits for it."""

    def __init__(self):
        super().__init__(None)
        self.decided = asyncio.Event()
        self.waited = False

    def elect(self, url: str) -> None:
        self._url = url
        self.decided.set()

    async def wait_decided(self, timeout_s: float) -> bool:
        self.waited = True
        try:
            await asyncio.wait_for(self.decided.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass
        return self._url is not None


def test_a_write_during_an_election_waits_for_its_outcome(loop, nodes):
    topic = memory_topic(loop)
    primary = nodes(topic)
    electing = ElectedLater()
    secondary = nodes(topic, primary=electing)
    loop.loop.call_soon_threadsafe(loop.loop.call_later, 0.3, electing.elect, primary.url)
    status, body, _ = secondary.request("POST", "/subjects/s/versions", {"schema": schema("S", "x")})
    assert (status, body) == (200, {"id": 1}) and electing.waited
    assert secondary.request("GET", "/subjects")[1] in ([], ["s"])  # reads never wait for an election


def test_forwarding_failures(loop, nodes):
    topic = memory_topic(loop)
    nobody = nodes(topic, primary=FixedPrimary(None))
    status, body, _ = nobody.request("POST", "/subjects/s/versions", {"schema": schema("S", "x")})
    assert (status, body["error_code"]) == (500, 50003)
    gone = nodes(topic, primary=FixedPrimary("http://127.0.0.1:1"))
    assert gone.request("PUT", "/config", {"compatibility": "NONE"})[1]["error_code"] == 50003
    # a registry that believes another is primary, while that one does not: no forwarding loop
    loop_b = nodes(topic, primary=FixedPrimary(nobody.url))
    assert loop_b.request("DELETE", "/subjects/s")[1]["error_code"] == 50003
    assert loop_b.request("GET", "/subjects")[0] == 200  # reads are local


def test_forwarding_keeps_authentication(loop, nodes):
    topic = memory_topic(loop)
    check = lambda user, password: (user, password) == ("u", "p")  # noqa: E731
    primary = nodes(topic, authenticate=check)
    secondary = nodes(topic, primary=FixedPrimary(primary.url), authenticate=check)
    import base64
    auth = {"Authorization": "Basic " + base64.b64encode(b"u:p").decode()}
    assert secondary.request("POST", "/subjects/s/versions", {"schema": schema("S", "x")}, headers=auth)[1] == \
        {"id": 1}


class LaggingLog(MemorySchemaLog):
    """A reader that applies records only when asked to catch up (a registry far behind the log)."""

    async def _tail(self):
        self.gate = asyncio.Event()
        await self.gate.wait()
        await super()._tail()

    async def catch_up(self, timeout_s):
        self.gate.set()
        await super().catch_up(timeout_s)


def test_new_primary_catches_up_before_choosing_ids(loop, nodes):
    topic = memory_topic(loop)
    old = nodes(topic)
    newer = nodes(topic, primary=FixedPrimary(old.url), log_class=LaggingLog)
    for i in range(3):
        old.request("POST", f"/subjects/s{i}/versions", {"schema": schema(f"S{i}", "x")})
    assert newer.request("GET", "/subjects")[1] == []  # it has not read the log yet
    newer.registry.primary._is_primary = True  # the election moved
    old.registry.primary = FixedPrimary(newer.url)
    assert old.request("POST", "/subjects/t/versions", {"schema": schema("T", "x")})[1] == {"id": 4}
    assert newer.request("GET", "/schemas/ids/4/subjects")[1] == ["t"]
    assert not newer.registry.state.refused  # its id was chosen after reading the log, not by retrying


def test_concurrent_registrations_get_unique_ids(loop, nodes):
    from concurrent.futures import ThreadPoolExecutor
    topic = memory_topic(loop)
    primary = nodes(topic)
    secondary = nodes(topic, primary=FixedPrimary(primary.url))
    primary.request("PUT", "/config", {"compatibility": "NONE"})

    def put(i):
        target = primary if i % 2 else secondary
        status, body, _ = target.request("POST", f"/subjects/c{i % 4}/versions", {"schema": schema(f"N{i}", "x")})
        assert status == 200, body
        return body["id"]
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(put, range(40)))
    assert sorted(ids) == list(range(1, 41))
    loop.run(secondary.log.catch_up(5))
    for i in range(4):
        assert secondary.request("GET", f"/subjects/c{i}/versions")[1] == list(range(1, 11))


def test_settings():
    from pybroker.properties import ConfigError
    from pybroker.registry.settings import RegistrySettings
    assert RegistrySettings.from_raw({"broker.id": "1"}) is None
    s = RegistrySettings.from_raw({"schema.registry.listeners": "http://127.0.0.1:8081, http://0.0.0.0:0",
                                   "schema.registry.topic": "_reg", "schema.registry.topic.replication.factor": "2",
                                   "schema.registry.compatibility": "full_transitive",
                                   "schema.registry.max.request.bytes": "4096",
                                   "schema.registry.request.timeout.ms": "1500",
                                   "schema.registry.authentication": "NONE"})
    assert s.listeners == ["http://127.0.0.1:8081", "http://0.0.0.0:0"]
    assert (s.topic, s.replication_factor, s.compatibility, s.max_request_bytes, s.request_timeout_s,
            s.authentication) == ("_reg", 2, "FULL_TRANSITIVE", 4096, 1.5, "none")
    for bad in ({"schema.registry.listeners": "ftp://h:1"}, {"schema.registry.listeners": "http://h"},
                {"schema.registry.listeners": "http://h:1/path"},
                {"schema.registry.listeners": "http://h:1", "schema.registry.compatibility": "SOME"},
                {"schema.registry.listeners": "http://h:1", "schema.registry.authentication": "kerberos"},
                {"schema.registry.listeners": "http://h:1", "schema.registry.topic.replication.factor": "0"},
                {"schema.registry.listeners": "http://h:1", "schema.registry.lisenters": "x"},
                {"schema.registry.listeners": "https://h:1"},  # TLS without a key and certificate
                {"schema.registry.listeners": "https://h:1", "schema.registry.ssl.keystore.location": "/nonexistent"}):
        with pytest.raises(ConfigError) as exc:
            RegistrySettings.from_raw(bad)
        assert exc.value.key and exc.value.key.startswith("schema.registry."), (bad, exc.value.key)

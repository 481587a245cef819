"""``pybroker schemas`` against a broker process serving the schema registry: register from files
(Avro, JSON Schema, Protobuf with a reference), read back, compatibility, config and mode, soft and
permanent deletes, and Confluent's error answers printed with exit code 1."""
import json
import subprocess
import sys

import pytest

from pybroker.cli import main
from tests.broker import ROOT
from tests.registryutil import free_port, start_registry_broker

USER_V1 = {"type": "record", "name": "User", "namespace": "cli",
           "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}
USER_V2 = {**USER_V1, "fields": USER_V1["fields"] + [{"name": "email", "type": ["null", "string"], "default": None}]}
USER_BAD = {**USER_V1, "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "string"}]}
COMMON_PROTO = 'syntax = "proto3";\npackage cli;\n\nmessage Address {\n  string city = 1;\n}\n'
PERSON_PROTO = ('syntax = "proto3";\npackage cli;\n\nimport "cli/common.proto";\n\n'
                'message Person {\n  string name = 1;\n  Address home = 2;\n}\n')
ORDER_JSON = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    broker, url = start_registry_broker(str(tmp_path_factory.mktemp("registry-cli") / "data"))
    yield url
    try:
        broker.stop()
    finally:
        broker.close()


@pytest.fixture
def files(tmp_path):
    def write(name, content):
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        return str(path)
    return write


@pytest.fixture
def cli(registry, capsys):
    """Run ``pybroker schemas --registry URL ARGS``: (exit code, stdout, stderr)."""
    def run(*args, registry_url=None):
        code = main(["schemas", "--registry", registry_url or registry, *map(str, args)])
        out, err = capsys.readouterr()
        return code, out, err
    return run


def ok(result):
    code, out, err = result
    assert code == 0, err
    return out


def test_register_get_versions_and_list(cli, files):
    v1 = files("user.avsc", USER_V1)
    created = json.loads(ok(cli("register", "cli-users-value", v1)))
    assert json.loads(ok(cli("register", "cli-users-value", v1))) == created  # the same schema: the same id
    assert "cli-users-value" in ok(cli("list")).splitlines()
    assert ok(cli("versions", "cli-users-value")).split() == ["1"]
    latest = json.loads(ok(cli("get", "cli-users-value")))
    assert (latest["subject"], latest["version"], latest["id"]) == ("cli-users-value", 1, created["id"])
    assert json.loads(latest["schema"]) == json.loads(ok(cli("get", "cli-users-value", 1, "--schema-only")))
    by_id = json.loads(ok(cli("get", "--id", created["id"])))
    assert json.loads(by_id["schema"])["name"] == "User"

    order = json.loads(ok(cli("register", "cli-orders-value", files("order.json", ORDER_JSON))))
    got = json.loads(ok(cli("get", "--id", order["id"])))
    assert got["schemaType"] == "JSON"


def test_protobuf_with_a_reference(cli, files):
    ok(cli("register", "cli-common", files("common.proto", COMMON_PROTO)))
    person = json.loads(ok(cli("register", "cli-person-value", files("person.proto", PERSON_PROTO),
                               "--reference", "cli/common.proto=cli-common:latest")))
    got = json.loads(ok(cli("get", "cli-person-value")))
    assert got["id"] == person["id"] and got["schemaType"] == "PROTOBUF"
    assert got["references"] == [{"name": "cli/common.proto", "subject": "cli-common", "version": 1}]
    code, _, err = cli("register", "cli-person-value", files("person2.proto", PERSON_PROTO))  # no reference given
    assert code == 1 and "error 42201" in err


def test_compatibility_and_config(cli, files):
    ok(cli("register", "cli-compat-value", files("v1.avsc", USER_V1)))
    v2, bad = files("v2.avsc", USER_V2), files("bad.avsc", USER_BAD)
    assert json.loads(ok(cli("compatibility", "cli-compat-value", v2, "--version", "latest")))["is_compatible"]
    code, out, _ = cli("compatibility", "cli-compat-value", bad, "--version", "1")
    assert code == 1 and json.loads(out)["is_compatible"] is False
    code, _, err = cli("register", "cli-compat-value", bad)
    assert code == 1 and "error 409" in err

    assert json.loads(ok(cli("config")))["compatibilityLevel"] == "BACKWARD"
    code, _, err = cli("config", "cli-compat-value")
    assert code == 1 and "error 40408" in err  # no subject-level config yet
    assert json.loads(ok(cli("config", "cli-compat-value", "--set", "none"))) == {"compatibility": "NONE"}
    assert json.loads(ok(cli("config", "cli-compat-value")))["compatibilityLevel"] == "NONE"
    assert json.loads(ok(cli("register", "cli-compat-value", bad)))["id"] > 0
    assert ok(cli("versions", "cli-compat-value")).split() == ["1", "2"]
    ok(cli("config", "cli-compat-value", "--delete"))
    assert cli("config", "cli-compat-value")[0] == 1


def test_mode(cli, files):
    assert json.loads(ok(cli("mode")))["mode"] == "READWRITE"
    assert json.loads(ok(cli("mode", "cli-frozen-value", "--set", "READONLY"))) == {"mode": "READONLY"}
    code, _, err = cli("register", "cli-frozen-value", files("u.avsc", USER_V1))
    assert code == 1 and "error 42205" in err
    ok(cli("mode", "cli-frozen-value", "--set", "READWRITE"))
    ok(cli("register", "cli-frozen-value", files("u.avsc", USER_V1)))


def test_soft_and_permanent_deletes(cli, files):
    ok(cli("register", "cli-gone-value", files("v1.avsc", USER_V1)))
    ok(cli("register", "cli-gone-value", files("v2.avsc", USER_V2)))
    assert json.loads(ok(cli("delete", "cli-gone-value", "--version", "1"))) == 1
    assert ok(cli("versions", "cli-gone-value")).split() == ["2"]
    assert ok(cli("versions", "cli-gone-value", "--deleted")).split() == ["1", "2"]
    assert json.loads(ok(cli("delete", "cli-gone-value"))) == [2]
    assert "cli-gone-value" not in ok(cli("list")).splitlines()
    assert "cli-gone-value" in ok(cli("list", "--deleted")).splitlines()
    assert json.loads(ok(cli("delete", "cli-gone-value", "--permanent"))) == [1, 2]
    assert "cli-gone-value" not in ok(cli("list", "--deleted")).splitlines()


def test_errors_are_messages_with_exit_code_1(cli, files):
    code, out, err = cli("get", "cli-no-such-subject")
    assert (code, out) == (1, "") and "error 40401" in err and "cli-no-such-subject" in err
    code, _, err = cli("get", "--id", 999999)
    assert code == 1 and "error 40403" in err
    code, _, err = cli("register", "cli-broken-value", files("broken.avsc", '{"type": "record", "name": "X"'))
    assert code == 1 and "error 42201" in err
    ok(cli("register", "cli-err-value", files("e.avsc", USER_V1)))
    code, _, err = cli("get", "cli-err-value", "seven")
    assert code == 1 and "error 42202" in err
    code, _, err = cli("list", registry_url=f"http://127.0.0.1:{free_port()}")
    assert code == 1 and "cannot reach the registry" in err


def test_the_command_line_entry_point(registry, files):
    path = files("entry.avsc", USER_V1)
    out = subprocess.run([sys.executable, "-m", "pybroker", "schemas", "--registry", registry, "register",
                          "cli-entry-value", path], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["id"] > 0

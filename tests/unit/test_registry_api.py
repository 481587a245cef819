"""The registry's REST API over real HTTP (an in-process server on a MemorySchemaLog): every endpoint's
answers and Confluent's error codes, deletes, references, config, mode and compatibility checks."""
import json


from tests.unit.registry_harness import loop, node  # noqa: F401 (fixtures)


def avro_record(*fields, name="R"):
    return json.dumps({"type": "record", "name": name,
                       "fields": [{"name": n, "type": t, **({"default": d} if d is not None else {})}
                                  for n, t, d in fields]})


V1 = avro_record(("a", "int", None))
V2 = avro_record(("a", "int", None), ("b", "string", "x"))  # adds a field with a default: compatible both ways
V3_BAD = avro_record(("a", "string", None))  # int -> string: incompatible
V_NEW_REQUIRED = avro_record(("a", "int", None), ("c", "long", None))  # a new field without default


def ok(result, status=200):
    code, body, _ = result
    assert code == status, body
    return body


def err(result, error_code):
    code, body, headers = result
    assert isinstance(body, dict) and body.get("error_code") == error_code, (code, body)
    assert code == int(str(error_code)[:3])
    assert headers["Content-Type"].startswith("application/vnd.schemaregistry.v1+json")
    assert body["message"]
    return body


def register(node, subject, schema, **extra):
    return node.request("POST", f"/subjects/{subject}/versions", {"schema": schema, **extra})


def test_register_reuses_ids_and_versions(node):
    assert ok(register(node, "s1", V1)) == {"id": 1}
    assert ok(register(node, "s1", V1)) == {"id": 1}  # again: same id, no new version
    assert ok(node.request("GET", "/subjects/s1/versions")) == [1]
    assert ok(register(node, "s2", V1)) == {"id": 1}  # another subject, same schema: same id
    assert ok(register(node, "s1", V2)) == {"id": 2}
    assert ok(node.request("GET", "/subjects/s1/versions")) == [1, 2]
    assert ok(node.request("GET", "/subjects")) == ["s1", "s2"]
    assert ok(node.request("GET", "/subjects?subjectPrefix=s2")) == ["s2"]
    latest = ok(node.request("GET", "/subjects/s1/versions/latest"))
    assert latest["version"] == 2 and latest["id"] == 2 and json.loads(latest["schema"]) == json.loads(V2)
    assert "schemaType" not in latest  # omitted for Avro, as Confluent does
    assert ok(node.request("GET", "/subjects/s1/versions/-1"))["version"] == 2
    assert ok(node.request("GET", "/subjects/s1/versions/1"))["id"] == 1
    assert ok(node.request("GET", "/subjects/s1/versions/1/schema")) == json.loads(V1)  # the text itself
    assert json.loads(ok(node.request("GET", "/schemas/ids/2"))["schema"]) == json.loads(V2)
    assert ok(node.request("GET", "/schemas/ids/1/schema")) == json.loads(V1)
    assert ok(node.request("GET", "/schemas/ids/1/subjects")) == ["s1", "s2"]
    assert ok(node.request("GET", "/schemas/ids/1/versions")) == [{"subject": "s1", "version": 1},
                                                                  {"subject": "s2", "version": 1}]
    assert sorted(ok(node.request("GET", "/schemas/types"))) == ["AVRO", "JSON", "PROTOBUF"]
    assert ok(node.request("GET", "/")) == {}
    assert len(ok(node.request("GET", "/schemas"))) == 3
    assert [s["subject"] for s in ok(node.request("GET", "/schemas?latestOnly=true"))] == ["s1", "s2"]


def test_lookup(node):
    ok(register(node, "s", V1))
    ok(register(node, "s", V2))
    found = ok(node.request("POST", "/subjects/s", {"schema": V1}))
    assert (found["subject"], found["version"], found["id"]) == ("s", 1, 1)
    assert json.loads(found["schema"]) == json.loads(V1)
    err(node.request("POST", "/subjects/s", {"schema": avro_record(("z", "int", None))}), 40403)
    err(node.request("POST", "/subjects/nope", {"schema": V1}), 40401)
    err(node.request("POST", "/subjects/s", {"schema": "{"}), 42201)


def test_not_found_and_invalid_version(node):
    err(node.request("GET", "/subjects/nope/versions"), 40401)
    err(node.request("GET", "/subjects/nope/versions/1"), 40401)
    ok(register(node, "s", V1))
    err(node.request("GET", "/subjects/s/versions/7"), 40402)
    for bad in ("0", "-2", "abc", "99999999999"):
        err(node.request("GET", f"/subjects/s/versions/{bad}"), 42202)
    err(node.request("GET", "/schemas/ids/99"), 40403)
    err(node.request("GET", "/schemas/ids/notanumber"), 40403)
    err(node.request("GET", "/schemas/ids/99/subjects"), 40403)
    err(node.request("GET", "/no/such/path"), 404)
    err(node.request("PATCH", "/subjects"), 405)
    err(node.request("GET", "/config/s"), 40408)
    err(node.request("GET", "/mode/s"), 40409)


def test_invalid_bodies(node):
    err(register(node, "s", "{not json"), 42201)
    err(register(node, "s", json.dumps({"type": "record", "name": "R"})), 42201)  # no fields
    err(register(node, "s", ""), 42201)
    err(node.request("POST", "/subjects/s/versions", {"schemaType": "AVRO"}), 42201)
    err(register(node, "s", V1, schemaType="XML"), 42201)
    err(node.request("POST", "/subjects/s/versions", raw=b'{"schema": '), 400)
    err(node.request("POST", "/subjects/s/versions", raw=b"\xff\xfe garbage"), 400)
    err(node.request("POST", "/subjects/s/versions", raw=b"[1, 2]"), 422)
    err(node.request("POST", "/subjects/s/versions", {"schema": 5}), 400)
    err(register(node, "s", V1, surprise=1), 422)  # an unknown field, as Confluent without the header
    assert ok(node.request("POST", "/subjects/s/versions", {"schema": V1, "surprise": 1},
                           headers={"Confluent-Accept-Unknown-Properties": "true"})) == {"id": 1}
    err(register(node, "s", V1, references="x"), 422)
    err(node.request("PUT", "/config", {"compatibility": "SIDEWAYS"}), 42203)
    err(node.request("PUT", "/config", raw=b"nope"), 400)
    err(node.request("PUT", "/mode", {"mode": "SOMETIMES"}), 42204)
    assert ok(node.request("GET", "/subjects")) == ["s"]  # nothing else was registered


def test_compatibility_on_register_per_level(node):
    ok(register(node, "s", V1))
    err(register(node, "s", V3_BAD), 409)  # BACKWARD by default: int -> string refused
    body = err(register(node, "s", V_NEW_REQUIRED), 409)
    assert "c" in body["message"]
    ok(node.request("PUT", "/config/s", {"compatibility": "FORWARD"}))
    assert ok(register(node, "s", V_NEW_REQUIRED)) == {"id": 2}  # old readers ignore the new field
    ok(node.request("PUT", "/config/s", {"compatibility": "FULL"}))
    err(register(node, "s", avro_record(("a", "int", None), ("d", "int", 0))), 409)  # drops c: it has no default
    ok(node.request("PUT", "/config/s", {"compatibility": "NONE"}))
    assert ok(register(node, "s", V3_BAD))["id"] == 3


def test_transitive_levels(node):
    ok(node.request("PUT", "/config/t", {"compatibility": "BACKWARD"}))
    ok(register(node, "t", avro_record(("a", "int", None))))
    ok(register(node, "t", avro_record(("a", "int", None), ("b", "int", 0))))
    ok(register(node, "t", avro_record(("b", "int", 0))))  # drop a: fine against version 2 (backward)
    b_required = avro_record(("b", "int", None))
    ok(node.request("PUT", "/config/t", {"compatibility": "BACKWARD_TRANSITIVE"}))
    # b without a default cannot read version 1's data (it has no b), though version 3's it can
    check = ok(node.request("POST", "/compatibility/subjects/t/versions/latest?verbose=true", {"schema": b_required}))
    assert check["is_compatible"] is True and check["messages"] == []
    check = ok(node.request("POST", "/compatibility/subjects/t/versions?verbose=true", {"schema": b_required}))
    assert check["is_compatible"] is False and check["messages"]
    err(register(node, "t", b_required), 409)
    ok(node.request("PUT", "/config/t", {"compatibility": "BACKWARD"}))
    assert ok(register(node, "t", b_required))["id"] > 0


def test_compatibility_endpoint(node):
    ok(register(node, "s", V1))
    assert ok(node.request("POST", "/compatibility/subjects/s/versions/latest", {"schema": V2})) == \
        {"is_compatible": True}
    answer = ok(node.request("POST", "/compatibility/subjects/s/versions/1?verbose=true", {"schema": V3_BAD}))
    assert answer["is_compatible"] is False and answer["messages"]
    assert "messages" not in ok(node.request("POST", "/compatibility/subjects/s/versions/1", {"schema": V3_BAD}))
    err(node.request("POST", "/compatibility/subjects/nope/versions/latest", {"schema": V1}), 40401)
    err(node.request("POST", "/compatibility/subjects/s/versions/5", {"schema": V1}), 40402)
    err(node.request("POST", "/compatibility/subjects/s/versions/zero", {"schema": V1}), 42202)
    err(node.request("POST", "/compatibility/subjects/s/versions/latest", {"schema": "{"}), 42201)
    assert ok(node.request("POST", "/compatibility/subjects/fresh/versions", {"schema": V1}))["is_compatible"]


def test_soft_and_permanent_deletes(node):
    ok(register(node, "s", V1))
    ok(register(node, "s", V2))
    err(node.request("DELETE", "/subjects/s/versions/1?permanent=true"), 40407)  # soft first
    assert ok(node.request("DELETE", "/subjects/s/versions/1")) == 1
    err(node.request("DELETE", "/subjects/s/versions/1"), 40406)
    assert ok(node.request("GET", "/subjects/s/versions")) == [2]
    assert ok(node.request("GET", "/subjects/s/versions?deleted=true")) == [1, 2]
    err(node.request("GET", "/subjects/s/versions/1"), 40402)
    assert ok(node.request("GET", "/subjects/s/versions/1?deleted=true"))["id"] == 1
    assert ok(node.request("GET", "/schemas/ids/1"))  # a soft-deleted schema is still found by id
    assert ok(node.request("GET", "/schemas/ids/1/versions")) == []
    assert ok(node.request("GET", "/schemas/ids/1/versions?deleted=true")) == [{"subject": "s", "version": 1}]
    assert ok(node.request("DELETE", "/subjects/s/versions/1?permanent=true")) == 1
    err(node.request("GET", "/schemas/ids/1"), 40403)
    err(node.request("DELETE", "/subjects/s/versions/1?permanent=true"), 40402)
    err(node.request("DELETE", "/subjects/s?permanent=true"), 40405)  # version 2 is live
    assert ok(node.request("DELETE", "/subjects/s")) == [2]
    err(node.request("DELETE", "/subjects/s"), 40404)
    assert ok(node.request("GET", "/subjects")) == []
    assert ok(node.request("GET", "/subjects?deleted=true")) == ["s"]
    err(node.request("GET", "/subjects/s/versions"), 40401)
    # registering again after a soft delete: a new version, the old id
    assert ok(register(node, "s", V2)) == {"id": 2}
    assert ok(node.request("GET", "/subjects/s/versions")) == [3]
    ok(node.request("DELETE", "/subjects/s"))
    assert ok(node.request("DELETE", "/subjects/s?permanent=true")) == [2, 3]
    assert ok(node.request("GET", "/subjects?deleted=true")) == []
    err(node.request("DELETE", "/subjects/s"), 40401)
    # ids and versions are never reused, even after a permanent delete
    assert ok(register(node, "s", avro_record(("q", "int", None)))) == {"id": 3}
    assert ok(node.request("GET", "/subjects/s/versions")) == [4]


def test_references(node):
    inner = json.dumps({"type": "record", "name": "Inner", "namespace": "n", "fields": [{"name": "x", "type": "int"}]})
    outer = json.dumps({"type": "record", "name": "Outer", "namespace": "n",
                        "fields": [{"name": "i", "type": "n.Inner"}]})
    ok(register(node, "inner", inner))
    ref = [{"name": "n.Inner", "subject": "inner", "version": 1}]
    err(register(node, "outer", outer), 42201)  # without the reference it does not parse
    err(register(node, "outer", outer, references=[{"name": "n.Inner", "subject": "inner", "version": 9}]), 42201)
    err(register(node, "outer", outer, references=[{"name": "n.Inner", "subject": "nope", "version": 1}]), 42201)
    outer_id = ok(register(node, "outer", outer, references=ref))["id"]
    got = ok(node.request("GET", "/subjects/outer/versions/1"))
    assert got["references"] == ref
    assert ok(node.request("GET", f"/schemas/ids/{outer_id}"))["references"] == ref
    assert ok(node.request("GET", "/subjects/inner/versions/1/referencedby")) == [outer_id]
    # the same schema with the reference is found again; transitive: a third level
    assert ok(register(node, "outer", outer, references=ref)) == {"id": outer_id}
    top = json.dumps({"type": "record", "name": "Top", "namespace": "n", "fields": [{"name": "o", "type": "n.Outer"}]})
    ok(register(node, "top", top, references=[{"name": "n.Outer", "subject": "outer", "version": 1}]))
    err(node.request("DELETE", "/subjects/inner/versions/1"), 42206)
    err(node.request("DELETE", "/subjects/inner"), 42206)
    ok(node.request("DELETE", "/subjects/top"))
    ok(node.request("DELETE", "/subjects/outer"))
    assert ok(node.request("DELETE", "/subjects/inner")) == [1]


def test_normalize(node):
    spaced = '{ "type" : "record", "name": "R", "fields": [ {"name": "a", "type": "int"} ] }'
    assert ok(node.request("POST", "/subjects/s/versions?normalize=true", {"schema": spaced})) == {"id": 1}
    reordered = json.dumps({"fields": [{"type": "int", "name": "a"}], "name": "R", "type": "record"})
    assert ok(node.request("POST", "/subjects/s/versions?normalize=true", {"schema": reordered})) == {"id": 1}
    assert ok(node.request("POST", "/subjects/s?normalize=true", {"schema": reordered}))["version"] == 1
    assert ok(node.request("GET", "/subjects/s/versions")) == [1]


def test_config(node):
    assert ok(node.request("GET", "/config")) == {"compatibilityLevel": "BACKWARD"}
    assert ok(node.request("PUT", "/config", {"compatibility": "full"})) == {"compatibility": "FULL"}
    assert ok(node.request("GET", "/config")) == {"compatibilityLevel": "FULL"}
    err(node.request("GET", "/config/s"), 40408)
    assert ok(node.request("GET", "/config/s?defaultToGlobal=true")) == {"compatibilityLevel": "FULL"}
    assert ok(node.request("PUT", "/config/s", {"compatibility": "NONE"})) == {"compatibility": "NONE"}
    assert ok(node.request("GET", "/config/s")) == {"compatibilityLevel": "NONE"}
    ok(register(node, "s", V1))
    ok(register(node, "s", V3_BAD))  # NONE for s
    assert ok(node.request("DELETE", "/config/s")) == {"compatibilityLevel": "NONE"}
    err(node.request("GET", "/config/s"), 40408)
    err(node.request("DELETE", "/config/nope"), 40401)
    assert ok(node.request("DELETE", "/config")) == {"compatibilityLevel": "FULL"}
    assert ok(node.request("GET", "/config")) == {"compatibilityLevel": "BACKWARD"}


def test_readonly_mode(node):
    ok(register(node, "s", V1))
    assert ok(node.request("GET", "/mode")) == {"mode": "READWRITE"}
    assert ok(node.request("PUT", "/mode", {"mode": "READONLY"})) == {"mode": "READONLY"}
    err(register(node, "s", V2), 42205)
    err(node.request("DELETE", "/subjects/s"), 42205)
    err(node.request("DELETE", "/subjects/s/versions/1"), 42205)
    assert ok(node.request("GET", "/subjects/s/versions/1"))["id"] == 1  # reads go on
    assert ok(node.request("PUT", "/mode/other", {"mode": "READWRITE"})) == {"mode": "READWRITE"}
    assert ok(register(node, "other", V1)) == {"id": 1}  # the subject's mode wins over the global one
    assert ok(node.request("GET", "/mode/other")) == {"mode": "READWRITE"}
    assert ok(node.request("GET", "/mode/s?defaultToGlobal=true")) == {"mode": "READONLY"}
    assert ok(node.request("DELETE", "/mode/other")) == {"mode": "READWRITE"}
    err(node.request("DELETE", "/mode/other"), 40409)
    ok(node.request("PUT", "/mode", {"mode": "READWRITE"}))
    assert ok(register(node, "s", V2)) == {"id": 2}


def test_import_mode(node):
    ok(register(node, "existing", V1))
    err(node.request("PUT", "/mode", {"mode": "IMPORT"}), 42205)  # the registry is not empty
    err(register(node, "s", V2, id=50, version=3), 42205)  # explicit ids need IMPORT
    assert ok(node.request("PUT", "/mode/imported", {"mode": "IMPORT"})) == {"mode": "IMPORT"}
    assert ok(register(node, "imported", V3_BAD, id=100, version=5)) == {"id": 100}
    assert ok(register(node, "imported", V1, id=7, version=6)) == {"id": 7}  # no compatibility check on import
    got = ok(node.request("GET", "/subjects/imported/versions/5"))
    assert (got["id"], got["version"]) == (100, 5)
    err(register(node, "imported", V2, id=100, version=7), 42205)  # id 100 is another schema
    err(register(node, "imported", V2, id=101, version=5), 42205)  # version 5 holds id 100
    err(node.request("PUT", "/mode/existing", {"mode": "IMPORT"}), 42205)
    assert ok(node.request("PUT", "/mode/existing?force=true", {"mode": "IMPORT"})) == {"mode": "IMPORT"}
    ok(node.request("DELETE", "/mode/imported"))
    # later ids follow the largest id seen
    assert ok(register(node, "fresh", avro_record(("z", "int", None)))) == {"id": 101}
    assert ok(node.request("PUT", "/mode?force=true", {"mode": "IMPORT"})) == {"mode": "IMPORT"}


def test_protobuf_imports_as_references(node):
    dep = 'syntax = "proto3";\npackage d;\nmessage Dep { string x = 1; }\n'
    top = 'syntax = "proto3";\npackage t;\nimport "dep.proto";\nmessage Top { d.Dep dep = 1; int32 n = 2; }\n'
    proto = {"schemaType": "PROTOBUF"}
    assert ok(register(node, "dep", dep, **proto)) == {"id": 1}
    err(register(node, "top", top, **proto), 42201)  # the import is not resolved without its reference
    ref = [{"name": "dep.proto", "subject": "dep", "version": 1}]
    assert ok(register(node, "top", top, references=ref, **proto)) == {"id": 2}
    got = ok(node.request("GET", "/subjects/top/versions/latest"))
    assert got["schemaType"] == "PROTOBUF" and got["references"] == ref
    assert ok(node.request("GET", "/schemas/ids/2?format=serialized"))["schema"] != got["schema"]
    changed = top.replace("int32 n = 2", "string n = 2")  # a field's type changes: incompatible
    err(register(node, "top", changed, references=ref, **proto), 409)
    err(register(node, "top", V1), 409)  # another schema type under the same subject
    err(node.request("DELETE", "/subjects/dep/versions/1"), 42206)


def test_json_schema_registration(node):
    closed = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False})
    assert ok(register(node, "j", closed, schemaType="JSON")) == {"id": 1}
    got = ok(node.request("GET", "/subjects/j/versions/1"))
    assert got["schemaType"] == "JSON" and json.loads(got["schema"]) == json.loads(closed)
    err(register(node, "j", json.dumps({"type": 12}), schemaType="JSON"), 42201)
    retyped = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False})
    err(register(node, "j", retyped, schemaType="JSON"), 409)

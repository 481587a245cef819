"""The registry's HTTP layer: content types, the body size limit, slow and half-open clients, basic
authentication, TLS, unexpected failures answered with an error body, encoded subject names."""
import base64
import http.client
import json
import socket
import ssl
import time
import urllib.parse

import pytest

from tests.tlsutil import Authority
from tests.unit.registry_harness import CT, loop, nodes  # noqa: F401 (loop, nodes: fixtures)

SCHEMA = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})


def raw_body(node, ctype, body=b'{"schema": "\\"int\\""}'):
    return node.request("POST", "/subjects/s/versions", raw=body, headers={"Content-Type": ctype} if ctype else {})


def test_content_types(nodes):
    node = nodes()
    for ctype in ("application/vnd.schemaregistry.v1+json", "application/vnd.schemaregistry+json",
                  "application/json", "application/json; charset=utf-8", "application/octet-stream"):
        status, body, _ = raw_body(node, ctype)
        assert (status, body) == (200, {"id": 1}), ctype
    for ctype in ("text/plain", "application/xml", "multipart/form-data; boundary=x"):
        status, body, headers = raw_body(node, ctype)
        assert status == 415 and body["error_code"] == 415, (ctype, body)
        assert headers["Content-Type"].startswith(CT)
    status, body, headers = node.request("GET", "/subjects")
    assert headers["Content-Type"].startswith(CT) and body == ["s"]


def test_body_over_the_limit(nodes):
    node = nodes(max_request_bytes=2048)
    big = json.dumps({"schema": json.dumps({"type": "record", "name": "R", "doc": "x" * 4000,
                                            "fields": [{"name": "a", "type": "int"}]})}).encode()
    status, body, _ = node.request("POST", "/subjects/s/versions", raw=big)
    assert status == 413 and body["error_code"] == 413
    # chunked, without a Content-Length: refused once the limit is crossed
    parts = urllib.parse.urlsplit(node.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.request("POST", "/subjects/s/versions", body=iter([big[:1000], big[1000:]]),
                 headers={"Content-Type": CT}, encode_chunked=True)
    resp = conn.getresponse()
    assert resp.status == 413 and json.loads(resp.read())["error_code"] == 413
    conn.close()
    assert node.request("POST", "/subjects/s/versions", {"schema": SCHEMA})[1] == {"id": 1}


def _until_closed(sock: socket.socket, timeout_s: float) -> bytes:
    """What the server sends before closing ``sock`` (bounded)."""
    sock.settimeout(timeout_s)
    data = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        chunk = sock.recv(4096)
        if not chunk:
            return data
        data += chunk
    raise AssertionError("the server kept the connection open")


def test_slow_and_half_open_clients(nodes):
    node = nodes(idle_timeout_ms=700)
    parts = urllib.parse.urlsplit(node.url)
    half_headers = socket.create_connection((parts.hostname, parts.port))
    half_headers.sendall(b"POST /subjects/s/versions HTTP/1.1\r\nHost: x\r\nContent-Ty")
    half_body = socket.create_connection((parts.hostname, parts.port))
    half_body.sendall(b"POST /subjects/s/versions HTTP/1.1\r\nHost: x\r\nContent-Type: " + CT.encode() +
                      b"\r\nContent-Length: 100\r\n\r\n{\"schema\":")
    silent = socket.create_connection((parts.hostname, parts.port))
    try:
        # others are served while those hold their connections
        for i in range(5):
            assert node.request("POST", f"/subjects/s{i}/versions", {"schema": SCHEMA})[0] == 200
        assert node.request("GET", "/subjects")[1] == [f"s{i}" for i in range(5)]
        # and each of them is let go after the idle timeout
        _until_closed(half_headers, 10)
        answer = _until_closed(half_body, 10)
        assert answer == b"" or b" 408 " in answer.split(b"\r\n")[0]
        _until_closed(silent, 10)
    finally:
        for s in (half_headers, half_body, silent):
            s.close()
    assert node.request("GET", "/subjects")[0] == 200


def test_basic_auth(nodes):
    node = nodes(authenticate=lambda user, password: (user, password) == ("alice", "s3cret"))

    def auth(user, password):
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    status, body, headers = node.request("GET", "/subjects")
    assert status == 401 and body["error_code"] == 401
    assert headers["WWW-Authenticate"] == 'Basic realm="SchemaRegistry"'
    assert node.request("GET", "/subjects", headers=auth("alice", "wrong"))[0] == 401
    assert node.request("GET", "/subjects", headers=auth("bob", "s3cret"))[0] == 401
    assert node.request("GET", "/subjects", headers={"Authorization": "Basic !!notbase64"})[0] == 401
    assert node.request("GET", "/subjects", headers={"Authorization": "Bearer abc"})[0] == 401
    assert node.request("POST", "/subjects/s/versions", {"schema": SCHEMA})[0] == 401
    assert node.request("POST", "/subjects/s/versions", {"schema": SCHEMA}, headers=auth("alice", "s3cret"))[1] == \
        {"id": 1}
    assert node.request("GET", "/subjects", headers=auth("alice", "s3cret"))[1] == ["s"]

    async def async_check(user, password):
        return password == "ok"
    other = nodes(authenticate=async_check)
    assert other.request("GET", "/subjects", headers=auth("any", "ok"))[0] == 200
    assert other.request("GET", "/subjects", headers=auth("any", "no"))[0] == 401
    assert nodes().request("GET", "/subjects")[0] == 200  # no authenticate: open


def test_unexpected_failure_is_an_error_body(nodes):
    node = nodes()

    def broken(*args):
        raise RuntimeError("boom")
    node.registry.subjects = broken
    status, body, _ = node.request("GET", "/subjects")
    assert status == 500 and body["error_code"] == 50001 and "boom" not in body["message"]
    assert node.request("GET", "/schemas/types")[0] == 200  # still serving


def test_encoded_subject_names(nodes):
    node = nodes()
    name = "team/a b?c"
    quoted = urllib.parse.quote(name, safe="")
    assert node.request("POST", f"/subjects/{quoted}/versions", {"schema": SCHEMA})[1] == {"id": 1}
    assert node.request("GET", "/subjects")[1] == [name]
    assert node.request("GET", f"/subjects/{quoted}/versions/1")[1]["subject"] == name


def test_https_listener(nodes, tmp_path):
    ca = Authority(str(tmp_path))
    server = ca.issue("registry", {"CN": "127.0.0.1"}, hosts=("127.0.0.1", "localhost"))
    node = nodes(listeners="https://127.0.0.1:0", ssl_keystore_location=server["pem"])
    assert node.url.startswith("https://127.0.0.1:")
    ctx = ssl.create_default_context(cafile=ca.cert_path)
    parts = urllib.parse.urlsplit(node.url)
    conn = http.client.HTTPSConnection(parts.hostname, parts.port, context=ctx, timeout=10)
    conn.request("POST", "/subjects/s/versions", body=json.dumps({"schema": SCHEMA}), headers={"Content-Type": CT})
    resp = conn.getresponse()
    assert resp.status == 200 and json.loads(resp.read()) == {"id": 1}
    conn.close()
    with pytest.raises(ssl.SSLError):  # a client that does not trust the certificate
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, context=ssl.create_default_context(),
                                           timeout=10)
        conn.request("GET", "/subjects")


def test_authentication_setting(nodes):
    check = lambda user, password: False  # noqa: E731
    assert nodes(authenticate=check, authentication="none").request("GET", "/subjects")[0] == 200
    assert nodes(authenticate=check, authentication="basic").request("GET", "/subjects")[0] == 401
    with pytest.raises(ValueError):
        nodes(authentication="basic")

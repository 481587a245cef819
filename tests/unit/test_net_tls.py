"""The network layer's guarantees over TLS (pybroker/net/tls_connection.py), in process on real sockets:
the same handler and requests as tests/unit/test_net.py, a TLS client (asyncio's) on the other side."""
import asyncio
import random
import socket
import ssl
import struct

import pytest

from pybroker.net.server import Server
from pybroker.security.tls import client_context, listener_tls
from tests.unit.test_net import (ASYNC_ECHO, BIG, ECHO, SLICES, WAIT_S, Handler, filled_log, read_response,  # noqa: F401
                            request, run, until)
from tests.tlsutil import Authority


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("net-tls"))
    ca = Authority(d)
    return {"ca": ca.cert_path, "broker": ca.issue("broker", {"CN": "broker"}, hosts=("127.0.0.1",)),
            "alice": ca.issue("alice", {"O": "acme", "CN": "alice"})}


def tls_server(certs, handler, client_auth="none", **settings) -> Server:
    raw = {"ssl.keystore.location": certs["broker"]["pem"], "ssl.truststore.location": certs["ca"],
           "ssl.client.auth": client_auth}
    return Server(handler, listener_name="SSL", security_protocol="SSL", tls=listener_tls(raw, "SSL", "SSL"),
                  **settings)


async def connect(server, certs, who=None):
    ctx = client_context(cafile=certs["ca"], certfile=certs[who]["cert"] if who else None,
                         keyfile=certs[who]["key"] if who else None)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=ctx)
    writer.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return reader, writer


def only_connection(server):
    assert len(server.connections) == 1
    return next(iter(server.connections.values()))


def test_echo_and_principal_from_the_client_certificate(run, certs):
    async def body():
        async with tls_server(certs, Handler(), client_auth="required") as server:
            reader, writer = await connect(server, certs, "alice")
            writer.write(request(ECHO, 1, b"hello"))
            assert await asyncio.wait_for(read_response(reader), WAIT_S) == (1, b"hello")
            conn = only_connection(server)
            assert str(conn.session.principal) == "User:CN=alice,O=acme"
            assert conn.tls_version in ("TLSv1.2", "TLSv1.3")
            writer.close()
    run(body())


def test_frames_split_into_tiny_records_and_many_frames_per_record(run, certs):
    async def body():
        async with tls_server(certs, Handler()) as server:
            reader, writer = await connect(server, certs)
            data = b"".join(request(ECHO, i, bytes([i % 251]) * (i * 37 % 3000)) for i in range(200))
            for i in range(0, len(data), 7):  # one TLS record per 7 bytes
                writer.write(data[i:i + 7])
                if i % 700 == 0:
                    await writer.drain()
            writer.write(data[:0])
            for i in range(200):
                assert await asyncio.wait_for(read_response(reader), WAIT_S) == (i, bytes([i % 251]) * (i * 37 % 3000))
            writer.write(b"".join(request(ECHO, 1000 + i, b"x" * 10) for i in range(500)))  # many per record
            for i in range(500):
                assert await read_response(reader) == (1000 + i, b"x" * 10)
            writer.close()
    run(body())


def test_async_handlers_keep_request_order(run, certs):
    async def body():
        rng = random.Random(5)
        async with tls_server(certs, Handler()) as server:
            reader, writer = await connect(server, certs)
            delays = [rng.randrange(0, 20) for _ in range(100)]
            writer.write(b"".join(request(ASYNC_ECHO, i, bytes([d])) for i, d in enumerate(delays)))
            for i, d in enumerate(delays):
                assert await asyncio.wait_for(read_response(reader), WAIT_S) == (i, b"\1" + bytes([d]))
            writer.close()
    run(body())


def test_slices_arrive_byte_identical_through_a_small_socket_buffer(run, certs, filled_log):
    lg = filled_log
    end = lg.log_end_offset
    reads = [(0, 1 << 30), (0, 1), (end // 3, 100_000), (end // 2, 1 << 30), (end - 1, 10)]

    async def body():
        async with tls_server(certs, Handler(lg)) as server:
            reader, writer = await connect(server, certs)
            for corr, small in enumerate([1, 0, 1]):
                payload = bytes([small]) + b"".join(struct.pack(">qi", o, m) for o, m in reads)
                writer.write(request(SLICES, corr, payload))
            for corr in range(3):
                expected = corr.to_bytes(4, "big") + b"".join(
                    struct.pack(">i", 1 + 12 * i) + lg.read(o, m).read() for i, (o, m) in enumerate(reads))
                size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), WAIT_S))[0]
                assert size == len(expected) > 1 << 20
                assert await asyncio.wait_for(reader.readexactly(size), WAIT_S) == expected
            writer.close()
    run(body())


def test_client_that_never_reads_stops_being_read_then_gets_everything(run, certs):
    async def body():
        n, payload = 20_000, b"p" * 1000  # more than socket buffers and the client's TLS buffers hold
        async with tls_server(certs, Handler(), max_in_flight=64) as server:
            reader, writer = await connect(server, certs)
            writer.write(b"".join(request(ECHO, i, payload) for i in range(n)))
            conn = only_connection(server)
            await until(lambda: not conn.reading and conn.in_flight > 0, "reading to pause")
            assert server.stats.requests < n and conn.in_flight <= 64
            # bytes already inside TLS are decrypted when reading resumes, not lost or stuck
            for i in range(n):
                assert await asyncio.wait_for(read_response(reader), WAIT_S) == (i, payload)
            assert conn.in_flight == 0 and conn.held_bytes == 0
            writer.close()
    run(body())


def test_large_responses_are_bounded_by_queued_bytes(run, certs):
    async def body():
        bound, size, n = 4 << 20, 1 << 20, 30
        async with tls_server(certs, Handler(), max_queued_bytes=bound) as server:
            reader, writer = await connect(server, certs)
            writer.write(b"".join(request(BIG, i, struct.pack(">i", size)) for i in range(n)))
            conn = only_connection(server)
            await until(lambda: not conn.reading and conn.in_flight > 0, "reading to pause")
            assert conn.held_bytes <= bound + size + 100
            for i in range(n):
                corr, body_ = await asyncio.wait_for(read_response(reader), WAIT_S)
                assert corr == i and body_ == bytes([i]) * size
            writer.close()
    run(body())


def test_handshake_failures_close_only_that_socket(run, certs):
    async def body():
        async with tls_server(certs, Handler(), client_auth="required", tls_handshake_timeout_ms=500) as server:
            good_r, good_w = await connect(server, certs, "alice")
            with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
                r, w = await connect(server, certs)  # no client certificate
                w.write(request(ECHO, 1))
                await asyncio.wait_for(read_response(r), WAIT_S)
            r, w = await asyncio.open_connection("127.0.0.1", server.port)
            w.write(request(ECHO, 1, b"plaintext"))
            assert await asyncio.wait_for(r.read(), WAIT_S) == b""  # closed, no response
            r, w = await asyncio.open_connection("127.0.0.1", server.port)  # silent: the timeout closes it
            assert await asyncio.wait_for(r.read(), WAIT_S) == b""
            good_w.write(request(ECHO, 2, b"still fine"))
            assert await asyncio.wait_for(read_response(good_r), WAIT_S) == (2, b"still fine")
            await until(lambda: len(server.connections) == 1, "the failed sockets to be gone")
            good_w.close()
    run(body())


def test_stop_finishes_in_flight_responses(run, certs):
    async def body():
        server = await tls_server(certs, Handler()).start()
        reader, writer = await connect(server, certs)
        writer.write(b"".join(request(ASYNC_ECHO, i, bytes([20])) for i in range(5)))
        await until(lambda: server.stats.requests == 5, "the requests")
        await server.stop(WAIT_S)
        for i in range(5):
            assert await asyncio.wait_for(read_response(reader), WAIT_S) == (i, b"\1\x14")
        writer.close()
    run(body())

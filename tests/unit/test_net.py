"""Network layer over real sockets on 127.0.0.1: framing, limits, ordering, slices, backpressure,
idle timeout, shutdown; on asyncio's loop and on uvloop when installed."""
import asyncio
import os
import random
import signal
import socket
import struct
import tracemalloc

import pytest

from pybroker.log import FetchSlice, Log, LogConfig
from pybroker.net import server as netserver
from pybroker.net.server import Server, new_event_loop
from pybroker.records import value_batch

try:
    import uvloop
except ImportError:
    uvloop = None

LOOPS = ["asyncio"] + (["uvloop"] if uvloop else [])
WAIT_S = 20  # upper bound for any single wait in these tests; never reached when they pass

ECHO, ASYNC_ECHO, NO_RESPONSE, RAISE, SLICES, CONTROLLED, ASYNC_NONE, BAD_SLICE, BIG, BAD_TYPE = \
    range(10)


@pytest.fixture(params=LOOPS)
def run(request):
    use_uvloop = request.param == "uvloop"

    def runner(coro):
        async def bounded():
            return await asyncio.wait_for(coro, 120)
        with asyncio.Runner(loop_factory=lambda: new_event_loop(use_uvloop)) as r:
            return r.run(bounded())
    return runner


class Handler:
    """Request = api_key int16, version int16, correlation id int32, payload; the api key picks
    the behaviour. Echo responses are the correlation id followed by the payload."""

    def __init__(self, log=None):
        self.log = log
        self.controlled = {}  # correlation id -> future the test completes
        self.seen = []

    def handle(self, frame, conn):
        api_key, _version, corr = struct.unpack_from(">hhi", frame)
        payload = frame[8:]  # a view: must stay valid until the response is sent
        cid = frame[4:8]
        self.seen.append(corr)
        if api_key == ECHO:
            return [cid, payload]
        if api_key == ASYNC_ECHO:
            return self._later(cid, payload)
        if api_key == NO_RESPONSE:
            return None
        if api_key == RAISE:
            raise RuntimeError("handler bug")
        if api_key == SLICES:
            return self._slices(cid, payload, conn)
        if api_key == CONTROLLED:
            fut = asyncio.get_running_loop().create_future()
            self.controlled[corr] = fut
            return fut
        if api_key == ASYNC_NONE:
            return self._none(payload)
        if api_key == BAD_SLICE:
            sl = self.log.read(0, 1 << 20)
            end = os.fstat(sl.fd).st_size
            return [cid, FetchSlice(sl.file, end - 100, 4096, 0, 0, 0)]  # runs past the end
        if api_key == BIG:
            (size,) = struct.unpack_from(">i", payload)
            return [cid, bytes([corr & 0xFF]) * size]
        if api_key == BAD_TYPE:
            return [cid, 12345]
        raise ValueError(api_key)

    async def _later(self, cid, payload):
        await asyncio.sleep(payload[0] / 1000)
        return [cid, bytes([len(payload)]), payload]

    async def _none(self, payload):
        await asyncio.sleep(payload[0] / 1000)
        return None

    def _slices(self, cid, payload, conn):
        # payload: small_sndbuf int8, then (offset int64, max_bytes int32) repeated
        if payload[0]:
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 128 * 1024)
        parts = [cid]
        for i in range(1, len(payload), 12):
            offset, max_bytes = struct.unpack_from(">qi", payload, i)
            parts += [struct.pack(">i", i), self.log.read(offset, max_bytes)]
        return parts


def request(api_key, corr, payload=b""):
    return struct.pack(">ihhi", 8 + len(payload), api_key, 0, corr) + bytes(payload)


async def read_response(reader):
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    body = await reader.readexactly(size)
    return struct.unpack_from(">i", body)[0], body[4:]


async def connect(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return reader, writer


async def expect_closed(reader):
    """The server hangs up: EOF (or a reset) before any further complete response."""
    try:
        rest = await asyncio.wait_for(reader.read(), WAIT_S)
    except ConnectionResetError:
        return b""
    return rest


async def echo_ok(server, corr=7, payload=b"still fine"):
    reader, writer = await connect(server)
    writer.write(request(ECHO, corr, payload))
    assert await asyncio.wait_for(read_response(reader), WAIT_S) == (corr, payload)
    writer.close()


async def until(predicate, what):
    """Poll a condition the server reaches on its own (bounded by count and time)."""
    for _ in range(WAIT_S * 100):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def only_connection(server):
    assert len(server.connections) == 1
    return next(iter(server.connections.values()))


# ---- loops -------------------------------------------------------------------------------------

def test_new_event_loop_picks_uvloop_when_installed_and_default_otherwise():
    loop = new_event_loop(use_uvloop=False)
    try:
        assert type(loop).__module__.startswith("asyncio")
    finally:
        loop.close()
    loop = new_event_loop()
    try:
        assert (uvloop is not None) == type(loop).__module__.startswith("uvloop")
    finally:
        loop.close()
    assert netserver.run(asyncio.sleep(0, "done")) == "done"


# ---- framing -----------------------------------------------------------------------------------

def test_echo_roundtrip_counts_connections_requests_and_bytes(run):
    async def body():
        async with Server(Handler()) as server:
            assert server.port > 0
            reader, writer = await connect(server)
            writer.write(request(ECHO, 1, b"hello"))
            assert await read_response(reader) == (1, b"hello")
            stats = server.stats
            assert (stats.open_connections, stats.accepted, stats.requests) == (1, 1, 1)
            assert stats.bytes_in == 4 + 8 + 5 and stats.bytes_out == 4 + 4 + 5
            conn = only_connection(server)
            assert conn.peer == writer.get_extra_info("sockname")[:2] and not conn.closed
            writer.close()
            await until(lambda: server.stats.open_connections == 0, "close")
    run(body())


def test_frames_split_across_many_small_sends(run):
    async def body():
        rng = random.Random(1)
        async with Server(Handler(), recv_buffer_bytes=64) as server:
            reader, writer = await connect(server)
            payloads = [rng.randbytes(rng.choice([0, 1, 7, 100, 3000])) for _ in range(40)]
            payloads.append(rng.randbytes(300_000))  # received straight into its frame buffer
            stream = b"".join(request(ECHO, i, p) for i, p in enumerate(payloads))
            pos = 0
            for _ in range(len(stream)):
                if pos >= len(stream):
                    break
                step = rng.choice([1, 2, 3, 5, 11, 64, 4096])
                writer.write(stream[pos:pos + step])
                pos += step
                await writer.drain()
                await asyncio.sleep(0)
            assert pos >= len(stream)
            for i, p in enumerate(payloads):
                assert await read_response(reader) == (i, p)
            writer.close()
    run(body())


def test_many_frames_in_one_send(run):
    async def body():
        async with Server(Handler()) as server:
            reader, writer = await connect(server)
            writer.write(b"".join(request(ECHO, i, i.to_bytes(4, "big")) for i in range(500)))
            for i in range(500):
                assert await read_response(reader) == (i, i.to_bytes(4, "big"))
            assert server.stats.requests == 500
            writer.close()
    run(body())


@pytest.mark.parametrize("header", [
    struct.pack(">i", 1001),                  # over max_request_bytes (1000)
    struct.pack(">i", -1),
    struct.pack(">I", 0x80000000),            # "2 GB": negative as a signed size
    struct.pack(">i", 0),
    struct.pack(">i", 7),                     # cannot hold a request header
])
def test_bad_sizes_close_that_connection_only(run, header):
    async def body():
        async with Server(Handler(), max_request_bytes=1000) as server:
            other_r, other_w = await connect(server)
            reader, writer = await connect(server)
            writer.write(request(ECHO, 1, b"ok") + header + b"\0" * 64)
            assert await read_response(reader) == (1, b"ok")
            assert await expect_closed(reader) == b""
            await until(lambda: server.stats.open_connections == 1, "the bad connection to close")
            other_w.write(request(ECHO, 2, b"other"))
            assert await read_response(other_r) == (2, b"other")
            await echo_ok(server)
            other_w.close()
    run(body())


def test_huge_size_is_refused_before_allocating(run):
    async def body():
        async with Server(Handler()) as server:  # default socket.request.max.bytes = 100 MiB
            reader, writer = await connect(server)
            tracemalloc.start()
            try:
                writer.write(struct.pack(">i", 2**31 - 1) + b"\1" * 8)
                assert await expect_closed(reader) == b""
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert peak < 4 << 20
            await echo_ok(server)
    run(body())


def test_random_garbage_never_crashes_the_server(run):
    async def body():
        rng = random.Random(7)
        async with Server(Handler(), max_request_bytes=4096) as server:
            for _ in range(30):
                reader, writer = await connect(server)
                writer.write(rng.randbytes(rng.randrange(1, 2000)))
                writer.write_eof()
                try:
                    await asyncio.wait_for(reader.read(), WAIT_S)  # whatever it is, it ends
                except ConnectionResetError:
                    pass
                writer.close()
            await until(lambda: server.stats.open_connections == 0, "garbage connections to close")
            await echo_ok(server)
    run(body())


# ---- ordering ----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_responses_keep_request_order_when_async_handlers_finish_out_of_order(run, seed):
    async def body():
        rng = random.Random(seed)
        handler = Handler()
        async with Server(handler) as server:
            reader, writer = await connect(server)
            kinds = [rng.choice([ECHO, CONTROLLED, NO_RESPONSE, ASYNC_NONE]) for _ in range(60)]
            for corr, kind in enumerate(kinds):
                writer.write(request(kind, corr, b"\0" + corr.to_bytes(2, "big")))
            controlled = [c for c, k in enumerate(kinds) if k == CONTROLLED]
            await until(lambda: len(handler.controlled) == len(controlled), "controlled requests")
            rng.shuffle(controlled)
            for corr in controlled:
                handler.controlled[corr].set_result([corr.to_bytes(4, "big"), b"late"])
                await asyncio.sleep(0)
            expected = [(c, b"late" if k == CONTROLLED else b"\0" + c.to_bytes(2, "big"))
                        for c, k in enumerate(kinds) if k in (ECHO, CONTROLLED)]
            got = [await read_response(reader) for _ in expected]
            assert got == expected
            writer.write(request(ECHO, 999))
            assert await read_response(reader) == (999, b"")  # nothing extra was sent
            writer.close()
    run(body())


def test_random_async_delays_keep_order_and_frames_stay_intact(run):
    async def body():
        rng = random.Random(42)
        async with Server(Handler(), max_in_flight=16) as server:
            reader, writer = await connect(server)
            sent = []
            for corr in range(300):
                payload = bytes([rng.randrange(0, 6)]) + rng.randbytes(rng.randrange(0, 200))
                kind = rng.choice([ECHO, ASYNC_ECHO])
                writer.write(request(kind, corr, payload))
                sent.append((corr, payload if kind == ECHO else bytes([len(payload)]) + payload))
            for want in sent:
                assert await read_response(reader) == want
            writer.close()
    run(body())


def test_half_closed_client_gets_every_response_then_eof(run):
    async def body():
        async with Server(Handler()) as server:
            reader, writer = await connect(server)
            writer.write(b"".join(request(ASYNC_ECHO, i, bytes([3 - i % 3])) for i in range(10)))
            writer.write_eof()
            for i in range(10):
                assert await read_response(reader) == (i, b"\1" + bytes([3 - i % 3]))
            assert await expect_closed(reader) == b""
    run(body())


# ---- file slices -------------------------------------------------------------------------------

@pytest.fixture
def filled_log(tmp_path):
    lg = Log(str(tmp_path / "t-0"), "t", 0, LogConfig(retention_ms=-1))
    rng = random.Random(3)
    for _ in range(60):
        lg.append(value_batch(rng.randrange(1, 20), rng.randrange(1000, 20000)))
    yield lg
    lg.close()


SENDERS = ["sendfile", "io_uring"]


@pytest.mark.parametrize("method", SENDERS)
def test_slices_arrive_byte_identical(run, filled_log, method):
    from pybroker.sender import get_sender
    try:
        sender = get_sender(method)
    except Exception as exc:  # io_uring unavailable here
        pytest.skip(f"{method}: {exc}")
    partial = []

    class Counting:  # the real sender, noting sends cut short by a full socket
        def send_slice(self, sock_fd, file_fd, offset, count):
            n = sender.send_slice(sock_fd, file_fd, offset, count)
            if n < count:
                partial.append(n)
            return n

    lg = filled_log
    end = lg.log_end_offset
    reads = [(0, 1 << 30), (0, 1), (end // 3, 100_000), (end // 2, 1 << 30), (end - 1, 10)]

    async def body():
        async with Server(Handler(lg), sender=Counting()) as server:
            reader, writer = await connect(server)
            for corr, small in enumerate([1, 0, 1]):
                payload = bytes([small]) + b"".join(struct.pack(">qi", o, m) for o, m in reads)
                writer.write(request(SLICES, corr, payload))
            for corr in range(3):
                expected = corr.to_bytes(4, "big") + b"".join(
                    struct.pack(">i", 1 + 12 * i) + lg.read(o, m).read()
                    for i, (o, m) in enumerate(reads))
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                assert size == len(expected) > 1 << 20
                assert await reader.readexactly(size) == expected
            writer.close()
        sender.close()
        assert partial  # the socket filled up and the slice was resumed on writability
    run(body())


def test_slice_past_end_of_file_closes_the_connection(run, filled_log):
    async def body():
        async with Server(Handler(filled_log)) as server:
            reader, writer = await connect(server)
            writer.write(request(ECHO, 1, b"a") + request(BAD_SLICE, 2) + request(ECHO, 3, b"c"))
            assert await read_response(reader) == (1, b"a")
            head = await expect_closed(reader)
            size = struct.unpack(">i", head[:4])[0] if len(head) >= 4 else None
            assert size is None or len(head) < 4 + size  # never a complete, wrong response
            await echo_ok(server)
    run(body())


# ---- failures ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [RAISE, BAD_TYPE])
def test_handler_failure_closes_only_that_connection(run, bad):
    async def body():
        async with Server(Handler()) as server:
            other_r, other_w = await connect(server)
            reader, writer = await connect(server)
            writer.write(request(ECHO, 1) + request(bad, 2) + request(ECHO, 3))
            assert await read_response(reader) == (1, b"")
            assert await expect_closed(reader) == b""
            other_w.write(request(ECHO, 4, b"x"))
            assert await read_response(other_r) == (4, b"x")
            other_w.close()
    run(body())


def test_failed_awaitable_closes_the_connection(run):
    async def body():
        handler = Handler()
        async with Server(handler) as server:
            reader, writer = await connect(server)
            writer.write(request(CONTROLLED, 1) + request(ECHO, 2))
            await until(lambda: 1 in handler.controlled, "the request")
            handler.controlled[1].set_exception(RuntimeError("delayed op failed"))
            assert await expect_closed(reader) == b""  # the ready echo behind it is dropped too
            await echo_ok(server)
    run(body())


# ---- backpressure ------------------------------------------------------------------------------

def test_client_that_never_reads_stops_being_read_then_gets_everything_in_order(run):
    async def body():
        n, payload = 10_000, b"p" * 1000
        async with Server(Handler(), max_in_flight=64) as server:
            reader, writer = await connect(server)
            writer.write(b"".join(request(ECHO, i, payload) for i in range(n)))
            conn = only_connection(server)
            await until(lambda: not conn.reading and conn.in_flight > 0, "reading to pause")
            handled = server.stats.requests
            assert handled < n
            assert conn.in_flight <= 64
            assert conn.held_bytes <= 64 * 2 * (len(payload) + 20)
            # read no further than the requests taken plus one receive buffer (of ~10 MB sent)
            assert server.stats.bytes_in <= handled * (12 + len(payload)) + 64 * 1024
            await echo_ok(server, 5)  # other connections are served meanwhile
            assert server.stats.requests == handled + 1  # the stalled client was not read
            for i in range(n):
                assert await read_response(reader) == (i, payload)
            assert conn.in_flight == 0 and conn.held_bytes == 0
            writer.close()
    run(body())


def test_large_responses_are_bounded_by_queued_bytes(run):
    async def body():
        bound, size, n = 4 << 20, 1 << 20, 60
        async with Server(Handler(), max_queued_bytes=bound) as server:
            reader, writer = await connect(server)
            writer.write(b"".join(request(BIG, i, struct.pack(">i", size)) for i in range(n)))
            conn = only_connection(server)
            await until(lambda: not conn.reading and conn.in_flight > 0, "reading to pause")
            assert conn.held_bytes <= bound + size + 100
            assert server.stats.requests < n
            for i in range(n):
                corr, body_ = await read_response(reader)
                assert corr == i and body_ == bytes([i]) * size
            writer.close()
    run(body())


# ---- idle timeout, shutdown -------------------------------------------------------------------

def test_idle_connections_close_but_not_while_a_request_is_in_flight(run):
    async def body():
        handler = Handler()
        async with Server(handler, max_idle_ms=200) as server:
            busy_r, busy_w = await connect(server)
            busy_w.write(request(CONTROLLED, 1))
            await until(lambda: 1 in handler.controlled, "the long request")
            idle_r, _idle_w = await connect(server)
            assert await expect_closed(idle_r) == b""
            await until(lambda: server.stats.open_connections == 1, "the idle one to close")
            handler.controlled[1].set_result([b"\0\0\0\1"])
            assert await read_response(busy_r) == (1, b"")
            assert await expect_closed(busy_r) == b""  # idle again after its response
    run(body())


def test_stop_finishes_in_flight_requests_and_refuses_new_connections(run):
    async def body():
        handler = Handler()
        server = await Server(handler).start()
        port = server.port
        reader, writer = await connect(server)
        idle_r, _idle_w = await connect(server)
        writer.write(request(CONTROLLED, 1))
        await until(lambda: 1 in handler.controlled, "the request")
        stopping = asyncio.create_task(server.stop(timeout=WAIT_S))
        await until(lambda: server.stats.open_connections == 1, "the idle connection to close")
        assert await expect_closed(idle_r) == b""
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
        assert not stopping.done()
        handler.controlled[1].set_result([b"\0\0\0\1", b"last"])
        assert await read_response(reader) == (1, b"last")
        assert await expect_closed(reader) == b""
        await asyncio.wait_for(stopping, WAIT_S)
        assert server.stats.open_connections == 0
    run(body())


def test_stop_timeout_closes_connections_that_stay_busy(run):
    async def body():
        handler = Handler()
        server = await Server(handler).start()
        reader, writer = await connect(server)
        writer.write(request(CONTROLLED, 1))
        await until(lambda: 1 in handler.controlled, "the request")
        await server.stop(timeout=0.05)
        assert await expect_closed(reader) == b""
        assert server.stats.open_connections == 0 and not server.connections
    run(body())


def test_sigterm_triggers_stop(run):
    async def body():
        server = await Server(Handler()).start()
        reader, _writer = await connect(server)
        server.install_signal_handlers(timeout=5)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(server.wait_stopped(), WAIT_S)
        assert await expect_closed(reader) == b""
        asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)
        asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
    run(body())

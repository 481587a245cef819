"""File slice → socket: native sendfile vs the os.sendfile twin vs io_uring splice, over real
loopback TCP connections and unix socketpairs, with a reader thread checking what arrives."""
import errno
import fcntl
import os
import select
import socket
import threading

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pybroker import core, sender
from pybroker.uring import FIONREAD, UringSender, UringUnavailableError

FILE_SIZE = 3 * (1 << 20) + 12345  # several 1 MiB pipe chunks plus an unaligned tail
IMPLS = ["native", "pure", "uring", "uring-small"]


class Segment(tuple):
    """(fd, content) with a short repr for Hypothesis reports."""

    def __repr__(self):
        return f"Segment(fd={self[0]}, {len(self[1])} bytes)"


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    data = os.urandom(FILE_SIZE)
    path = tmp_path_factory.mktemp("transfer") / "segment.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    yield Segment((fd, data))
    os.close(fd)


def _make(name):
    if name in ("native", "pure"):
        return core.load("transfer", name), None
    try:
        # uring-small: 4-page pipe, 3 chunks per submit -> many rounds and short chains
        u = UringSender() if name == "uring" else UringSender(pipe_size=16384, chunks=3)
    except UringUnavailableError as exc:
        pytest.skip(str(exc))
    return u, u


@pytest.fixture(scope="module", params=IMPLS)
def impl(request):
    obj, closer = _make(request.param)
    yield obj
    if closer is not None:
        closer.close()


def make_pair(kind, small=False):
    """(non-blocking sending socket, blocking receiving socket); small = tiny buffers."""
    if kind == "unix":
        a, b = socket.socketpair()
        if small:
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    else:
        ls = socket.socket()
        if small:
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # inherited by accept()
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        a = socket.socket()
        if small:
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        a.connect(ls.getsockname())
        b, _ = ls.accept()
        ls.close()
    a.setblocking(False)
    b.settimeout(30)  # a stuck test fails instead of hanging
    return a, b


class Reader(threading.Thread):
    """Reads until EOF, keeping what arrived."""

    def __init__(self, sock):
        super().__init__(daemon=True)
        self.sock, self.chunks, self.error = sock, [], None

    def run(self):
        try:
            while True:  # ends at EOF or the socket timeout
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    return
                self.chunks.append(chunk)
        except Exception as exc:  # reported by result()
            self.error = exc

    def result(self, timeout=30):
        self.join(timeout)
        assert not self.is_alive(), "reader did not finish"
        assert self.error is None, self.error
        return b"".join(self.chunks)


def call_bounded(fn, *args, timeout=20):
    """Run fn in a thread; fail (instead of hanging) if it does not return in time."""
    out = {}

    def target():
        try:
            out["value"] = fn(*args)
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{fn.__name__} blocked"
    if "error" in out:
        raise out["error"]
    return out["value"]


def send_nonblocking(impl, sock, fd, offset, count):
    """Drive send_slice like an event loop would: resume at offset+sent after POLLOUT."""
    sent = 0
    poller = select.poll()
    poller.register(sock, select.POLLOUT)
    for _ in range(100_000):
        if sent == count:
            return sent
        n = impl.send_slice(sock.fileno(), fd, offset + sent, count - sent)
        assert 0 <= n <= count - sent
        sent += n
        if n == 0:
            assert poller.poll(10_000), "socket never became writable"
    raise AssertionError("send_slice made no progress")


def test_native_module_is_compiled():
    mod = core.load("transfer", "native")
    assert mod.__file__.endswith(".so")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_random_slices_arrive_byte_identical(impl, data_file, kind, data):
    fd, content = data_file
    offset = data.draw(st.one_of(st.integers(0, FILE_SIZE), st.sampled_from([0, 4095, 4096, 1 << 20])))
    room = FILE_SIZE - offset
    count = data.draw(st.one_of(st.integers(0, room), st.integers(0, min(9000, room))))
    all_at_once = data.draw(st.booleans())
    a, b = make_pair(kind)
    reader = Reader(b)
    reader.start()
    try:
        if all_at_once:
            assert impl.send_slice_all(a.fileno(), fd, offset, count, 10_000) == count
        else:
            assert send_nonblocking(impl, a, fd, offset, count) == count
    finally:
        a.close()
    got = reader.result()
    b.close()
    assert len(got) == count
    assert got == content[offset:offset + count]


@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_partial_send_then_resume(impl, data_file, kind):
    fd, content = data_file
    offset, count = 777, 2 * (1 << 20)
    a, b = make_pair(kind, small=True)
    try:
        first = call_bounded(impl.send_slice, a.fileno(), fd, offset, count)
        assert 0 < first < count
        # nobody reads: the socket is still full, so the next call sends nothing and returns
        assert call_bounded(impl.send_slice, a.fileno(), fd, offset + first, count - first) == 0
        if isinstance(impl, UringSender):  # unsent pipe content was dropped, not kept
            assert int.from_bytes(fcntl.ioctl(impl._r, FIONREAD, b"\0\0\0\0"), "little") == 0
        reader = Reader(b)
        reader.start()
        rest = call_bounded(impl.send_slice_all, a.fileno(), fd, offset + first, count - first, 10_000)
        assert rest == count - first
    finally:
        a.close()
    assert reader.result() == content[offset:offset + count]
    b.close()


@pytest.mark.parametrize("kind", ["tcp", "unix"])
@pytest.mark.parametrize("how", ["close", "reset"])
def test_peer_gone_raises_oserror(impl, data_file, kind, how):
    fd, _ = data_file
    a, b = make_pair(kind, small=True)
    if how == "reset" and kind == "tcp":
        b.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")  # close sends RST
    b.close()
    try:
        with pytest.raises(OSError) as info:
            for _ in range(50):  # TCP may accept a send or two before it learns of the close
                call_bounded(impl.send_slice_all, a.fileno(), fd, 0, 1 << 20, 5_000)
        assert info.value.errno in (errno.EPIPE, errno.ECONNRESET)
        assert not isinstance(info.value, TimeoutError)
    finally:
        a.close()


@pytest.mark.parametrize("method", ["send_slice", "send_slice_all"])
def test_slice_past_eof(impl, data_file, method):
    fd, _ = data_file
    a, b = make_pair("unix")
    try:
        with pytest.raises(EOFError, match=str(FILE_SIZE)):
            getattr(impl, method)(a.fileno(), fd, FILE_SIZE - 10, 11)
        with pytest.raises(EOFError):
            getattr(impl, method)(a.fileno(), fd, FILE_SIZE + 5, 1)
        with pytest.raises(ValueError):
            getattr(impl, method)(a.fileno(), fd, -1, 5)
        with pytest.raises(ValueError):
            getattr(impl, method)(a.fileno(), fd, 0, -5)
        assert getattr(impl, method)(a.fileno(), fd, 10, 0) == 0
        # nothing was sent by the failed calls
        assert getattr(impl, method)(a.fileno(), fd, FILE_SIZE - 3, 3) == 3
        a.close()
        assert b.recv(100) == data_file[1][-3:]
    finally:
        a.close()
        b.close()


def test_truncated_file_mid_transfer(impl, tmp_path):
    path = tmp_path / "shrinks.log"
    path.write_bytes(os.urandom(1 << 20))
    fd = os.open(path, os.O_RDWR)
    a, b = make_pair("tcp", small=True)
    try:
        first = call_bounded(impl.send_slice, a.fileno(), fd, 0, 1 << 20)
        assert 0 < first < 1 << 20
        os.ftruncate(fd, first + 100)
        with pytest.raises(EOFError, match=str(first + 100)):
            call_bounded(impl.send_slice, a.fileno(), fd, first, (1 << 20) - first)
    finally:
        os.close(fd)
        a.close()
        b.close()


def test_bad_fds(impl, data_file):
    fd, _ = data_file
    a, b = make_pair("unix")
    r, w = os.pipe()
    os.close(w)
    try:
        with pytest.raises(OSError) as info:
            impl.send_slice(a.fileno(), r, 0, 10)  # a pipe is no file slice source: EINVAL-ish
        assert info.value.errno is not None
        with pytest.raises(OSError) as info:
            impl.send_slice(a.fileno(), 987654, 0, 10)
        assert info.value.errno == errno.EBADF
    finally:
        os.close(r)
        a.close()
        b.close()


@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_send_all_times_out(impl, data_file, kind):
    fd, _ = data_file
    a, b = make_pair(kind, small=True)
    try:
        with pytest.raises(TimeoutError):
            call_bounded(impl.send_slice_all, a.fileno(), fd, 0, FILE_SIZE, 50)
    finally:
        a.close()
        b.close()


def test_uring_blocking_socket_timeout_cancels(data_file):
    fd, content = data_file
    a, b = make_pair("tcp", small=True)
    a.setblocking(True)  # the io-wq worker blocks inside splice; the timeout must cancel it
    try:
        with UringSender() as u:
            with pytest.raises(TimeoutError):
                call_bounded(u.send_slice_all, a.fileno(), fd, 0, FILE_SIZE, 100)
            assert int.from_bytes(fcntl.ioctl(u._r, FIONREAD, b"\0\0\0\0"), "little") == 0
            # the sender still works afterwards
            c, d = make_pair("unix")
            reader = Reader(d)
            reader.start()
            assert u.send_slice_all(c.fileno(), fd, 5, 100_000, 10_000) == 100_000
            c.close()
            assert reader.result() == content[5:100_005]
            d.close()
    finally:
        a.close()
        b.close()


def test_uring_close_releases_and_refuses(data_file):
    fd, _ = data_file
    u = UringSender()
    fds = (u._r, u._w, u._null)
    with u:
        pass
    for f in fds:
        with pytest.raises(OSError):
            os.fstat(f)
    u.close()  # idempotent
    a, b = make_pair("unix")
    with pytest.raises(ValueError):
        u.send_slice(a.fileno(), fd, 0, 1)
    a.close()
    b.close()


def test_facade_selection(monkeypatch, data_file):
    monkeypatch.delenv("PYBROKER_TRANSFER", raising=False)
    with sender.get_sender() as s:
        assert s.name == sender.DEFAULT
    monkeypatch.setenv("PYBROKER_TRANSFER", "io_uring")
    with sender.get_sender() as s:
        assert s.name == "io_uring" and isinstance(s, UringSender)
    with sender.get_sender("sendfile") as s:  # the argument beats the environment
        assert s.name == "sendfile"
        assert s.send_slice is core.transfer.send_slice
    monkeypatch.setenv("PYBROKER_TRANSFER", "sendfile")
    with sender.get_sender() as s:
        assert s.name == "sendfile"
        fd, content = data_file
        a, b = make_pair("unix")
        reader = Reader(b)
        reader.start()
        assert s.send_slice_all(a.fileno(), fd, 3, 5000) == 5000
        a.close()
        assert reader.result() == content[3:5003]
        b.close()
    monkeypatch.setenv("PYBROKER_TRANSFER", "carrier-pigeon")
    with pytest.raises(ValueError):
        sender.get_sender()


def test_facade_pure_impl_uses_os_sendfile():
    s = sender.SendfileSender(impl="pure")
    assert s.send_slice is core.load("transfer", "pure").send_slice

"""One client connection: size-framed requests in, responses out strictly in request order.

Why a raw non-blocking socket driven by ``loop.add_reader``/``add_writer`` and not an asyncio
Transport: file slices go out with sendfile(2) (or io_uring splice) straight on the socket fd,
and a partial sendfile must wait for writability. A Transport owns its fd (asyncio refuses
add_writer on it, and its write buffer would interleave with our direct sends); uvloop's
``loop.sendfile`` even falls back to read+write. Owning the socket keeps one ordered write
queue for both bytes and slices, and works the same on asyncio's loop and on uvloop.

Reading: one reusable receive buffer; the 4-byte size is checked before the frame buffer is
allocated; each request gets a fresh bytearray of exactly its size, so the memoryview handed to
the handler is never overwritten. Large frames are received straight into that bytearray, which
grows with the bytes received (never ahead of them by more than x4), so a size prefix alone
cannot make the broker allocate socket.request.max.bytes.

Ordering: every request takes a slot in ``_slots`` in arrival order. A synchronous response (or
None) is ready at once; an awaitable completes the slot later. Only the ready prefix of the
slots moves to the write queue, so responses (and the places of None responses) stay in order.

Write queue entries: memoryviews (gathered into one sendmsg, no copy), SliceCursors (sent with
the sender's ``send_slice``), and ints, which mark the end of a response (the bytes it held).

Backpressure: ``in_flight`` counts requests whose response is not fully written; ``held_bytes``
counts their request bytes plus the response bytes in memory. Reading stops when either passes
its bound (after the current frame, so one large request always fits) and resumes once both
fall to half. A client that does not read thus stops being read; the kernel buffers fill and
its sends block, while the broker's memory stays bounded.
"""
import asyncio
import errno
import inspect
import logging
import socket
from collections import deque

from pybroker.net.framing import SIZE, SIZE_BYTES, SliceCursor, encode_response, frame_size_error
from pybroker.security.session import Session

log = logging.getLogger(__name__)

DIRECT_RECV_MIN = 32 * 1024  # frames with at least this much left are received in place
FIRST_FRAME_BYTES = 256 * 1024  # a frame buffer starts this big and grows as its bytes arrive
_ZEROS = memoryview(bytes(FIRST_FRAME_BYTES))
MAX_GATHER_PARTS = 512  # buffers per sendmsg (IOV_MAX is 1024 on Linux)
MAX_GATHER_BYTES = 4 << 20
READS_PER_EVENT = 4  # recv calls per readiness event before yielding to other connections


class _Slot:
    """A request's place in the response order."""
    __slots__ = ("held", "done", "result", "future", "owned")

    def __init__(self, held: int):
        self.held = held
        self.done = False
        self.result = None
        self.future = None
        self.owned = False  # True when we made the task (from a coroutine) and may cancel it


class Connection:
    """A client socket owned by a Server. Public: ``id``, ``peer``, ``local``, ``closed``,
    ``close()``, ``in_flight``, ``held_bytes``, ``reading`` (False while backpressured)."""

    def __init__(self, server, sock: socket.socket, conn_id: int):
        self.server = server
        self.id = conn_id
        self.sock = sock
        self._fd = sock.fileno()
        self._loop = server.loop
        self._handler = server.handler
        self._stats = server.stats
        self._send_slice = server.sender.send_slice
        self._max_request = server.max_request_bytes
        self._max_in_flight = server.max_in_flight
        self._max_held = server.max_queued_bytes
        try:
            self.peer = tuple(sock.getpeername()[:2])
        except OSError:
            self.peer = ("?", 0)
        self.local = tuple(sock.getsockname()[:2])
        self.session = Session(server.listener_name, getattr(server, "security_protocol", "PLAINTEXT"), self.peer[0])
        if not self.session.authenticated:  # SASL: small frames only until authenticated (sasl.server.max.receive.size)
            self._max_request = min(self._max_request, getattr(server, "max_pre_auth_bytes", self._max_request))
        self.closed = False
        self.close_callbacks: list = []  # called with this connection once it closes (state tied to it)
        self.in_flight = 0
        self.held_bytes = 0
        self.last_active = self._loop.time()
        self._rbuf = bytearray(server.recv_buffer_bytes)
        self._rview = memoryview(self._rbuf)
        self._rstart = self._rend = 0
        self._frame = None  # the bytearray of a request still being received
        self._frame_view = None
        self._frame_size = 0  # the size announced for that request (the buffer grows to it)
        self._filled = 0
        self._slots = deque()  # only slots behind a pending one; empty in the common case
        self._wq = deque()
        self._reading = False
        self._paused = False  # backpressure
        self._eof = False  # the peer finished sending
        self._draining = False  # the server is stopping
        self._want_write = False  # writer registered: the socket was full
        self._resume_scheduled = False
        self._idle_handle = None
        self._muted = False  # throttled by a client quota: not read until the throttle time passes
        self._unmute_handle = None
        self._on_written = getattr(server, "on_response_written", None)  # metrics; None: off
        self.timings = deque() if self._on_written is not None else None  # the metrics' request records

    def __repr__(self) -> str:
        return f"Connection(id={self.id} peer={self.peer[0]}:{self.peer[1]})"

    def allow_full_requests(self) -> None:
        """SASL authentication succeeded: requests up to socket.request.max.bytes from now on."""
        self._max_request = self.server.max_request_bytes

    @property
    def reading(self) -> bool:
        return self._reading

    @property
    def queued_write_entries(self) -> int:
        return len(self._wq)

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._start_reading()
        idle = self.server.max_idle_ms
        if idle >= 0:
            self._idle_handle = self._loop.call_later(idle / 1000, self._check_idle)

    def close(self) -> None:
        """Close at once: queued responses are dropped, pending handlers detached."""
        if self.closed:
            return
        self.closed = True
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False
        if self._want_write:
            self._loop.remove_writer(self._fd)
            self._want_write = False
        if self._idle_handle is not None:
            self._idle_handle.cancel()
            self._idle_handle = None
        if self._unmute_handle is not None:
            self._unmute_handle.cancel()
            self._unmute_handle = None
        for slot in self._slots:
            fut = slot.future
            if fut is not None and not fut.done():
                if slot.owned:
                    fut.cancel()
                else:
                    # a future owned elsewhere (e.g. a delayed op): just stop listening to it
                    fut.remove_done_callback(self._on_done)
        self._slots.clear()
        self._wq.clear()
        self._frame = self._frame_view = None
        self.held_bytes = self.in_flight = 0
        try:
            self.sock.close()
        except OSError:
            pass
        self.server._connection_closed(self)
        for callback in self.close_callbacks:
            try:
                callback(self)
            except Exception:  # one holder's cleanup must not stop the others'
                log.exception("a close callback of connection %d failed", self.id)
        self.close_callbacks.clear()

    def drain(self) -> None:
        """Stop taking requests; close once the responses in flight are written."""
        self._draining = True
        self._stop_reading()
        if self.in_flight == 0:
            self.close()

    def _check_idle(self) -> None:
        self._idle_handle = None
        if self.closed:
            return
        idle = self.server.max_idle_ms / 1000
        now = self._loop.time()
        due = self.last_active + idle
        if self.in_flight == 0 and now >= due:
            log.info("%r: closing, idle for more than %d ms (connections.max.idle.ms)",
                     self, self.server.max_idle_ms)
            self.close()
            return
        delay = idle if self.in_flight else due - now
        self._idle_handle = self._loop.call_later(max(delay, 0.001), self._check_idle)

    # ---- reading ---------------------------------------------------------------------------

    def _start_reading(self) -> None:
        if not self._reading and not self.closed:
            self._loop.add_reader(self._fd, self._on_readable)
            self._reading = True

    def _stop_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False

    def _on_readable(self) -> None:
        if not self._reading:
            return
        sock = self.sock
        for _ in range(READS_PER_EVENT):
            frame = self._frame
            try:
                if frame is not None and self._frame_size - self._filled >= DIRECT_RECV_MIN:
                    if self._filled == len(frame):
                        self._grow_frame(self._filled + 1)
                    want = len(frame) - self._filled
                    n = sock.recv_into(self._frame_view[self._filled:], want)
                    self._filled += n
                else:
                    if self._rstart:
                        self._compact()
                    want = len(self._rbuf) - self._rend
                    n = sock.recv_into(self._rview[self._rend:], want)
                    self._rend += n
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                log.info("%r: closing after read error: %s", self, exc)
                self.close()
                return
            if n == 0:
                self._on_eof()
                break
            self._stats.bytes_in += n
            self.last_active = self._loop.time()
            self._parse()
            if not self._reading or n < want:
                break
        if not self.closed:
            self._flush()

    def _compact(self) -> None:
        start, end = self._rstart, self._rend
        if start < end:
            self._rbuf[:end - start] = self._rview[start:end]
        self._rstart, self._rend = 0, end - start

    def _on_eof(self) -> None:
        self._eof = True
        self._stop_reading()
        if self.in_flight == 0:
            self.close()

    def _parse(self) -> None:
        """Dispatch every complete frame in the receive buffer (until paused or draining)."""
        buf, view = self._rbuf, self._rview
        start, end = self._rstart, self._rend
        while not (self._paused or self._muted or self._draining or self.closed):
            frame = self._frame
            if frame is None:
                if end - start < SIZE_BYTES:
                    break
                size = SIZE.unpack_from(buf, start)[0]
                error = frame_size_error(size, self._max_request)
                if error is not None:
                    log.warning("%r: closing: %s", self, error)
                    self._flush()  # best effort: responses to the valid requests before it
                    self.close()
                    return
                start += SIZE_BYTES
                if end - start >= size:
                    # whole frame buffered: one allocation + copy into its own bytearray
                    frame = buf[start:start + size]
                    start += size
                    self._dispatch(frame)
                    continue
                # sized by the bytes that arrive, not the announced size: 4 bytes claiming
                # socket.request.max.bytes must not make us allocate (and zero) that much
                frame = self._frame = bytearray(min(size, FIRST_FRAME_BYTES))
                self._frame_view = memoryview(frame)
                self._frame_size = size
                self._filled = 0
            filled = self._filled
            take = min(self._frame_size - filled, end - start)
            if take:
                if filled + take > len(frame):
                    self._grow_frame(filled + take)
                self._frame_view[filled:filled + take] = view[start:start + take]
                start += take
                filled = self._filled = filled + take
            if filled < self._frame_size:
                break
            self._frame = self._frame_view = None
            self._dispatch(frame)
        if start == end:
            start = end = 0
        self._rstart, self._rend = start, end

    def _grow_frame(self, at_least: int) -> None:
        """Enlarge the frame buffer (x4, at most to the announced size) to ``at_least``."""
        frame = self._frame
        new = min(self._frame_size, max(at_least, 4 * len(frame)))
        self._frame_view.release()  # a bytearray with a live export cannot be resized
        while len(frame) < new:  # from a cached zero block: no fresh temporary to fault in
            frame += _ZEROS[:new - len(frame)]
        self._frame_view = memoryview(frame)

    # ---- requests --------------------------------------------------------------------------

    def _dispatch(self, frame: bytearray) -> None:
        self.in_flight += 1
        self.held_bytes += len(frame)
        self._stats.requests += 1
        try:
            result = self._handler.handle(memoryview(frame), self)
        except Exception as exc:
            self._fail("handler failed", exc)
            return
        if self.closed:
            return
        if result is not None and type(result) is not list and inspect.isawaitable(result):
            slot = _Slot(len(frame))
            slot.owned = not isinstance(result, asyncio.Future)
            try:
                fut = slot.future = asyncio.ensure_future(result)
            except Exception as exc:
                self._fail("handler returned a bad awaitable", exc)
                return
            self._slots.append(slot)
            fut.add_done_callback(self._on_done)
        elif self._slots:
            slot = _Slot(len(frame))
            slot.done, slot.result = True, result
            self._slots.append(slot)
        else:
            self._enqueue(result, len(frame))  # None, or parts that encode_response checks
        if self.in_flight >= self._max_in_flight or self.held_bytes > self._max_held:
            self._paused = True
            self._stop_reading()

    def _on_done(self, fut) -> None:
        if self.closed:
            return
        for slot in self._slots:
            if slot.future is fut:
                break
        else:
            return
        if fut.cancelled():
            self._fail("handler cancelled", asyncio.CancelledError())
            return
        exc = fut.exception()
        if exc is not None:
            self._fail("handler failed", exc)
            return
        slot.done, slot.result, slot.future = True, fut.result(), None
        slots = self._slots
        while slots and slots[0].done and not self.closed:
            head = slots.popleft()
            self._enqueue(head.result, head.held)
        if not self.closed:
            self._flush()

    def _enqueue(self, result, held: int) -> None:
        """Move a ready response (or None) to the write queue, with its end marker."""
        if result is not None:
            try:
                entries, in_memory = encode_response(result)
            except Exception as exc:
                self._fail("handler returned a bad response", exc)
                return
            self._wq.extend(entries)
            held += in_memory
            self.held_bytes += in_memory
        self._wq.append(held)

    def _fail(self, what: str, exc: BaseException, flush: bool = True) -> None:
        """Log one line and close; ``flush``: first try to send the complete responses queued."""
        log.warning("%r: closing: %s: %s: %s", self, what, type(exc).__name__, exc)
        log.debug("%r: %s", self, what, exc_info=exc)
        if flush and not self.closed:
            self._flush()
        self.close()

    # ---- writing ---------------------------------------------------------------------------

    def _flush(self) -> None:
        if not self._want_write:
            self._send_queued()

    def _on_writable(self) -> None:
        if not self.closed:
            self._send_queued()

    def _send_queued(self) -> None:
        """Send queued entries until done or the socket is full (then wait for writability)."""
        q = self._wq
        stats = self._stats
        finished = False
        while q:
            head = q[0]
            kind = type(head)
            if kind is int:
                q.popleft()
                self.in_flight -= 1
                self.held_bytes -= head
                finished = True
                if self._on_written is not None:
                    self._on_written(self)
                continue
            if kind is SliceCursor:
                try:
                    n = self._send_slice(self._fd, head.fd, head.position, head.remaining)
                except EOFError as exc:
                    # the size prefix is already out: the only safe answer is to hang up
                    self._fail("file slice shorter than announced", exc, flush=False)
                    return
                except OSError as exc:
                    self._write_error(exc)
                    return
                stats.bytes_out += n
                head.position += n
                head.remaining -= n
                if head.remaining:
                    break
                q.popleft()
                continue
            bufs = []
            total = 0
            for entry in q:
                kind = type(entry)
                if kind is memoryview:
                    bufs.append(entry)
                    total += entry.nbytes
                    if len(bufs) >= MAX_GATHER_PARTS or total >= MAX_GATHER_BYTES:
                        break
                elif kind is not int:
                    break
            try:
                n = self.sock.sendmsg(bufs) if len(bufs) > 1 else self.sock.send(bufs[0])
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as exc:
                self._write_error(exc)
                return
            stats.bytes_out += n
            sent = n
            while sent:
                entry = q[0]
                if type(entry) is int:
                    q.popleft()
                    self.in_flight -= 1
                    self.held_bytes -= entry
                    finished = True
                    if self._on_written is not None:
                        self._on_written(self)
                    continue
                size = entry.nbytes
                if sent >= size:
                    q.popleft()
                    sent -= size
                else:
                    q[0] = entry[sent:]
                    sent = 0
            if n < total:
                break
        if q:
            if not self._want_write:
                self._watch_writable(True)
        elif self._want_write:
            self._watch_writable(False)
        if finished:
            self._after_responses()

    def _watch_writable(self, on: bool) -> None:
        """Start (the socket is full) or stop (it drained) the loop's writability callbacks."""
        if on:
            self._loop.add_writer(self._fd, self._on_writable)
        else:
            self._loop.remove_writer(self._fd)
        self._want_write = on

    def _write_error(self, exc: OSError) -> None:
        quiet = exc.errno in (errno.EPIPE, errno.ECONNRESET)
        (log.debug if quiet else log.info)("%r: closing after write error: %s", self, exc)
        self.close()

    def _after_responses(self) -> None:
        if self.in_flight == 0:
            self.last_active = self._loop.time()
            if self._eof or self._draining:
                self.close()
                return
        if (self._paused and self.in_flight <= self._max_in_flight // 2
                and self.held_bytes <= self._max_held // 2 and not self._resume_scheduled):
            # resume outside the write path: parsing buffered frames writes again
            self._resume_scheduled = True
            self._loop.call_soon(self._resume)

    def _resume(self) -> None:
        self._resume_scheduled = False
        if self.closed or not self._paused:
            return
        self._paused = False
        self._read_again()

    def _read_again(self) -> None:
        """After a pause or a mute: dispatch what is buffered, then read the socket unless held again."""
        self._parse()
        if self.closed:
            return
        if not (self._paused or self._muted or self._eof or self._draining):
            self._start_reading()
        self._flush()

    # ---- quota throttling (KIP-219) ---------------------------------------------------------

    @property
    def muted(self) -> bool:
        return self._muted

    def mute(self, ms: int) -> None:
        """Stop reading requests for ``ms`` (a throttled response goes out at once; the client
        waits before its next request, and a client that does not is simply not read)."""
        if self.closed or ms <= 0:
            return
        self._muted = True
        self._stop_reading()
        due = self._loop.time() + ms / 1000
        if self._unmute_handle is not None:
            if self._unmute_handle.when() >= due:
                return
            self._unmute_handle.cancel()
        self._unmute_handle = self._loop.call_at(due, self._unmute)

    def _unmute(self) -> None:
        self._unmute_handle = None
        if self.closed or not self._muted:
            return
        self._muted = False
        self._read_again()

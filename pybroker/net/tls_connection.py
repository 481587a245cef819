"""A Connection over TLS (SSL and SASL_SSL listeners), with the standard library's ``ssl``.

TLS runs over memory buffers (``SSLContext.wrap_bio``), as asyncio's own TLS does, while the
socket stays the raw non-blocking one the event loop watches. Why not ``SSLSocket``: OpenSSL
then reads each TLS record with two small syscalls (header, body) and writes each record with
one; librdkafka sends records of a few KiB, so that cost more than the cryptography. Here one
``recv`` of up to RAW_READ bytes feeds many records, and one ``send`` carries many.

First the handshake, driven by readiness events and bounded by the server's
``tls_handshake_timeout_ms``: a client that speaks plaintext, garbage, an old protocol or
presents an untrusted certificate fails it (it gets OpenSSL's alert when the socket takes it) and
that socket alone is closed. Then requests flow as on a plaintext Connection, except:

- Reading: records are decrypted straight into the receive buffer or the frame being filled;
  bytes buffered inside TLS are drained whenever reading (re)starts, not only on socket events.
- Writing: no sendmsg and no sendfile (the kernel cannot encrypt here: Python 3.11's ``ssl`` has
  no kernel-TLS switch). Queued buffers and file slices (read with ``preadv``) are gathered into
  one scratch buffer of up to WRITE_CHUNK bytes and encrypted in one call; the next chunk is
  encrypted only once the ciphertext of the previous one has left, so memory stays bounded. A
  response counts as written once its last byte has left.
- The principal: on SSL listeners, the client certificate's subject DN mapped through
  ``ssl.principal.mapping.rules`` (User:ANONYMOUS without a certificate).

Plaintext connections never run any of this: the Server picks the class once per listener.
"""
import logging
import os
import ssl

from pybroker.net.connection import DIRECT_RECV_MIN, Connection
from pybroker.net.framing import SliceCursor
from pybroker.security.principal import KafkaPrincipal
from pybroker.security.ssl_principal import subject_dn

log = logging.getLogger(__name__)

RAW_READ = 256 * 1024  # ciphertext bytes per recv
RAW_READS_PER_EVENT = 4  # recv calls per readiness event before yielding to other connections
WRITE_CHUNK = 256 * 1024  # plaintext bytes encrypted per write: 16 records, one loop turn of work
DIRECT_SEND_MIN = 16 * 1024  # a queued buffer this big is encrypted as it is, not copied first


class TlsConnection(Connection):
    """A Connection whose bytes go through TLS; ``tls_version`` once handshaken."""

    def __init__(self, server, sock, conn_id: int):
        super().__init__(server, sock, conn_id)
        self._tls = server.tls
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = self._tls.context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._cipher_out = None  # ciphertext taken from the outgoing BIO that the socket has not taken yet
        self._handshaking = False
        self._hs_reader = self._hs_writer = False
        self._hs_timer = None

    @property
    def tls_version(self) -> str | None:
        return None if self._handshaking or self.closed else self._ssl.version()

    # ---- socket side: ciphertext ------------------------------------------------------------

    def _recv_raw(self) -> int | None:
        """Move ciphertext from the socket into TLS: bytes moved, 0 at end of stream, -1 if none yet,
        None after a read error (the connection is closed)."""
        scratch = self.server.tls_rx_scratch
        if scratch is None:  # one per listener: its bytes go into TLS at once
            scratch = self.server.tls_rx_scratch = memoryview(bytearray(RAW_READ))
        try:
            n = self.sock.recv_into(scratch, RAW_READ)
        except (BlockingIOError, InterruptedError):
            return -1
        except OSError as exc:
            log.info("%r: closing after read error%s: %s", self,
                     " during the TLS handshake" if self._handshaking else "", exc)
            self.close()
            return None
        if n:
            self._incoming.write(scratch[:n])
        return n

    def _send_cipher(self) -> bool:
        """Send TLS output; True once all of it has left (False: the socket is full). OSError passes."""
        data = self._cipher_out
        while True:
            if data is None:
                if not self._outgoing.pending:
                    self._cipher_out = None
                    return True
                data = memoryview(self._outgoing.read())
            try:
                n = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            if n < len(data):
                self._cipher_out = data[n:]
                return False
            data = None

    # ---- handshake -------------------------------------------------------------------------

    def start(self) -> None:
        self._handshaking = True
        self._hs_timer = self._loop.call_later(self.server.tls_handshake_timeout_ms / 1000, self._handshake_timeout)
        self._handshake_step()

    def _on_handshake_event(self) -> None:
        if self.closed:
            return
        if self._hs_reader:
            n = self._recv_raw()
            if n is None:
                return
            if n == 0:
                log.info("%r: closing: the client left during the TLS handshake", self)
                self.close()
                return
        self._handshake_step()

    def _handshake_step(self) -> None:
        try:
            self._ssl.do_handshake()
            done = True
        except ssl.SSLWantReadError:
            done = False
        except ssl.SSLError as exc:  # plaintext, garbage, old protocol, untrusted certificate
            log.info("%r: closing: TLS handshake failed: %s", self, exc)
            self._best_effort_alert()
            self.close()
            return
        try:
            flushed = self._send_cipher()
        except OSError as exc:
            log.info("%r: closing: write error during the TLS handshake: %s", self, exc)
            self.close()
            return
        if not done or not flushed:
            self._wait_handshake(read=not done, write=not flushed)
            return
        self._wait_handshake(read=False, write=False)
        self._handshaking = False
        self._hs_timer.cancel()
        self._hs_timer = None
        log.debug("%r: TLS handshake done: %s %s", self, self._ssl.version(), self._ssl.cipher()[0])
        if self.session.protocol == "SSL" and not self._set_principal():
            return
        super().start()

    def _best_effort_alert(self) -> None:
        """Tell the client why (OpenSSL queued an alert) if the socket takes it right now."""
        try:
            self._send_cipher()
        except OSError:
            pass

    def _wait_handshake(self, read: bool, write: bool) -> None:
        loop, fd = self._loop, self._fd
        if read != self._hs_reader:
            if read:
                loop.add_reader(fd, self._on_handshake_event)
            else:
                loop.remove_reader(fd)
            self._hs_reader = read
        if write != self._hs_writer:
            if write:
                loop.add_writer(fd, self._on_handshake_event)
            else:
                loop.remove_writer(fd)
            self._hs_writer = write

    def _handshake_timeout(self) -> None:
        self._hs_timer = None
        if self._handshaking and not self.closed:
            log.info("%r: closing: no TLS handshake within %d ms", self, self.server.tls_handshake_timeout_ms)
            self.close()

    def _set_principal(self) -> bool:
        """The client certificate's subject, mapped; False (and closed) when no rule maps it."""
        cert = self._ssl.getpeercert()
        if not cert:
            log.debug("%r: no client certificate: %s", self, self.session.principal)
            return True
        dn = subject_dn(cert)
        try:
            name = self._tls.principal_mapper.name(dn)
        except (ValueError, IndexError) as exc:
            log.warning("%r: closing: client certificate %s: %s", self, dn, exc)
            self.close()
            return False
        self.session.principal = KafkaPrincipal("User", name)
        log.debug("%r: client certificate %s is principal %s", self, dn, self.session.principal)
        return True

    def close(self) -> None:
        if self._hs_timer is not None:
            self._hs_timer.cancel()
            self._hs_timer = None
        if not self.closed:
            self._wait_handshake(read=False, write=False)
        self._cipher_out = None
        super().close()

    # ---- reading ---------------------------------------------------------------------------

    def _start_reading(self) -> None:
        super()._start_reading()
        if self._reading and (self._incoming.pending or self._ssl.pending()):
            self._loop.call_soon(self._on_readable)  # bytes wait inside TLS, not on the socket

    def _on_readable(self) -> None:
        if not self._reading:
            return
        eof = False
        for _ in range(RAW_READS_PER_EVENT):
            n = self._recv_raw()
            if n is None:
                return
            if n == 0:
                eof = True
                break
            if n < RAW_READ:
                break
        self._decrypt()
        if eof and not self.closed:
            self._on_eof()
        if not self.closed:
            self._flush()

    def _decrypt(self) -> None:
        """Decrypt buffered records into the receive buffer or the frame, parsing as they come."""
        tls = self._ssl
        while self._reading:
            frame = self._frame
            try:
                if frame is not None and self._frame_size - self._filled >= DIRECT_RECV_MIN:
                    if self._filled == len(frame):
                        self._grow_frame(self._filled + 1)
                    n = tls.read(len(frame) - self._filled, self._frame_view[self._filled:])
                    self._filled += n
                else:
                    if self._rstart:
                        self._compact()
                    n = tls.read(len(self._rbuf) - self._rend, self._rview[self._rend:])
                    self._rend += n
            except ssl.SSLWantReadError:
                return
            except ssl.SSLError as exc:
                log.info("%r: closing after a TLS error: %s", self, exc)
                self.close()
                return
            if n == 0:  # the client's close_notify
                self._answer_close_notify()
                return
            self._stats.bytes_in += n
            self.last_active = self._loop.time()
            self._parse()

    def _answer_close_notify(self) -> None:
        """Answer with ours (asyncio clients wait for it before they close), then end as at EOF;
        with responses still due, those go out first and the close ends it."""
        if self.in_flight == 0:
            try:
                self._ssl.unwrap()
            except ssl.SSLError:
                pass
            self._best_effort_alert()
        self._on_eof()

    # ---- writing ---------------------------------------------------------------------------

    def _send_queued(self) -> None:
        """Encrypt and send queued entries until done or the socket is full."""
        q = self._wq
        finished = False
        try:
            while self._send_cipher():
                # everything encrypted so far has left: responses ending here are written
                while q and type(q[0]) is int:
                    finished = True
                    self._response_written(q.popleft())
                if not q:
                    break
                chunk = self._next_chunk()
                if chunk is None:
                    return  # closed
                self._ssl.write(chunk)
                self._advance(len(chunk))
        except (ssl.SSLError, OSError) as exc:
            self._write_error(exc)
            return
        if self._cipher_out is not None:
            if not self._want_write:
                self._watch_writable(True)
        elif self._want_write:
            self._watch_writable(False)
        if finished and not self.closed:
            self._after_responses()

    def _response_written(self, held: int) -> None:
        self.in_flight -= 1
        self.held_bytes -= held
        if self._on_written is not None:
            self._on_written(self)

    def _next_chunk(self):
        """The next bytes to encrypt, from the head of the queue (advanced once they are encrypted)."""
        head = self._wq[0]
        if type(head) is memoryview and head.nbytes >= DIRECT_SEND_MIN:
            return head[:WRITE_CHUNK]
        scratch = self.server.tls_scratch
        if scratch is None:  # one per listener: the loop is single-threaded and the bytes are encrypted at once
            scratch = self.server.tls_scratch = memoryview(bytearray(WRITE_CHUNK))
        filled = 0
        for entry in self._wq:
            kind = type(entry)
            if kind is int:
                continue
            room = WRITE_CHUNK - filled
            if not room:
                break
            if kind is SliceCursor:
                want = min(entry.remaining, room)
                try:
                    got = os.preadv(entry.fd, [scratch[filled:filled + want]], entry.position)
                except OSError as exc:
                    self._fail("cannot read a file slice", exc, flush=False)
                    return None
                if got < want:
                    # the size prefix is already out: the only safe answer is to hang up
                    self._fail("file slice shorter than announced", EOFError(f"{got} < {want} bytes"), flush=False)
                    return None
                filled += got
            else:
                take = min(entry.nbytes, room)
                scratch[filled:filled + take] = entry[:take]
                filled += take
                if take < entry.nbytes:
                    break
        return scratch[:filled]

    def _advance(self, n: int) -> None:
        """Drop ``n`` encrypted bytes from the head of the queue (end markers inside them too)."""
        q = self._wq
        while n:
            entry = q[0]
            kind = type(entry)
            if kind is int:
                q.popleft()
                self._response_written(entry)
            elif kind is SliceCursor:
                take = min(n, entry.remaining)
                entry.position += take
                entry.remaining -= take
                n -= take
                if not entry.remaining:
                    q.popleft()
            elif n >= entry.nbytes:
                n -= entry.nbytes
                q.popleft()
            else:
                q[0] = entry[n:]
                n = 0

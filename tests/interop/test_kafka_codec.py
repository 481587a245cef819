"""Hot-path codecs against what real clients send: Produce v8 requests from confluent-kafka and kafka-python
captured live through a recording proxy in front of a real broker, decoded the same by every codec
(the in-process differential and golden-byte cases: tests/unit/test_kafka_codec.py)."""
import socket
import struct

import pytest

from tests.proxy_base import ThreadedProxy
from tests.unit.test_kafka_codec import decode_all, header_and_body


class RecordingProxy(ThreadedProxy):
    """TCP proxy on 127.0.0.1 that forwards to a broker and keeps every client->broker frame.

    Every loop ends when close() is called or ``lifetime`` seconds have passed."""

    def __init__(self, lifetime=60.0):
        super().__init__(lifetime)
        self.frames = []  # request frames without the size prefix, in arrival order

    def requests(self, api_key):
        with self._lock:
            return [f for f in self.frames if struct.unpack_from(">h", f)[0] == api_key]

    def _accept(self):
        while self._running():
            try:
                client, _ = self.sock.accept()
            except OSError:  # timeout included
                continue
            upstream = socket.create_connection(("127.0.0.1", self._target), timeout=10)
            for s in (client, upstream):
                s.settimeout(0.2)
                self._socks.append(s)
            self._spawn(self._pump, client, upstream, True)
            self._spawn(self._pump, upstream, client, False)

    def _pump(self, src, dst, record):
        pending = bytearray()
        while self._running():
            try:
                data = src.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not data:
                break
            if record:
                pending += data
                while len(pending) >= 4 and len(pending) >= 4 + struct.unpack_from(">i", pending)[0]:
                    size = struct.unpack_from(">i", pending)[0]
                    with self._lock:
                        self.frames.append(bytes(pending[4:4 + size]))
                    del pending[:4 + size]
            try:
                dst.sendall(data)
            except OSError:
                break
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def proxied_broker(broker_factory):
    proxy = RecordingProxy()
    # clients must reach the broker through the proxy, so the broker advertises the proxy's port
    b = broker_factory(overrides={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}",
                                  "num.partitions": "3"})
    proxy.start(b.port)
    yield proxy
    proxy.close()


def test_live_capture_real_clients(proxied_broker):
    from confluent_kafka import Producer
    from kafka import KafkaProducer
    boot = f"127.0.0.1:{proxied_broker.port}"
    p = Producer({"bootstrap.servers": boot, "linger.ms": 50, "acks": "all"})
    for i in range(3):
        p.produce("live", value=b"c-%d" % i, key=b"k", partition=i)
    assert p.flush(20) == 0
    kp = KafkaProducer(bootstrap_servers=boot, linger_ms=50, acks="all")
    try:
        futures = [kp.send("live", value=b"kp-%d" % i, partition=i) for i in range(3)]
        futures.append(kp.send("live", key=b"tombstone", value=None, partition=1))
        kp.flush(20)
        for f in futures:
            f.get(20)
    finally:
        kp.close(5)
    frames = proxied_broker.requests(0)
    assert frames
    seen = set()
    for raw in frames:
        frame = memoryview(bytearray(raw))
        header, pos = header_and_body(frame)
        assert 7 <= header.request_api_version <= 11
        data = decode_all(frame, pos, header.request_api_version)
        seen.update((header.client_id, t.name, p.index) for t in data.topics for p in t.partitions)
    assert {(name, part) for _, name, part in seen} == {("live", i) for i in range(3)}
    assert len({client for client, _, _ in seen}) == 2


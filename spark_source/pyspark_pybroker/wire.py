"""A blocking Kafka-protocol connection for Spark tasks: framing, versions, pipelined requests.

A read task runs in a Spark Python worker that handles one partition at a time and hands each
Arrow batch to Spark before asking for the next; a plain socket with one Fetch kept in flight
fits that better than an event loop thread. Responses arrive in request order (Kafka's rule for
one connection), so ``send`` then ``receive`` may be interleaved freely.
"""
import collections
import socket
import struct

from pybroker.client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, error_for
from pybroker.protocol import DecodeError, REQUESTS, decode_response, encode_request
from pybroker.protocol.errors import ErrorCode

API_VERSIONS, METADATA, FETCH = 18, 3, 1
# api key -> (lowest, highest) version built and parsed here
VERSIONS = {API_VERSIONS: (0, 3), METADATA: (1, 8), FETCH: (4, 11)}
_SIZE = struct.Struct(">i")


class BrokerLink:
    """One blocking connection to one broker."""

    def __init__(self, host: str, port: int, client_id: str, timeout_s: float,
                 max_response: int = 1 << 30):
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self.max_response = max_response
        self._pending = collections.deque()  # (correlation id, api key, version) in send order
        self._correlation = 0
        self._spare = bytearray(0)  # reused receive buffer (see ``receive(reuse=True)``)
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to {self.address}: {exc}") from None
        self.sock.settimeout(timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.versions = {}
        try:
            self._handshake()
        except BaseException:
            self.close()
            raise

    def _handshake(self) -> None:
        api = REQUESTS[API_VERSIONS]
        req = api(client_software_name="pyspark-pybroker", client_software_version="1")
        self.send(req, VERSIONS[API_VERSIONS][1])
        try:
            resp = self.receive()
        except DecodeError:
            resp = None
        if resp is None or resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
            # an older broker answers in v0 form: ask again with v0
            self.send(req, 0)
            resp = self.receive()
        if resp.error_code:
            raise error_for(resp.error_code, f"ApiVersions from {self.address}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version(self, api_key: int) -> int:
        lo, hi = VERSIONS[api_key]
        blo, bhi = self.versions.get(api_key, (0, -1))
        if max(lo, blo) > min(hi, bhi):
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                             f"{self.address} offers versions {blo}-{bhi} of API {api_key}, "
                             f"this reader speaks {lo}-{hi}")
        return min(hi, bhi)

    def send(self, obj, version: int | None = None) -> None:
        """Send a request; its response comes from a later ``receive``."""
        if version is None:
            version = self.version(obj.API_KEY)
        self._correlation += 1
        frame = encode_request(version, self._correlation, self.client_id, obj)
        try:
            self.sock.sendall(_SIZE.pack(len(frame)) + frame)
        except socket.timeout:
            raise KafkaTimeoutError(f"sending to {self.address} timed out") from None
        except OSError as exc:
            raise KafkaConnectionError(f"connection to {self.address} failed: {exc}") from None
        self._pending.append((self._correlation, obj.API_KEY, version))

    def receive(self, reuse: bool = False):
        """The decoded body of the oldest unanswered request. With ``reuse``, the frame is read
        into a buffer kept for the next such call: the caller must be done with the previous
        body (its record views point into that buffer) before receiving again."""
        correlation, api_key, version = self._pending.popleft()
        try:
            size = _SIZE.unpack(self._recv_exact(4))[0]
            if not 4 <= size <= self.max_response:
                raise KafkaConnectionError(f"{self.address} announced a {size}-byte response")
            if reuse:
                if len(self._spare) < size:
                    self._spare = bytearray(max(size, 2 * len(self._spare)))
                frame = memoryview(self._spare)[:size]
                self._recv_into(frame)
            else:
                frame = self._recv_exact(size)
        except socket.timeout:
            raise KafkaTimeoutError(f"no response from {self.address} in time") from None
        except OSError as exc:
            raise KafkaConnectionError(f"connection to {self.address} failed: {exc}") from None
        header, body = decode_response(frame, api_key, version)
        if header.correlation_id != correlation:
            raise KafkaConnectionError(f"{self.address} answered request {header.correlation_id}, "
                                       f"expected {correlation}")
        return body

    def request(self, obj, version: int | None = None):
        self.send(obj, version)
        return self.receive()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def _recv_exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        self._recv_into(memoryview(buf))
        return buf

    def _recv_into(self, view) -> None:
        got, n = 0, len(view)
        recv_into = self.sock.recv_into
        while got < n:
            k = recv_into(view[got:])
            if k == 0:
                raise KafkaConnectionError(f"{self.address} closed the connection")
            got += k

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def find_leader(bootstrap: list, topic: str, partition: int, client_id: str, timeout_s: float):
    """(host, port) of the leader of topic-partition, asking the bootstrap servers in turn."""
    api = REQUESTS[METADATA]
    last_error = None
    for host, port in bootstrap:
        try:
            link = BrokerLink(host, port, client_id, timeout_s)
        except KafkaError as exc:
            last_error = exc
            continue
        try:
            version = link.version(METADATA)
            req = api(topics=[api.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False,
                      include_cluster_authorized_operations=False,
                      include_topic_authorized_operations=False)
            resp = link.request(req, version)
        finally:
            link.close()
        brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        for t in resp.topics:
            if t.name != topic:
                continue
            if t.error_code:
                raise error_for(t.error_code, f"metadata of topic {topic!r}")
            for p in t.partitions:
                if p.partition_index == partition:
                    if p.error_code and p.leader_id < 0:
                        raise error_for(p.error_code, f"metadata of {topic}-{partition}")
                    if p.leader_id not in brokers:
                        raise error_for(ErrorCode.LEADER_NOT_AVAILABLE,
                                        f"no leader for {topic}-{partition}")
                    return brokers[p.leader_id]
        raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} does not exist")
    raise last_error or KafkaConnectionError("no bootstrap server answered")

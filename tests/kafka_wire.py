"""A tiny synchronous Kafka wire client for tests: one socket, one request at a time, timeouts.

Requests are encoded with pybroker.protocol's generated codecs (the same ones the broker
uses, so a test can also hand-craft raw bytes to exercise what the codecs would refuse).
"""
import socket
import struct

from pybroker.protocol import REQUESTS, decode_response, encode_request

TIMEOUT = 10.0
SIZE = struct.Struct(">i")
MAX_RESPONSE = 64 << 20  # a test response larger than this is a bug, not data


class ConnectionClosed(Exception):
    """The broker closed the connection (EOF or reset) before a whole response arrived."""


class WireClient:
    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = TIMEOUT,
                 client_id: str = "kafka-wire-test"):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.client_id = client_id
        self._correlation = 0

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- raw bytes ------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, body: bytes) -> None:
        """``body`` with its 4-byte size prefix."""
        self.sock.sendall(SIZE.pack(len(body)) + bytes(body))

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            except (ConnectionResetError, BrokenPipeError) as exc:
                raise ConnectionClosed(str(exc)) from None
            if not chunk:
                raise ConnectionClosed(f"EOF after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        """One response frame without its size prefix."""
        size = SIZE.unpack(self._recv_exact(4))[0]
        if not 0 <= size <= MAX_RESPONSE:
            raise AssertionError(f"implausible response size {size}")
        return self._recv_exact(size)

    def is_closed_by_peer(self, timeout: float = TIMEOUT) -> bool:
        """True when the broker closes the connection within ``timeout`` s without sending
        anything more; AssertionError if it sends bytes instead; False on timeout."""
        old = self.sock.gettimeout()
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        finally:
            self.sock.settimeout(old)
        if data:
            raise AssertionError(f"expected the connection to close, got {len(data)} bytes: {data[:64]!r}")
        return True

    # ---- requests -------------------------------------------------------------------------

    def encode(self, api_key: int, version: int, request) -> tuple[int, bytearray]:
        self._correlation += 1
        return self._correlation, encode_request(version, self._correlation, self.client_id, request)

    def request(self, request, version: int):
        """Send ``request`` (a generated request object) at ``version``; the decoded response."""
        correlation, body = self.encode(request.API_KEY, version, request)
        self.send_frame(body)
        header, response = decode_response(self.recv_frame(), request.API_KEY, version)
        assert header.correlation_id == correlation, (header.correlation_id, correlation)
        return response

    def send_only(self, request, version: int) -> int:
        """Send without reading (acks=0 produce, pipelining); returns the correlation id."""
        correlation, body = self.encode(request.API_KEY, version, request)
        self.send_frame(body)
        return correlation

    # ---- conveniences ---------------------------------------------------------------------

    def api_versions(self, version: int = 3):
        return self.request(REQUESTS[18](client_software_name="kafka-wire", client_software_version="1"),
                            version)

    def metadata(self, topics=None, version: int = 8, allow_auto_create: bool = False):
        req = REQUESTS[3]
        topic_list = None if topics is None else [req.MetadataRequestTopic(name=t) for t in topics]
        return self.request(req(topics=topic_list, allow_auto_topic_creation=allow_auto_create), version)

    def create_topic(self, name: str, partitions: int = 1, configs: dict | None = None):
        req = REQUESTS[19]
        topic = req.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                                   assignments=[],
                                   configs=[req.CreatableTopicConfig(name=k, value=str(v))
                                            for k, v in (configs or {}).items()])
        resp = self.request(req(topics=[topic], timeout_ms=10000, validate_only=False), 4)
        assert resp.topics[0].error_code == 0, resp.topics[0]
        return resp

    def produce(self, topic: str, partition: int, records, acks: int = -1, version: int = 8,
                transactional_id=None):
        """One partition's records (bytes, or None for null); the partition's response."""
        req = REQUESTS[0]
        request = req(transactional_id=transactional_id, acks=acks, timeout_ms=10000, topic_data=[
            req.TopicProduceData(name=topic, partition_data=[
                req.PartitionProduceData(index=partition, records=records)])])
        resp = self.request(request, version)
        return resp.responses[0].partition_responses[0]

    def list_offset(self, topic: str, partition: int, timestamp: int = -1, version: int = 5) -> int:
        """The latest (-1) or earliest (-2) offset of a partition; asserts no error."""
        req = REQUESTS[2]
        request = req(replica_id=-1, isolation_level=0, topics=[req.ListOffsetsTopic(name=topic, partitions=[
            req.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1,
                                     timestamp=timestamp)])])
        p = self.request(request, version).topics[0].partitions[0]
        assert p.error_code == 0, p
        return p.offset

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
              version: int = 11, max_wait_ms: int = 0):
        """The fetch partition response (records as bytes or None)."""
        req = REQUESTS[1]
        request = req(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=0, max_bytes=max_bytes,
                      isolation_level=0, session_id=0, session_epoch=-1, topics=[
                          req.FetchTopic(topic=topic, partitions=[req.FetchPartition(
                              partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                              log_start_offset=-1, partition_max_bytes=max_bytes)])],
                      forgotten_topics_data=[], rack_id="")
        return self.request(request, version).responses[0].partitions[0]

    def init_producer_id(self, version: int = 1, transactional_id=None):
        return self.request(REQUESTS[22](transactional_id=transactional_id, transaction_timeout_ms=60000),
                            version)

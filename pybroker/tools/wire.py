"""A small synchronous Kafka-protocol client for the command-line tools.

One blocking socket per broker, one request in flight at a time, a timeout on every socket
operation. Each connection starts with ApiVersions and then speaks, per API, the highest
version that both the broker and the tool (its tested range) support.

Security: a ClientSecurity (``--command-config`` FILE with Kafka's client property names, read by
``command_security``) wraps the socket in TLS and runs SASL after ApiVersions; a session that the
broker gives a lifetime is re-authenticated in place before it runs out, between requests.
"""
import random
import socket
import ssl
import struct
import time

from pybroker.protocol import (DecodeError, REQUESTS, decode_response, encode_request)
from pybroker.protocol.errors import ErrorCode

CLIENT_ID = "pybroker-tools"
_SIZE = struct.Struct(">i")

# api key -> (lowest, highest) version the tools build and parse correctly
API_VERSIONS, METADATA, PRODUCE, FETCH, LIST_OFFSETS = 18, 3, 0, 1, 2
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, DESCRIBE_CONFIGS = 19, 20, 37, 32
OFFSET_FETCH, FIND_COORDINATOR, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 9, 10, 15, 16, 42
ELECT_LEADERS = 43
ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS, INCREMENTAL_ALTER_CONFIGS = 45, 46, 44
INIT_PRODUCER_ID = 22
DESCRIBE_LOG_DIRS, DESCRIBE_CLUSTER = 35, 60
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
CONSUMER_GROUP_DESCRIBE = 69
TOOL_VERSIONS = {
    API_VERSIONS: (0, 3),
    METADATA: (1, 12),
    PRODUCE: (3, 11),          # v3 is the first with record batches (magic 2)
    FETCH: (4, 12),            # v13+ name topics by id
    LIST_OFFSETS: (1, 10),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    CREATE_PARTITIONS: (0, 3),
    DESCRIBE_CONFIGS: (1, 4),
    OFFSET_FETCH: (1, 7),      # v8+ batch groups
    FIND_COORDINATOR: (0, 4),
    DESCRIBE_GROUPS: (0, 5),
    LIST_GROUPS: (0, 4),       # v5 adds the KIP-848 group type filter
    DELETE_GROUPS: (0, 2),
    ELECT_LEADERS: (1, 2),     # v0 knows only preferred elections and no ELIGIBLE_LEADERS_NOT_AVAILABLE
    INIT_PRODUCER_ID: (0, 4),  # v2+ are flexible; v0/v1 are all an idempotent producer needs
    ALTER_REASSIGNMENTS: (0, 0),
    LIST_REASSIGNMENTS: (0, 0),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    DESCRIBE_LOG_DIRS: (1, 4),  # v0 is deprecated; v4 adds the volume's total and usable bytes
    DESCRIBE_CLUSTER: (0, 1),
    DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ALTER_CLIENT_QUOTAS: (0, 1),
    CONSUMER_GROUP_DESCRIBE: (0, 0),
}
# errors after which fresh metadata (a new leader, a just-created topic) may succeed
RETRIABLE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
             ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_CONTROLLER,
             ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS,
             ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
             ErrorCode.KAFKA_STORAGE_ERROR}


class ToolError(Exception):
    """A failure the tool reports on stderr and turns into a non-zero exit code."""


class KafkaError(ToolError):
    """An error code returned by the broker, named as Kafka names it."""

    def __init__(self, code: int, message: str | None = None, where: str = ""):
        self.code = code
        try:
            self.name = ErrorCode(code).name
            detail = message or ErrorCode(code).description
        except ValueError:
            self.name, detail = f"ERROR_{code}", message or "unknown error code"
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{self.name} ({code}): {detail}")


def check(code: int, message: str | None = None, where: str = "") -> None:
    if code:
        raise KafkaError(code, message, where)


def parse_hostport(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ToolError(f"bad server address {text!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def command_security(path: str | None):
    """The ClientSecurity of a ``--command-config`` file (Kafka's client property names), or None.
    Settings other than security ones (e.g. request.timeout.ms) are left to the tool's own options."""
    if not path:
        return None
    from pybroker.client import config as client_config
    from pybroker.client import java_props
    from pybroker.client.errors import ConfigError
    from pybroker.properties import parse_properties
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError as exc:
        raise ToolError(f"--command-config {path}: {exc.strerror or exc}") from None
    props = {k: v for k, v, _ in parse_properties(text, path) if java_props.is_security_key(k)}
    try:
        translated = java_props.translate(props)
        security = client_config.parse({"bootstrap.servers": "127.0.0.1:1", **translated}, "admin").security
        security.ssl_context()  # unreadable certificate files fail now, once
    except ConfigError as exc:
        raise ToolError(f"--command-config {path}: {exc.message}") from None
    return None if security.plaintext else security


def command_client_conf(bootstrap: str, command_config: str | None, timeout_ms: int, client_id: str) -> dict:
    """Settings of a tool's Admin/Consumer client: the bootstrap list, the timeouts, and the security keys
    of its ``--command-config`` file (Kafka's client property names)."""
    from pybroker.client import java_props
    from pybroker.client.errors import ConfigError
    from pybroker.properties import ConfigError as PropertiesError
    from pybroker.properties import parse_properties
    timeout = max(1, timeout_ms)
    conf = {"bootstrap.servers": bootstrap, "client.id": client_id, "request.timeout.ms": timeout,
            "default.api.timeout.ms": timeout}
    if not command_config:
        return conf
    try:
        with open(command_config, encoding="utf-8", errors="replace") as f:
            props = {k: v for k, v, _ in parse_properties(f.read(), command_config) if java_props.is_security_key(k)}
        return {**conf, **java_props.translate(props)}
    except OSError as exc:
        raise ToolError(f"--command-config {command_config}: {exc.strerror or exc}") from None
    except (ConfigError, PropertiesError) as exc:
        raise ToolError(f"--command-config {command_config}: {exc}") from None


class Connection:
    """One broker connection: framing, correlation ids, negotiated versions."""

    def __init__(self, host: str, port: int, timeout: float, security=None):
        self.address = f"{host}:{port}"
        self.timeout = timeout
        self.security = security
        self._reauth_at = None  # monotonic time to re-authenticate (SASL sessions with a lifetime)
        self._outstanding = 0  # requests sent whose responses are not read yet
        self.reauthentications = 0
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ToolError(f"cannot connect to {self.address}: {exc.strerror or exc}") from None
        self.sock.settimeout(timeout)  # every later send/recv is bounded too
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation = 0
        self.broker_versions: dict[int, tuple[int, int]] = {}
        try:
            if security is not None and security.ssl:
                self._start_tls(host)
            try:
                self._handshake()
            except ToolError as exc:
                if security is None:
                    raise ToolError(f"{exc} (if the listener uses TLS or SASL, pass --command-config)") from None
                raise
            if security is not None and security.sasl:
                self._authenticate()
        except BaseException:
            self.close()
            raise

    def _start_tls(self, host: str) -> None:
        try:
            self.sock = self.security.ssl_context().wrap_socket(self.sock, server_hostname=host)
        except ssl.SSLCertVerificationError as exc:
            raise ToolError(f"TLS handshake with {self.address} failed: the broker's certificate was rejected: "
                            f"{exc.verify_message}") from None
        except (ssl.SSLError, OSError) as exc:
            raise ToolError(f"TLS handshake with {self.address} failed: "
                            f"{getattr(exc, 'reason', None) or exc.strerror or exc}") from None

    def _authenticate(self) -> None:
        from pybroker.client import sasl_exchange
        from pybroker.client.errors import KafkaError as ClientError
        exchange = sasl_exchange.steps(self.security, self.broker_versions, self.address)
        try:
            request, version = next(exchange)
            while True:
                try:
                    request, version = exchange.send(self._exchange(request, version))
                except StopIteration as done:
                    lifetime_ms = done.value or 0
                    break
        except ClientError as exc:
            raise ToolError(str(exc)) from None
        # as Kafka's clients: at 85-95% of the session's lifetime
        self._reauth_at = (time.monotonic() + lifetime_ms / 1000 * (0.85 + 0.1 * random.random())
                           if lifetime_ms > 0 else None)

    def _handshake(self) -> None:
        api = REQUESTS[API_VERSIONS]
        version = TOOL_VERSIONS[API_VERSIONS][1]
        req = api(client_software_name=CLIENT_ID, client_software_version="1")
        resp = self._exchange(req, version, lenient=True)
        if resp is None or resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
            # a broker answers an ApiVersions version it lacks in v0 form, listing its own range
            try:
                _, v0 = decode_response(self._last_frame, API_VERSIONS, 0)
            except DecodeError as exc:
                raise ToolError(f"{self.address} sent an unreadable ApiVersions response: {exc}") from None
            check(v0.error_code if v0.error_code != ErrorCode.UNSUPPORTED_VERSION else 0,
                  where=f"ApiVersions from {self.address}")
            lo, hi = {k.api_key: (k.min_version, k.max_version) for k in v0.api_keys}.get(API_VERSIONS, (0, 0))
            resp = self._exchange(req, max(lo, min(hi, version)))
        check(resp.error_code, where=f"ApiVersions from {self.address}")
        self.broker_versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version(self, api_key: int) -> int:
        """The highest version of ``api_key`` both sides support."""
        lo, hi = TOOL_VERSIONS[api_key]
        blo, bhi = self.broker_versions.get(api_key, (0, -1))
        if max(lo, blo) > min(hi, bhi):
            name = REQUESTS[api_key].__name__.removesuffix("Request")
            raise ToolError(f"broker {self.address} does not support {name} versions {lo}-{hi} "
                            f"(it offers {blo}-{bhi})" if bhi >= 0 else
                            f"broker {self.address} does not support {name}")
        return min(hi, bhi)

    def request(self, obj, version: int | None = None, expect_response: bool = True):
        """Send ``obj`` and return the decoded response body (None if none is expected)."""
        if version is None:
            version = self.version(obj.API_KEY)
        return self._exchange(obj, version, expect_response=expect_response)

    def send(self, obj, version: int | None = None) -> tuple[int, int]:
        """Send without waiting (requests pipelined on one connection are answered in order);
        (correlation id, version) for ``receive``."""
        if version is None:
            version = self.version(obj.API_KEY)
        if self._reauth_at is not None and self._outstanding == 0 and time.monotonic() >= self._reauth_at:
            self._reauth_at = None
            self._authenticate()
            self.reauthentications += 1
        self._correlation += 1
        self._outstanding += 1
        frame = encode_request(version, self._correlation, CLIENT_ID, obj)
        try:
            self.sock.sendall(_SIZE.pack(len(frame)) + frame)
        except socket.timeout:
            raise ToolError(f"timed out after {self.timeout:g} s sending to {self.address}") from None
        except OSError as exc:
            raise ToolError(f"connection to {self.address} failed: {exc.strerror or exc}") from None
        return self._correlation, version

    def receive(self, api_key: int, correlation: int, version: int):
        """The response to a ``send``, read in the order the requests were sent."""
        return self._read_response(api_key, version, correlation)

    def _exchange(self, obj, version: int, expect_response: bool = True, lenient: bool = False):
        correlation, _ = self.send(obj, version)
        if not expect_response:
            return None
        return self._read_response(obj.API_KEY, version, correlation, lenient, type(obj).__name__)

    def _read_response(self, api_key: int, version: int, correlation: int, lenient: bool = False,
                       what: str = "response"):
        try:
            size = _SIZE.unpack(self._recv_exact(4))[0]
            data = self._recv_exact(size)
        except socket.timeout:
            raise ToolError(f"timed out after {self.timeout:g} s waiting for {self.address}") from None
        except OSError as exc:
            raise ToolError(f"connection to {self.address} failed: {exc.strerror or exc}") from None
        self._last_frame = data
        self._outstanding -= 1
        try:
            header, body = decode_response(data, api_key, version)
        except DecodeError as exc:
            if lenient:
                return None
            raise ToolError(f"cannot decode a {what} v{version} response from {self.address}: {exc}") from None
        if header.correlation_id != correlation:
            raise ToolError(f"{self.address} answered correlation id {header.correlation_id}, "
                            f"expected {correlation}")
        return body

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if k == 0:
                raise ToolError(f"{self.address} closed the connection")
            got += k
        return bytes(buf)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


DEFAULT_SECURITY = None  # the running command's --command-config, for every Client it makes


def use_command_config(path: str | None) -> None:
    """Make ``--command-config`` apply to every Client of this command."""
    global DEFAULT_SECURITY
    DEFAULT_SECURITY = command_security(path)


class Client:
    """Connections to a cluster found through a bootstrap list, plus its last metadata."""

    def __init__(self, bootstrap: str, timeout_ms: int = 30000, security=None):
        self.timeout = timeout_ms / 1000
        self.security = security if security is not None else DEFAULT_SECURITY
        self.bootstrap = [parse_hostport(s) for s in bootstrap.split(",") if s.strip()]
        if not self.bootstrap:
            raise ToolError("--bootstrap-server is empty")
        self.brokers: dict[int, tuple[str, int]] = {}
        self.controller_id = -1
        self._conns: dict[object, Connection] = {}
        self._any: Connection | None = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        self._any = None

    def any_conn(self) -> Connection:
        """A connection to some broker: the first bootstrap server that answers."""
        if self._any is not None:
            return self._any
        errors = []
        for host, port in self.bootstrap:
            try:
                self._any = self._conns[(host, port)] = Connection(host, port, self.timeout, self.security)
                return self._any
            except ToolError as exc:
                errors.append(str(exc))
        raise ToolError("; ".join(errors))

    def node_conn(self, node_id: int) -> Connection:
        """A connection to broker ``node_id`` as named by the last metadata."""
        if node_id not in self.brokers:
            return self.any_conn()
        addr = self.brokers[node_id]
        conn = self._conns.get(addr)
        if conn is None:
            conn = self._conns[addr] = Connection(*addr, self.timeout, self.security)
        return conn

    def addr_conn(self, host: str, port: int) -> Connection:
        """A connection to the broker at ``host:port`` (e.g. a group coordinator), reused if open."""
        conn = self._conns.get((host, port))
        if conn is None:
            conn = self._conns[(host, port)] = Connection(host, port, self.timeout, self.security)
        return conn

    def controller_conn(self) -> Connection:
        if self.controller_id < 0:
            self.metadata([])
        return self.node_conn(self.controller_id)

    def drop(self, conn: Connection) -> None:
        """Forget a connection that failed, so the next use reconnects."""
        for key, c in list(self._conns.items()):
            if c is conn:
                del self._conns[key]
        if self._any is conn:
            self._any = None
        conn.close()

    def metadata(self, topics: list[str] | None, auto_create: bool = False):
        """Metadata for ``topics`` (None = all topics); remembers brokers and the controller."""
        conn = self.any_conn()
        version = conn.version(METADATA)
        api = REQUESTS[METADATA]
        req = api(topics=None if topics is None else [api.MetadataRequestTopic(name=t) for t in topics],
                  allow_auto_topic_creation=auto_create)
        resp = conn.request(req, version)
        self.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        self.controller_id = resp.controller_id
        return resp

    def topic_metadata(self, topic: str, auto_create: bool = False, wait_s: float = 10.0):
        """One topic's metadata, waiting (bounded) while its leaders are being elected."""
        start = time.monotonic()
        while True:
            resp = self.metadata([topic], auto_create)
            t = next((x for x in resp.topics if x.name == topic), None)
            if t is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, f"topic {topic!r}")
            waited = time.monotonic() - start
            busy = t.error_code == ErrorCode.LEADER_NOT_AVAILABLE or (
                # an auto-created topic may take a moment to appear; with auto-creation off it never will
                t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and auto_create and waited < 1) or (
                not t.error_code and any(p.leader_id < 0 for p in t.partitions))
            if not busy or waited >= wait_s:
                check(t.error_code, None, f"topic {topic!r}")
                if not t.partitions:
                    raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, "the topic has no partitions yet",
                                     f"topic {topic!r}")
                return t
            time.sleep(0.1)


def split_batches(records):
    """Complete record batches of a fetched records buffer (a trailing partial one is dropped)."""
    view = memoryview(records) if records is not None else memoryview(b"")
    pos, out = 0, []
    while pos + 17 <= len(view):
        size = 12 + _SIZE.unpack_from(view, pos + 8)[0]
        if pos + size > len(view):
            break
        out.append(view[pos:pos + size])
        pos += size
    return out

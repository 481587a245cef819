"""Errors raised by the clients.

Every error is a ``KafkaError`` carrying Kafka's numeric ``code``, its ``name`` (as in Kafka's
protocol error table, e.g. ``NOT_LEADER_OR_FOLLOWER``), a ``message`` and ``retriable``: whether
the same request may succeed if sent again (Kafka's ``RetriableException`` family). Client-side
conditions reuse the closest protocol code: a lost connection is ``NETWORK_EXCEPTION`` (13), a
timeout ``REQUEST_TIMED_OUT`` (7), a bad setting ``INVALID_CONFIG`` (40).
"""
from pybroker.protocol.errors import ErrorCode

# error codes whose Java exception extends RetriableException
RETRIABLE_CODES = frozenset({
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.NOT_CONTROLLER,
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
    ErrorCode.INVALID_FETCH_SESSION_EPOCH, ErrorCode.LISTENER_NOT_FOUND, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, ErrorCode.UNSTABLE_OFFSET_COMMIT,
    ErrorCode.THROTTLING_QUOTA_EXCEEDED, ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.INCONSISTENT_TOPIC_ID,
    ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
})

# errors that mean the client's metadata (leaders, topics, controller) is stale
INVALID_METADATA_CODES = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.NOT_CONTROLLER, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.LISTENER_NOT_FOUND, ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.INCONSISTENT_TOPIC_ID, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.BROKER_NOT_AVAILABLE,
    ErrorCode.REPLICA_NOT_AVAILABLE,
})

# errors that mean the group coordinator moved or is not ready
COORDINATOR_CODES = frozenset({
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
})


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"ERROR_{code}"


class KafkaError(Exception):
    """An error with a Kafka error code: ``code``, ``name``, ``message``, ``retriable``, and the
    transactional producer's flags ``fatal`` and ``txn_requires_abort`` (False unless set)."""
    fatal = False
    txn_requires_abort = False

    def __init__(self, code: int, message: str | None = None, *, retriable: bool | None = None,
                 name: str | None = None):
        self.code = int(code)
        self.name = name or error_name(self.code)
        if message is None:
            try:
                message = ErrorCode(self.code).description
            except ValueError:
                message = "unknown error code"
        self.message = message
        self.retriable = (self.code in RETRIABLE_CODES) if retriable is None else retriable
        super().__init__(f"{self.name} ({self.code}): {message}")

    def __reduce__(self):  # picklable (Spark ships exceptions between processes)
        return (_rebuild, (type(self), self.code, self.message, self.retriable, self.name))


def _rebuild(cls, code, message, retriable, name):
    err = KafkaError.__new__(cls)
    KafkaError.__init__(err, code, message, retriable=retriable, name=name)
    return err


class TransactionError(KafkaError):
    """A transactional producer's error, flagged as confluent-kafka flags it: ``fatal`` (the
    producer must be closed, e.g. PRODUCER_FENCED), ``txn_requires_abort`` (abort the transaction,
    then carry on) or ``retriable`` (call the same method again)."""

    def __init__(self, code: int, message: str | None = None, *, fatal: bool = False,
                 txn_requires_abort: bool = False, **kw):
        kw.setdefault("retriable", False)
        super().__init__(code, message, **kw)
        self.fatal = fatal
        self.txn_requires_abort = txn_requires_abort

    def __reduce__(self):
        return (_rebuild_txn, (self.code, self.message, self.retriable, self.name, self.fatal,
                               self.txn_requires_abort))


def _rebuild_txn(code, message, retriable, name, fatal, txn_requires_abort):
    return TransactionError(code, message, retriable=retriable, name=name, fatal=fatal,
                            txn_requires_abort=txn_requires_abort)


class KafkaConnectionError(KafkaError):
    """The connection to a broker could not be made or broke; requests on it failed. Retriable."""

    def __init__(self, message: str = "connection to the broker failed", **kw):
        kw.setdefault("retriable", True)
        super().__init__(ErrorCode.NETWORK_EXCEPTION, message, **kw)

    def __reduce__(self):
        return (type(self), (self.message,))


class KafkaTimeoutError(KafkaError):
    """A request or operation did not complete in time. Retriable."""

    def __init__(self, message: str = "the operation timed out", **kw):
        kw.setdefault("retriable", True)
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, message, **kw)

    def __reduce__(self):
        return (type(self), (self.message,))


class AuthenticationError(KafkaError):
    """The broker refused our credentials, or TLS or SASL could not be set up. Not retriable:
    the same settings fail the same way (Kafka's AuthenticationException)."""

    def __init__(self, message: str = "authentication failed", *, code: int = ErrorCode.SASL_AUTHENTICATION_FAILED,
                 **kw):
        kw.setdefault("retriable", False)
        super().__init__(code, message, **kw)

    def __reduce__(self):
        return (_rebuild, (type(self), self.code, self.message, self.retriable, self.name))


class BufferFullError(KafkaTimeoutError):
    """The producer's buffer stayed full for ``max.block.ms`` (Kafka's BufferExhaustedException)."""

    def __init__(self, message: str = "the producer buffer is full", **kw):
        kw.setdefault("name", "BUFFER_EXHAUSTED")
        super().__init__(message, **kw)


class ConfigError(KafkaError, ValueError):
    """A client setting is unknown or has a bad value. Not retriable."""

    def __init__(self, message: str, **kw):
        kw.setdefault("retriable", False)
        super().__init__(ErrorCode.INVALID_CONFIG, message, **kw)

    def __reduce__(self):
        return (type(self), (self.message,))


class UnknownTopicError(KafkaError):
    """The topic (or partition) does not exist."""

    def __init__(self, message: str | None = None, **kw):
        super().__init__(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message, **kw)

    def __reduce__(self):
        return (type(self), (self.message,))


class KafkaErrors(KafkaError):
    """Some items of a batched operation failed: ``errors`` maps each failed item (topic name,
    TopicPartition, ConfigResource, group id...) to its KafkaError; ``results`` holds the items
    that succeeded. ``code``/``name`` are those of the first failure."""

    def __init__(self, errors: dict, results: dict | None = None):
        self.errors = dict(errors)
        self.results = dict(results or {})
        first = next(iter(self.errors.values()))
        detail = "; ".join(f"{k}: {e.name}" + (f" ({e.message})" if e.message else "")
                           for k, e in list(self.errors.items())[:5])
        more = f" and {len(self.errors) - 5} more" if len(self.errors) > 5 else ""
        super().__init__(first.code, f"{len(self.errors)} item(s) failed: {detail}{more}",
                         retriable=all(e.retriable for e in self.errors.values()))

    def __reduce__(self):
        return (type(self), (self.errors, self.results))


_BY_CODE = {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: UnknownTopicError}


def error_for(code: int, message: str | None = None) -> KafkaError:
    """The KafkaError (or its specific subclass) for a protocol error code."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls(message)
    if code == ErrorCode.NETWORK_EXCEPTION:
        return KafkaConnectionError(message or ErrorCode(code).description)
    if code == ErrorCode.REQUEST_TIMED_OUT:
        return KafkaTimeoutError(message or ErrorCode(code).description)
    return KafkaError(code, message)


def check(code: int, message: str | None = None, where: str = "") -> None:
    """Raise the error for ``code`` unless it is 0; ``where`` prefixes the message."""
    if code:
        if where:
            message = f"{where}: {message}" if message else f"{where}: {_description(code)}"
        raise error_for(code, message)


def _description(code: int) -> str:
    try:
        return ErrorCode(code).description
    except ValueError:
        return "unknown error code"

"""Raw transaction requests for tests: InitProducerId, AddPartitionsToTxn, EndTxn and transactional
Produce over one tests/kafka_wire.py connection, at fixed versions, answering plain error codes.

Retriable coordinator answers (loading, moving, busy finishing a transaction) are retried as
clients do, so a test sees the answer that matters.
"""
import struct

from pybroker.protocol import REQUESTS
from tests.clientutil import wait_until
from tests.kafka_wire import ConnectionClosed, WireClient

DEADLINE = 30
WIRE_VERSIONS = {22: 3, 24: 3, 26: 3, 0: 8}  # InitProducerId, AddPartitionsToTxn, EndTxn, Produce
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS = 14, 15, 16, 51
RETRIABLE = {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS}
LONGEST_STRING = 0x7FFF  # a protocol string's int16 length: the longest transactional id Kafka reads


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


class TxnWire:
    """Raw transaction requests over one WireClient at WIRE_VERSIONS."""

    def __init__(self, port: int):
        self.c = WireClient(port)
        self.c.client_id = "txn-wire"

    def coordinator(self, txn_id: str) -> int:
        """FindCoordinator (transaction key), polled while the coordinator is not available yet."""
        req = REQUESTS[10]

        def found():
            r = self.c.request(req(key=txn_id, key_type=1, coordinator_keys=[]), 1)
            return r if r.error_code == 0 else None

        r = wait_until(found, DEADLINE)
        assert r, f"no transaction coordinator for {txn_id!r}"
        return r.node_id

    def init(self, txn_id, timeout_ms: int = 60000):
        """(error, producer id, epoch); retried as clients do while the coordinator is busy or loading."""
        def answer():
            r = self.c.request(REQUESTS[22](transactional_id=txn_id, transaction_timeout_ms=timeout_ms,
                                            producer_id=-1, producer_epoch=-1), WIRE_VERSIONS[22])
            return None if r.error_code in RETRIABLE else (r.error_code, r.producer_id, r.producer_epoch)

        got = wait_until(answer, DEADLINE)
        assert got, f"InitProducerId for {txn_id[:40]!r} kept answering a retriable error"
        return got

    def overlong_init(self, length: int):
        """InitProducerId v3 whose compact-string transactional id (a varint length, so the codecs'
        int16 limit does not stop it) has ``length`` bytes, built by hand: the error code, or
        "closed" when the broker drops the connection."""
        client = self.c.client_id.encode()
        header = struct.pack(">hhih", 22, 3, 9999, len(client)) + client + b"\0"
        body = varint(length + 1) + b"y" * length + struct.pack(">iqh", 60000, -1, -1) + b"\0"
        try:
            self.c.send_frame(header + body)
            frame = self.c.recv_frame()
        except (ConnectionClosed, OSError):
            return "closed"
        correlation, _, _, error = struct.unpack_from(">ibih", frame)  # header v1: correlation, no tags
        assert correlation == 9999
        return error

    def add(self, txn_id: str, pid: int, epoch: int, topic: str, partition: int = 0) -> int:
        req = REQUESTS[24]
        r = self.c.request(req(transactions=[], v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
                               v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                                   req.AddPartitionsToTxnTopic(name=topic, partitions=[partition])]),
                           WIRE_VERSIONS[24])
        return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code

    def end(self, txn_id: str, pid: int, epoch: int, commit: bool = True) -> int:
        r = self.c.request(REQUESTS[26](transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                                        committed=commit), WIRE_VERSIONS[26])
        return r.error_code

    def produce(self, txn_id: str, pid: int, epoch: int, seq: int, topic: str, value: bytes) -> int:
        from pybroker.records import TRANSACTIONAL, build_batch
        batch = bytes(build_batch([value], attributes=TRANSACTIONAL, producer_id=pid, producer_epoch=epoch,
                                  base_sequence=seq, base_timestamp=0))
        return self.c.produce(topic, 0, batch, version=WIRE_VERSIONS[0], transactional_id=txn_id).error_code

    def close(self) -> None:
        self.c.close()

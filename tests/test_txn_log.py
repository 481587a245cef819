"""Transactions on the storage side: producer state, the last stable offset, the aborted-transaction
index (``.txnindex``), read_committed fetches and WriteTxnMarkers.

The log-level tests use real log directories and the real Partition; the broker-level ones start real
broker processes (one, or three on ZooKeeper) and drive markers with WriteTxnMarkers wire requests,
as a transaction coordinator would. Expected codes are Kafka's (ProducerAppendInfo, KafkaApis).
"""
import os
import random
import struct
import threading
import time

import pytest

from pybroker.controller.metadata_cache import PartitionState
from pybroker.log import LogConfig
from pybroker.log.cleaner import Cleaner, CleanerSettings, Throttler
from pybroker.log.log import Log
from pybroker.log.manager import LogManager
from pybroker.log.txn_index import ENTRY, AbortedTxn, TxnIndex
from pybroker.protocol import REQUESTS
from pybroker.records import (CONTROL, TRANSACTIONAL, Record, build_batch, build_control_batch,
                              decode_control_record, decode_records)
from pybroker.replica.partition import NO_TRANSACTIONAL_ID, NO_VERIFICATION, Partition
from pybroker.replica.producer_state import VERIFY_NOT_NEEDED, VerificationGuard
from tests.kafka_wire import WireClient
from tests.logutil import check_log_structure

INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING = 47, 48, 49
TRANSACTION_COORDINATOR_FENCED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 52, 53
NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION = 6, 3
DEADLINE = 30


# ---- helpers -------------------------------------------------------------------------------------

def txn_batch(pid: int, epoch: int, seq: int, count: int = 1, tag: bytes = b"v", key: bytes | None = None,
              transactional: bool = True) -> bytearray:
    return bytearray(build_batch([Record(b"%s-%d-%d" % (tag, pid, seq + i), key) for i in range(count)],
                             producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                             attributes=TRANSACTIONAL if transactional else 0,
                             base_timestamp=int(time.time() * 1000)))


def open_partition(directory: str, config: LogConfig | None = None, clean: bool = True,
                   recovery_point: int = 0) -> Partition:
    """A leader replica (broker 0, replication factor one) over a real log directory."""
    lg = Log(directory, "t", 0, config or LogConfig(retention_ms=-1), clean=clean, recovery_point=recovery_point)
    p = Partition("t", 0, None, lg, 0, 0, (0,))
    p.make_leader(PartitionState("t", 0, 0, 1, (0,), (0,)))
    return p


class Model:
    """What the storage must say, computed the simple way: open transactions, aborted ones, the LSO."""

    def __init__(self):
        self.open: dict[int, int] = {}  # pid -> first offset
        self.aborted: list[AbortedTxn] = []

    def data(self, pid: int, offset: int, transactional: bool) -> None:
        if transactional:
            self.open.setdefault(pid, offset)

    def marker(self, pid: int, commit: bool, offset: int) -> None:
        first = self.open.pop(pid, None)
        if first is not None and not commit:
            self.aborted.append(AbortedTxn(pid, first, offset, min(self.open.values(), default=offset + 1)))

    def lso(self, hw: int) -> int:
        return min([hw, *self.open.values()])

    def collected(self, fetch_offset: int, upper: int) -> list:
        return [t for t in self.aborted if t.last_offset >= fetch_offset and t.first_offset < upper]


def txn_index_files(lg) -> dict:
    """base offset -> the bytes of each segment's .txnindex (absent: no entry)."""
    out = {}
    for seg in lg.segments:
        if os.path.exists(seg.txnindex_path):
            with open(seg.txnindex_path, "rb") as f:
                out[seg.base_offset] = f.read()
    return out


def entries_by_segment(lg) -> list:
    return [(seg.base_offset, list(seg.txn_index.entries)) for seg in lg.segments]


def model_by_segment(lg, model: Model) -> list:
    return [(seg.base_offset, [t for t in model.aborted if seg.base_offset <= t.last_offset < seg.next_offset])
            for seg in lg.segments]


def run_workload(p: Partition, rng: random.Random, steps: int, model: Model) -> None:
    """Random interleaved transactional and plain batches of several producers, markers and rolls."""
    seqs, epochs = {}, {}
    pids = [100 + i for i in range(rng.randint(1, 5))]
    for _ in range(steps):
        op = rng.random()
        pid = rng.choice(pids)
        if op < 0.55:
            transactional = rng.random() < 0.85 or pid in model.open
            if pid in model.open:
                transactional = True  # Kafka's rule: an open transaction takes only transactional batches
            seq = seqs.get(pid, 0)
            count = rng.randint(1, 4)
            r = p.append_as_leader(txn_batch(pid, epochs.get(pid, 0), seq, count, transactional=transactional), 1)
            seqs[pid] = seq + count
            model.data(pid, r.base_offset, transactional)
        elif op < 0.9:
            commit = rng.random() < 0.5
            r = p.append_marker(pid, epochs.get(pid, 0), commit, 0, int(time.time() * 1000))
            model.marker(pid, commit, r.offset)
        elif op < 0.95:
            epochs[pid] = epochs.get(pid, 0) + 1  # a bumped epoch ends the transaction with its marker
            r = p.append_marker(pid, epochs[pid], False, 0, int(time.time() * 1000))
            model.marker(pid, False, r.offset)
            seqs[pid] = 0
        else:
            p.log.roll()


# ---- records -------------------------------------------------------------------------------------

def test_control_batch_round_trip():
    for commit in (False, True):
        b = build_control_batch(7, 3, commit, 11, 1234)
        header = struct.unpack_from(">qiibIhiqqqhii", b)
        assert header[5] == TRANSACTIONAL | CONTROL and header[9:12] == (7, 3, -1)
        marker = decode_control_record(b)
        assert (marker.commit, marker.type, marker.coordinator_epoch) == (commit, int(commit), 11)
        rec = decode_records(b)[0]
        assert rec.control and rec.key == struct.pack(">hh", 0, int(commit)) and rec.value == struct.pack(">hi", 0, 11)
    assert not decode_records(build_batch([b"x"]))[0].control


# ---- the txn index file --------------------------------------------------------------------------

def test_txn_index_format_truncation_and_torn_tail(tmp_path):
    path = str(tmp_path / "00000000000000000000.txnindex")
    idx = TxnIndex(path)
    assert not os.path.exists(path)  # created with its first entry
    entries = [AbortedTxn(5, 0, 10, 11), AbortedTxn(6, 3, 20, 21), AbortedTxn(5, 25, 30, 31)]
    for t in entries:
        idx.append(t)
    idx.flush()
    with open(path, "rb") as f:
        data = f.read()
    assert data == b"".join(ENTRY.pack(0, *t) for t in entries) and len(data) == 3 * 34
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(1, 0, 29, 30))  # markers only move forward
    idx.close()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x01")  # a torn entry
    idx = TxnIndex(path)
    assert idx.entries == entries and os.path.getsize(path) == 3 * 34
    assert idx.collect(11, 26) == ([entries[1], entries[2]], True)
    assert idx.collect(0, 100) == (entries, False)
    idx.truncate_to(20)
    assert idx.entries == entries[:1]
    idx.truncate_to(0)
    assert idx.entries == [] and not os.path.exists(path)
    idx.close()


# ---- producer state and the LSO ------------------------------------------------------------------

def test_lso_with_interleaved_transactions(tmp_path):
    p = open_partition(str(tmp_path / "t-0"))
    a = p.append_as_leader(txn_batch(1, 0, 0, 2), 1).base_offset            # 0-1: A opens at 0
    p.append_as_leader(txn_batch(9, 0, 0, 1, transactional=False), 1)        # 2: an idempotent producer
    b = p.append_as_leader(txn_batch(2, 0, 0, 1), 1).base_offset            # 3: B opens at 3
    p.append_as_leader(txn_batch(1, 0, 2, 1), 1)                             # 4: A again
    assert (a, b) == (0, 3)
    assert p.high_watermark == 5 and p.last_stable_offset == 0
    assert p.append_marker(2, 0, True, 0, 0).aborted is None                 # 5: B commits
    assert p.last_stable_offset == 0
    m = p.append_marker(1, 0, False, 0, 0)                                   # 6: A aborts
    assert m.aborted == AbortedTxn(1, 0, 6, 7)
    assert p.last_stable_offset == p.high_watermark == 7
    c = p.append_as_leader(txn_batch(3, 0, 0, 1), 1).base_offset            # 7: C opens
    d = p.append_as_leader(txn_batch(4, 0, 0, 1), 1).base_offset            # 8: D opens
    assert p.last_stable_offset == c == 7
    assert p.append_marker(3, 0, False, 0, 0).aborted == AbortedTxn(3, 7, 9, d)  # LSO then: D's start
    assert p.last_stable_offset == d
    # the HW caps it: a follower that has not caught up holds the LSO back
    p.high_watermark = 4
    assert p.last_stable_offset == 4
    p.high_watermark = p.log_end_offset
    assert p.log.collect_aborted_transactions(0, 100) == [AbortedTxn(1, 0, 6, 7), AbortedTxn(3, 7, 9, 8)]
    assert p.aborted_transactions(0) == [(1, 0), (3, 7)]
    assert p.aborted_transactions(7) == [(3, 7)]  # LSO 8: collected over [7, 8)


def test_read_committed_stops_at_the_lso(tmp_path):
    p = open_partition(str(tmp_path / "t-0"))
    p.append_as_leader(txn_batch(9, 0, 0, 3, transactional=False), 1)        # 0-2
    p.append_as_leader(txn_batch(1, 0, 0, 2), 1)                             # 3-4 open
    p.append_as_leader(txn_batch(9, 0, 3, 1, transactional=False), 1)        # 5
    committed = p.read(0, 1 << 20, True, True).read()
    everything = p.read(0, 1 << 20, False, True).read()
    assert [r.offset for r in decode_records(committed)] == [0, 1, 2]
    assert len(everything) > len(committed)
    p.append_marker(1, 0, True, 0, 0)
    assert p.last_stable_offset == 7
    assert len(p.read(0, 1 << 20, True, True).read()) == len(p.read(0, 1 << 20, False, True).read())
    assert p.offset_for_timestamp(-1, committed_only=False) == (7, -1)


def test_producer_rules_for_transactions(tmp_path):
    from pybroker.errors import BrokerError
    p = open_partition(str(tmp_path / "t-0"))
    p.append_as_leader(txn_batch(1, 0, 0, 1), 1)

    def code(fn, *args):
        with pytest.raises(BrokerError) as exc:
            fn(*args)
        return exc.value.code

    # an open transaction takes only transactional batches
    assert code(p.append_as_leader, txn_batch(1, 0, 1, 1, transactional=False), 1) == INVALID_TXN_STATE
    # a marker from an older coordinator epoch or producer epoch is refused
    p.append_marker(1, 0, True, 5, 0)
    assert code(p.append_marker, 1, 0, True, 4, 0) == TRANSACTION_COORDINATOR_FENCED
    p.append_marker(1, 2, False, 5, 0)  # a bumped epoch (the coordinator fenced the producer)
    assert code(p.append_marker, 1, 1, False, 5, 0) == INVALID_PRODUCER_EPOCH
    # data of the old epoch is fenced; the new epoch starts its sequences at 0
    assert code(p.append_as_leader, txn_batch(1, 1, 1, 1), 1) == INVALID_PRODUCER_EPOCH
    assert p.append_as_leader(txn_batch(1, 2, 0, 1), 1).base_offset == p.log_end_offset - 1
    # a control batch from a producer is refused
    assert code(p.append_as_leader, build_control_batch(1, 2, True, 5, 0), 1) == 87


def test_verification_guard_is_voided_by_a_marker(tmp_path):
    """KIP-890: a produce verified before a marker must not land after it (in the next transaction)."""
    from pybroker.errors import BrokerError
    p = open_partition(str(tmp_path / "t-0"))
    guard = p.start_verification(1)
    assert isinstance(guard, VerificationGuard)
    p.append_marker(1, 0, False, 0, 0)  # the transaction ended while the coordinator was asked
    with pytest.raises(BrokerError) as exc:
        p.append_as_leader(txn_batch(1, 0, 0, 1), 1, guard)
    assert exc.value.code == INVALID_TXN_STATE
    guard = p.start_verification(1)
    assert p.start_verification(1) is guard  # one guard per producer until it is used or voided
    p.append_as_leader(txn_batch(1, 0, 0, 1), 1, guard)
    assert p.start_verification(1) is VERIFY_NOT_NEEDED  # the transaction is open here: nothing to ask
    p.append_as_leader(txn_batch(1, 0, 1, 1), 1, VERIFY_NOT_NEEDED)
    with pytest.raises(BrokerError) as exc:  # ended meanwhile: "not needed" may not open the next one
        p.append_marker(1, 0, True, 0, 0)
        p.append_as_leader(txn_batch(1, 0, 2, 1), 1, VERIFY_NOT_NEEDED)
    assert exc.value.code == INVALID_TXN_STATE
    with pytest.raises(BrokerError) as exc:
        p.append_as_leader(txn_batch(1, 0, 2, 1), 1, NO_TRANSACTIONAL_ID)
    assert exc.value.code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    p.append_as_leader(txn_batch(1, 0, 2, 1), 1, NO_VERIFICATION)  # no coordinator to ask: accepted


@pytest.mark.parametrize("seed", range(8))
def test_aborted_index_and_lso_match_the_model(tmp_path, seed):
    rng = random.Random(seed)
    config = LogConfig(retention_ms=-1, segment_bytes=rng.choice([600, 2000, 1 << 20]))
    p = open_partition(str(tmp_path / "t-0"), config)
    model = Model()
    run_workload(p, rng, rng.randint(50, 250), model)
    lg = p.log
    check_log_structure(lg)
    assert entries_by_segment(lg) == model_by_segment(lg, model)
    assert p.last_stable_offset == model.lso(p.high_watermark)
    end = p.log_end_offset
    for _ in range(40):
        lo = rng.randint(0, end)
        hi = rng.randint(lo, end + 1)
        assert lg.collect_aborted_transactions(lo, hi) == model.collected(lo, hi), (lo, hi)
    lso = p.last_stable_offset
    for fetch in range(0, lso + 1):
        got = p.aborted_transactions(fetch)
        assert got == [(t.producer_id, t.first_offset) for t in model.collected(fetch, lso)]


# ---- restarts, recovery, truncation, retention ---------------------------------------------------

@pytest.mark.parametrize("clean", [True, False])
def test_restart_keeps_open_transactions_and_the_index(tmp_path, clean):
    rng = random.Random(3)
    directory = str(tmp_path / "t-0")
    config = LogConfig(retention_ms=-1, segment_bytes=1500)
    p = open_partition(directory, config)
    model = Model()
    run_workload(p, rng, 150, model)
    p.append_as_leader(txn_batch(555, 0, 0, 2), 1)  # one transaction surely open at the end
    model.data(555, p.log_end_offset - 2, True)
    files, lso, open_txns = txn_index_files(p.log), p.last_stable_offset, dict(p.producers.ongoing)
    if clean:
        p.close()
        p.log.close()
    else:  # as after kill -9: no snapshot, every segment re-validated, lost indexes rebuilt
        p.log.close()
        for name in os.listdir(directory):
            if name.endswith((".txnindex", ".index", ".timeindex")) and rng.random() < 0.7:
                os.remove(os.path.join(directory, name))
    again = open_partition(directory, config, clean=clean)
    assert again.producers.ongoing == open_txns and 555 in open_txns
    assert again.last_stable_offset == lso == model.lso(again.high_watermark)
    assert txn_index_files(again.log) == files
    assert entries_by_segment(again.log) == model_by_segment(again.log, model)
    # the restored state goes on: the open transaction aborts into the index
    m = again.append_marker(555, 0, False, 0, 0)
    assert m.aborted.first_offset == open_txns[555]
    again.log.close()


def test_a_recovered_segment_rebuilds_its_index_even_after_a_clean_shutdown(tmp_path):
    directory = str(tmp_path / "t-0")
    config = LogConfig(retention_ms=-1, segment_bytes=1000)
    p = open_partition(directory, config)
    model = Model()
    run_workload(p, random.Random(11), 120, model)
    files = txn_index_files(p.log)
    assert files
    p.close()
    p.log.close()
    victim = min(files)
    os.remove(os.path.join(directory, f"{victim:020d}.index"))  # this segment is recovered at load
    os.remove(os.path.join(directory, f"{victim:020d}.txnindex"))
    again = open_partition(directory, config)
    assert txn_index_files(again.log) == files
    again.log.close()


def test_truncation_cuts_the_index_and_reopens_transactions(tmp_path):
    p = open_partition(str(tmp_path / "t-0"), LogConfig(retention_ms=-1, segment_bytes=700))
    model = Model()
    run_workload(p, random.Random(5), 150, model)
    aborted = [t for t in model.aborted]
    assert len(aborted) >= 3
    cut = aborted[len(aborted) // 2].last_offset  # the marker and all after it go
    p.truncate_to(cut)
    truncated = Model()
    for seg in p.log.segments:  # the model replayed up to the cut
        pos = 0
        while pos < seg.size:
            h = seg.read_header(pos)
            if h.attributes & CONTROL:
                marker = decode_control_record(os.pread(seg.fd, h.batch_length + 12, pos))
                truncated.marker(h.producer_id, marker.commit, h.base_offset)
            else:
                truncated.data(h.producer_id, h.base_offset, bool(h.attributes & TRANSACTIONAL))
            pos += h.batch_length + 12
    assert entries_by_segment(p.log) == model_by_segment(p.log, truncated)
    assert p.producers.ongoing == truncated.open and aborted[len(aborted) // 2].producer_id in truncated.open
    # the cleaner's bound at once (no fetch came): only open transactions, every marker is below the HW
    assert p.log.first_unstable_offset() == min(truncated.open.values(), default=None)
    assert p.last_stable_offset == truncated.lso(p.high_watermark)
    check_log_structure(p.log)
    p.log.close()


def test_retention_deletes_index_files_with_their_segments(tmp_path):
    p = open_partition(str(tmp_path / "t-0"), LogConfig(retention_ms=-1, segment_bytes=500))
    run_workload(p, random.Random(8), 150, Model())
    files = txn_index_files(p.log)
    assert len(files) >= 2
    second = sorted(files)[1]
    p.delete_records(second)
    assert sorted(txn_index_files(p.log)) == [b for b in sorted(files) if b >= second]
    gone = [f"{b:020d}.txnindex" for b in files if b < second]
    assert not set(gone) & set(os.listdir(p.log.directory))
    p.log.close()


# ---- the log cleaner -----------------------------------------------------------------------------

def test_cleaner_keeps_markers_and_index_and_never_cleans_open_transactions(tmp_path):
    config = LogConfig(cleanup_policy="compact", segment_bytes=100_000, retention_ms=-1,
                       min_cleanable_dirty_ratio=0.0)
    manager = LogManager([str(tmp_path)], config, background=False, cleaner=CleanerSettings()).startup()
    lg = manager.get_or_create_log("t", 0, config)
    p = Partition("t", 0, None, lg, 0, 0, (0,))
    p.make_leader(PartitionState("t", 0, 0, 1, (0,), (0,)))
    p.append_as_leader(txn_batch(1, 0, 0, 1, b"committed", key=b"k"), 1)    # 0: k=committed
    p.append_marker(1, 0, True, 0, 0)                                        # 1
    p.append_as_leader(txn_batch(2, 0, 0, 1, b"aborted", key=b"k"), 1)      # 2: k=aborted
    p.append_marker(2, 0, False, 0, 0)                                       # 3: ABORT -> index
    p.append_as_leader(txn_batch(3, 0, 0, 1, b"open", key=b"j"), 1)         # 4: open
    p.append_as_leader(txn_batch(4, 0, 0, 1, b"later", key=b"j"), 1)        # 5: open too
    lg.roll()
    p.append_as_leader(txn_batch(9, 0, 0, 1, b"x", key=b"z", transactional=False), 1)
    before = list(lg.segments[0].txn_index.entries)
    assert before == [AbortedTxn(2, 2, 3, 4)]
    cleaner = Cleaner(1 << 20, 0.9, Throttler(float("inf"), threading.Event()))
    manager.cleaner.clean_once(cleaner, now=1)
    assert manager.cleaner.first_dirty.get(("t", 0), 0) <= 4  # stopped at the first open transaction
    kept = {}
    with open(lg.segments[0].log_path, "rb") as f:
        data = f.read()
    pos = 0
    markers = 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 8:pos + 12], "big") + 12
        attributes = int.from_bytes(data[pos + 21:pos + 23], "big")
        markers += bool(attributes & CONTROL)
        for r in decode_records(data[pos:pos + size]):
            if not r.control:
                kept[r.offset] = r.value
        pos += size
    assert markers == 2
    # the aborted value never hid the committed one; open transactions were not touched
    assert kept[0] == b"committed-1-0" and 4 in kept and 5 in kept
    assert lg.segments[0].txn_index.entries == before
    assert os.path.exists(lg.segments[0].txnindex_path)
    p.append_marker(3, 0, True, 0, 0)
    p.append_marker(4, 0, True, 0, 0)
    manager.shutdown()


# ---- a real broker: WriteTxnMarkers on the wire, read_committed fetches --------------------------

TOPIC = "txn"


def write_markers(c: WireClient, markers, version: int = 1):
    """markers: (pid, epoch, commit, coordinator epoch, [(topic, partition)]); {(pid, topic, p): error}."""
    req = REQUESTS[27]
    request = req(markers=[req.WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=ce,
        topics=[req.WritableTxnMarkerTopic(name=t, partition_indexes=[i for tt, i in parts if tt == t])
                for t in sorted({t for t, _ in parts})])
        for pid, epoch, commit, ce, parts in markers], )
    resp = c.request(request, version)
    return {(m.producer_id, t.name, p.partition_index): p.error_code
            for m in resp.markers for t in m.topics for p in t.partitions}


def fetch(c: WireClient, topic: str, partition: int, offset: int, isolation: int, max_bytes: int = 1 << 20):
    req = REQUESTS[1]
    request = req(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=isolation,
                  session_id=0, session_epoch=-1, topics=[req.FetchTopic(topic=topic, partitions=[
                      req.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                                         log_start_offset=-1, partition_max_bytes=max_bytes)])],
                  forgotten_topics_data=[], rack_id="")
    return c.request(request, 11).responses[0].partitions[0]


def list_latest(c: WireClient, topic: str, partition: int, isolation: int) -> int:
    req = REQUESTS[2]
    request = req(replica_id=-1, isolation_level=isolation, topics=[req.ListOffsetsTopic(name=topic, partitions=[
        req.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=-1)])])
    p = c.request(request, 5).topics[0].partitions[0]
    assert p.error_code == 0, p
    return p.offset


def record_offsets(data) -> list[int]:
    data = bytes(data or b"")
    out, pos = [], 0
    while pos + 12 <= len(data):
        size = int.from_bytes(data[pos + 8:pos + 12], "big") + 12
        if pos + size > len(data):
            break
        out += [r.offset for r in decode_records(data[pos:pos + size]) if not r.control]
        pos += size
    return out


NO_VERIFY = {"transaction.partition.verification.enable": "false"}


def new_pid(c: WireClient) -> int:
    """A producer id from InitProducerId (retried while the broker answers a retriable error)."""
    deadline = time.monotonic() + DEADLINE
    r = c.init_producer_id()
    while r.error_code in (14, 15) and time.monotonic() < deadline:  # load in progress, not available yet
        time.sleep(0.1)
        r = c.init_producer_id()
    assert r.error_code == 0, r
    return r.producer_id


def test_read_committed_fetch_with_markers_from_the_wire(broker_factory):
    b = broker_factory(overrides=NO_VERIFY)
    with WireClient(b.port) as c:
        c.create_topic(TOPIC, 2)
        a, bb = new_pid(c), new_pid(c)
        assert c.produce(TOPIC, 0, txn_batch(a, 0, 0, 2), transactional_id="ta").error_code == 0     # 0-1
        assert c.produce(TOPIC, 0, txn_batch(bb, 0, 0, 1), transactional_id="tb").error_code == 0    # 2
        assert c.produce(TOPIC, 0, txn_batch(a, 0, 2, 1), transactional_id="ta").error_code == 0     # 3
        r = fetch(c, TOPIC, 0, 0, 1)
        assert (r.error_code, r.high_watermark, r.last_stable_offset) == (0, 4, 0)
        assert record_offsets(r.records) == [] and r.aborted_transactions == []
        assert list_latest(c, TOPIC, 0, 1) == 0 and list_latest(c, TOPIC, 0, 0) == 4
        assert fetch(c, TOPIC, 0, 0, 0).aborted_transactions is None  # read_uncommitted: null
        errors = write_markers(c, [(a, 0, False, 0, [(TOPIC, 0)]), (bb, 0, True, 0, [(TOPIC, 0)])])
        assert errors == {(a, TOPIC, 0): 0, (bb, TOPIC, 0): 0}                                         # 4, 5
        r = fetch(c, TOPIC, 0, 0, 1)
        assert (r.high_watermark, r.last_stable_offset) == (6, 6)
        assert record_offsets(r.records) == [0, 1, 2, 3]  # all sent: the consumer drops A's
        assert [(t.producer_id, t.first_offset) for t in r.aborted_transactions] == [(a, 0)]
        assert [(t.producer_id, t.first_offset) for t in fetch(c, TOPIC, 0, 2, 1).aborted_transactions] == [(a, 0)]
        assert fetch(c, TOPIC, 0, 5, 1).aborted_transactions == []
        assert list_latest(c, TOPIC, 0, 1) == 6
        # Kafka's codes: older producer epoch, older coordinator epoch, a partition not hosted here
        write_markers(c, [(a, 3, False, 2, [(TOPIC, 0)])])
        assert write_markers(c, [(a, 2, True, 2, [(TOPIC, 0)])]) == {(a, TOPIC, 0): INVALID_PRODUCER_EPOCH}
        assert write_markers(c, [(a, 3, True, 1, [(TOPIC, 0)])]) == {(a, TOPIC, 0): TRANSACTION_COORDINATOR_FENCED}
        assert write_markers(c, [(a, 3, True, 2, [(TOPIC, 0), (TOPIC, 7), ("nope", 0)])], version=0) == {
            (a, TOPIC, 0): 0, (a, TOPIC, 7): UNKNOWN_TOPIC_OR_PARTITION, (a, "nope", 0): UNKNOWN_TOPIC_OR_PARTITION}


def test_produce_rules_with_a_transactional_id(broker_factory):
    b = broker_factory(overrides=NO_VERIFY)
    with WireClient(b.port) as c:
        c.create_topic(TOPIC, 2)
        pid, other = new_pid(c), new_pid(c)
        # a transactional batch needs the request's transactional id (Kafka: TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        assert c.produce(TOPIC, 0, txn_batch(pid, 0, 0, 1)).error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert c.produce(TOPIC, 0, txn_batch(pid, 0, 0, 1), transactional_id="x").error_code == 0
        # an open transaction takes only transactional batches
        assert c.produce(TOPIC, 0, txn_batch(pid, 0, 1, 1, transactional=False),
                         transactional_id="x").error_code == INVALID_TXN_STATE
        # one producer per request's transactional batches
        req = REQUESTS[0]
        request = req(transactional_id="x", acks=-1, timeout_ms=10000, topic_data=[req.TopicProduceData(
            name=TOPIC, partition_data=[req.PartitionProduceData(index=0, records=txn_batch(pid, 0, 1, 1)),
                                        req.PartitionProduceData(index=1, records=txn_batch(other, 0, 0, 1))])])
        codes = [p.error_code for p in c.request(request, 8).responses[0].partition_responses]
        assert codes == [INVALID_PRODUCER_ID_MAPPING] * 2
        assert c.list_offset(TOPIC, 1) == 0
        # a batch too short for its producer fields, flagged transactional: the same answer as without an id
        short = bytearray(40)
        short[8:12], short[16], short[22] = (28).to_bytes(4, "big"), 2, TRANSACTIONAL
        plain = c.produce(TOPIC, 1, short).error_code
        assert plain != 0 and c.produce(TOPIC, 1, short, transactional_id="x").error_code == plain
        assert c.list_offset(TOPIC, 1) == 0


def test_kill_9_keeps_open_transactions_and_the_index(broker_factory, tmp_path):
    b = broker_factory(overrides={**NO_VERIFY, "log.flush.interval.messages": 1})  # markers wait for the flush
    with WireClient(b.port) as c:
        c.create_topic(TOPIC, 1)
        pids = [new_pid(c) for _ in range(3)]
        for i, pid in enumerate(pids):
            assert c.produce(TOPIC, 0, txn_batch(pid, 0, 0, 2), transactional_id=f"t{i}").error_code == 0
        write_markers(c, [(pids[0], 0, False, 0, [(TOPIC, 0)]), (pids[2], 0, True, 0, [(TOPIC, 0)])])
        before = fetch(c, TOPIC, 0, 0, 1)
        assert before.last_stable_offset == 2  # pids[1]'s transaction is open from 2
    index = os.path.join(b.data_dir, f"{TOPIC}-0", f"{0:020d}.txnindex")
    with open(index, "rb") as f:
        data = f.read()
    b.kill()
    b.start()
    with WireClient(b.port) as c:
        after = fetch(c, TOPIC, 0, 0, 1)
        assert after.last_stable_offset == 2 and record_offsets(after.records) == [0, 1]
        assert [(t.producer_id, t.first_offset) for t in after.aborted_transactions] == [(pids[0], 0)]
        write_markers(c, [(pids[1], 0, True, 0, [(TOPIC, 0)])])
        assert fetch(c, TOPIC, 0, 0, 1).last_stable_offset == 9  # 6 records, 3 markers
    with open(index, "rb") as f:
        assert f.read() == data


def test_confluent_kafka_read_committed_consumer_skips_aborted_records(broker_factory):
    """librdkafka reads our aborted-transaction list and LSO: it delivers committed records only."""
    from confluent_kafka import Consumer, TopicPartition
    b = broker_factory(overrides=NO_VERIFY)
    with WireClient(b.port) as c:
        c.create_topic(TOPIC, 1)
        good, bad = new_pid(c), new_pid(c)
        c.produce(TOPIC, 0, txn_batch(good, 0, 0, 2, b"good"), transactional_id="g")
        c.produce(TOPIC, 0, txn_batch(bad, 0, 0, 3, b"bad"), transactional_id="b")
        c.produce(TOPIC, 0, txn_batch(good, 0, 2, 1, b"good"), transactional_id="g")
        write_markers(c, [(bad, 0, False, 0, [(TOPIC, 0)]), (good, 0, True, 0, [(TOPIC, 0)])])
    values = {}
    for level in ("read_committed", "read_uncommitted"):
        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"g-{level}", "isolation.level": level,
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        got, deadline = [], time.monotonic() + DEADLINE
        while time.monotonic() < deadline and len(got) < (3 if level == "read_committed" else 6):
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        consumer.close()
        values[level] = got
    assert values["read_committed"] == [b"good-%d-%d" % (good, i) for i in range(3)]
    assert len(values["read_uncommitted"]) == 6


# ---- three brokers: followers' txn indexes follow the markers ------------------------------------

def _txn_index_bytes(data_dir: str, topic: str) -> dict:
    out = {}
    directory = os.path.join(data_dir, f"{topic}-0")
    for name in sorted(os.listdir(directory)):
        if name.endswith(".txnindex"):
            with open(os.path.join(directory, name), "rb") as f:
                out[name] = f.read()
    return out


def test_followers_end_with_identical_txn_indexes(tmp_path, zookeeper):
    from confluent_kafka.admin import AdminClient, NewTopic
    from tests.cluster import Cluster
    with Cluster(tmp_path, 3, zk=zookeeper, overrides={**NO_VERIFY, "log.segment.bytes": 1200}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(60)
        state = cluster.wait_for(lambda: (s := cluster.partition_state(TOPIC, 0)) and len(s["isr"]) == 3 and s,
                                 60, "a full ISR")
        leader = cluster.broker(state["leader"])
        rng = random.Random(4)
        model = Model()
        with WireClient(leader.port) as c:
            pids = [new_pid(c) for _ in range(4)]
            seqs = dict.fromkeys(pids, 0)
            offset = 0
            for _ in range(60):
                pid = rng.choice(pids)
                if rng.random() < 0.6:
                    r = c.produce(TOPIC, 0, txn_batch(pid, 0, seqs[pid], 2), transactional_id=f"t{pid}")
                    assert r.error_code == 0, r
                    seqs[pid] += 2
                    model.data(pid, r.base_offset, True)
                    offset = r.base_offset + 2
                else:
                    commit = rng.random() < 0.5
                    assert write_markers(c, [(pid, 0, commit, 0, [(TOPIC, 0)])]) == {(pid, TOPIC, 0): 0}
                    model.marker(pid, commit, offset)
                    offset += 1
            for pid in pids:  # end every transaction so the LSO reaches the end
                write_markers(c, [(pid, 0, False, 0, [(TOPIC, 0)])])
                model.marker(pid, False, offset)
                offset += 1
            r = fetch(c, TOPIC, 0, 0, 1)
            assert r.last_stable_offset == r.high_watermark == offset
        assert model.aborted
        expected = {}
        for t in model.aborted:
            expected.setdefault(t, None)
        views = cluster.wait_for(
            lambda: (v := {b: _txn_index_bytes(cluster.broker(b).data_dir, TOPIC) for b in (1, 2, 3)})
            and len({tuple(sorted(x.items())) for x in v.values()}) == 1 and v,
            60, "identical txn indexes")
        entries = []
        for data in views[state["leader"]].values():
            entries += [AbortedTxn(*ENTRY.unpack_from(data, pos)[1:]) for pos in range(0, len(data), ENTRY.size)]
        assert entries == model.aborted
        # a follower taking over serves the same read_committed answer
        cluster.kill(state["leader"])
        new = cluster.wait_for(lambda: (s := cluster.partition_state(TOPIC, 0)) and s["leader"] not in
                               (-1, state["leader"]) and s["leader"], 60, "a new leader")
        with WireClient(cluster.broker(new).port) as c:
            # its high watermark reaches the end once the dead leader left the ISR (replica.lag.time.max.ms)
            r = cluster.wait_for(lambda: (x := fetch(c, TOPIC, 0, 0, 1)) and x.error_code == 0
                                 and x.high_watermark == offset and x, 60, "the new leader's high watermark at the end")
            assert r.last_stable_offset == offset
            assert sorted((t.producer_id, t.first_offset) for t in r.aborted_transactions) == \
                sorted((t.producer_id, t.first_offset) for t in model.collected(0, offset))


# ---- Apache Kafka 3.8 as the oracle --------------------------------------------------------------

KAFKA_HOME = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                          "pybroker-kafka", "kafka_2.13-3.8.0")


def start_kafka(base_dir: str):
    """One KRaft Kafka 3.8 (broker and controller) with verification off; (process, port)."""
    import subprocess
    from tests.cluster import Cluster, answers_requests, free_ports
    port, controller = free_ports(2)
    lines = ["process.roles=broker,controller", "node.id=1", f"controller.quorum.voters=1@127.0.0.1:{controller}",
             f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
             f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", "controller.listener.names=CONTROLLER",
             "inter.broker.listener.name=PLAINTEXT",
             "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
             f"log.dirs={os.path.join(base_dir, 'kafka-data')}", "offsets.topic.replication.factor=1",
             "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
             "transaction.partition.verification.enable=false"]
    os.makedirs(base_dir, exist_ok=True)
    props = os.path.join(base_dir, "kafka.properties")
    with open(props, "w") as f:
        f.write("\n".join(lines) + "\n")
    env = {**os.environ, "LOG_DIR": os.path.join(base_dir, "kafka-logs"), "KAFKA_HEAP_OPTS": "-Xmx512M -Xms512M"}
    bin_dir = os.path.join(KAFKA_HOME, "bin")
    subprocess.run([os.path.join(bin_dir, "kafka-storage.sh"), "format", "-t", "txn-log-oracle-00001", "-c", props],
                   check=True, capture_output=True, env=env, timeout=120)
    proc = subprocess.Popen([os.path.join(bin_dir, "kafka-server-start.sh"), props], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def serving():
        try:
            answers_requests(port, timeout=2)
            return True
        except Exception:  # not listening yet
            return False
    try:
        Cluster.wait_for(lambda: proc.poll() is None and serving(), 120, "Kafka to listen", interval=0.5)
    except BaseException:
        proc.kill()
        proc.wait(60)
        raise
    return proc, port


def oracle_steps(port: int) -> list:
    """One scenario of produces, markers, read_committed fetches and ListOffsets; producer ids named."""
    out = []
    with WireClient(port) as c:
        c.create_topic("oracle", 2)
        deadline = time.monotonic() + DEADLINE
        while c.metadata(["oracle"]).topics[0].partitions[0].leader_id < 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        a, b = new_pid(c), new_pid(c)
        names = {a: "A", b: "B"}

        def view(r):
            aborted = None if r.aborted_transactions is None else \
                [(names.get(t.producer_id, t.producer_id), t.first_offset) for t in r.aborted_transactions]
            return (r.error_code, r.high_watermark, r.last_stable_offset, aborted, record_offsets(r.records))

        out.append(("no transactional id", c.produce("oracle", 0, txn_batch(a, 0, 0, 2)).error_code))
        out.append(("A opens", c.produce("oracle", 0, txn_batch(a, 0, 0, 2), transactional_id="ta").error_code))
        out.append(("B opens", c.produce("oracle", 0, txn_batch(b, 0, 0, 1), transactional_id="tb").error_code))
        out.append(("A again", c.produce("oracle", 0, txn_batch(a, 0, 2, 1), transactional_id="ta").error_code))
        out.append(("A not transactional", c.produce("oracle", 0, txn_batch(a, 0, 3, 1, transactional=False),
                                                     transactional_id="ta").error_code))
        out.append(("open", view(fetch(c, "oracle", 0, 0, 1)), view(fetch(c, "oracle", 0, 0, 0))))
        out.append(("latest", list_latest(c, "oracle", 0, 1), list_latest(c, "oracle", 0, 0)))
        out.append(("markers", sorted((names[k[0]], k[1], k[2], v) for k, v in write_markers(
            c, [(a, 0, False, 3, [("oracle", 0)]), (b, 0, True, 3, [("oracle", 0), ("oracle", 1)])]).items())))
        for offset in (0, 2, 3, 4, 5):
            out.append(("ended", offset, view(fetch(c, "oracle", 0, offset, 1))))
        out.append(("latest", list_latest(c, "oracle", 0, 1), list_latest(c, "oracle", 0, 0)))
        out.append(("older coordinator epoch", write_markers(c, [(a, 0, True, 2, [("oracle", 0)])])[(a, "oracle", 0)]))
        out.append(("bumped epoch", write_markers(c, [(a, 1, False, 3, [("oracle", 0)])])[(a, "oracle", 0)]))
        out.append(("older epoch", write_markers(c, [(a, 0, False, 3, [("oracle", 0)])])[(a, "oracle", 0)]))
        out.append(("older epoch data", c.produce("oracle", 0, txn_batch(a, 0, 3, 1),
                                                  transactional_id="ta").error_code))
        out.append(("unknown partition", write_markers(c, [(a, 1, True, 3, [("oracle", 9)])])[(a, "oracle", 9)]))
        req = REQUESTS[0]
        request = req(transactional_id="x", acks=-1, timeout_ms=10000, topic_data=[req.TopicProduceData(
            name="oracle", partition_data=[req.PartitionProduceData(index=0, records=txn_batch(a, 1, 0, 1)),
                                           req.PartitionProduceData(index=1, records=txn_batch(b, 0, 1, 1))])])
        try:
            codes = [p.error_code for p in c.request(request, 8).responses[0].partition_responses]
        except Exception as exc:  # the broker may refuse the whole request by closing
            codes = type(exc).__name__
        out.append(("two producers", codes))
    return out


def test_storage_answers_as_kafka(tmp_path, broker_factory):
    """The same produces, markers and reads against Kafka 3.8 and pybroker give the same answers."""
    if not os.path.isfile(os.path.join(KAFKA_HOME, "bin", "kafka-server-start.sh")):
        pytest.skip(f"Apache Kafka 3.8 is not installed at {KAFKA_HOME}")
    proc, port = start_kafka(str(tmp_path / "kafka"))
    try:
        theirs = oracle_steps(port)
    finally:
        proc.kill()
        proc.wait(60)
    ours = oracle_steps(broker_factory(overrides=NO_VERIFY).port)
    assert ours == theirs

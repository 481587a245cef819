"""Transactions on the storage side, in-process: producer state, the last stable offset, the aborted-transaction
index (``.txnindex``) and read_committed reads on real log directories and the real Partition.
(The broker-level cases, with WriteTxnMarkers over the wire: tests/broker/test_txn_log.py.)"""
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
from pybroker.log.txn_index import AbortedTxn, ENTRY, TxnIndex
from pybroker.records import (CONTROL, TRANSACTIONAL, build_batch, build_control_batch, decode_control_record,
                              decode_records)
from pybroker.replica.partition import NO_TRANSACTIONAL_ID, NO_VERIFICATION, Partition
from pybroker.replica.producer_state import VERIFY_NOT_NEEDED, VerificationGuard
from tests.broker.test_txn_log import (INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, Model,
                                       TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTION_COORDINATOR_FENCED, txn_batch)
from tests.logutil import check_log_structure


def open_partition(directory: str, config: LogConfig | None = None, clean: bool = True,
                   recovery_point: int = 0) -> Partition:
    """A leader replica (broker 0, replication factor one) over a real log directory."""
    lg = Log(directory, "t", 0, config or LogConfig(retention_ms=-1), clean=clean, recovery_point=recovery_point)
    p = Partition("t", 0, None, lg, 0, 0, (0,))
    p.make_leader(PartitionState("t", 0, 0, 1, (0,), (0,)))
    return p


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


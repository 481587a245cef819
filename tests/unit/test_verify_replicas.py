"""``pybroker verify-replicas``' lockstep comparison in-process: lag and divergence bounds
(on real brokers: tests/cluster/test_verify_replicas.py)."""
from pybroker import core
from pybroker.records import build_batch


def answer(batches=(), hw=0, error=0, log_start=0):
    """A Fetch response partition holding ``batches`` given as (base offset, record count, value)."""
    from types import SimpleNamespace
    records = b"".join(bytes(build_batch([value] * count, base_offset=base)) for base, count, value in batches)
    return SimpleNamespace(error_code=error, high_watermark=hw, log_start_offset=log_start, records=records or None)


def test_lockstep_compare_bounds_lag_and_divergence():
    from pybroker.tools.verify_replicas import PartitionCheck
    lines = []
    c = PartitionCheck("t", 0, (1, 2, 3), leader=1)
    c.take(1, answer([(0, 5, b"a"), (5, 5, b"b"), (10, 5, b"c")], hw=10))
    c.take(2, answer([(0, 5, b"a"), (5, 5, b"B"), (10, 5, b"c")], hw=10))
    c.take(3, answer([(0, 5, b"a")], hw=5))
    c.compare(lines.append)
    assert c.position == 5 and not lines  # replica 3's HW bounds the comparison
    c.take(3, answer([(5, 5, b"b")], hw=10))
    c.take(3, answer(hw=10))  # at its log end
    assert c.at_end[3] and c.lag() == (5, 10)
    c.compare(lines.append)
    assert c.position == 10  # offsets 10-14 are beyond every HW: not compared yet
    assert lines == [f"Partition t-0: replica 2's batch at offset 5 has crc {c_crc(b'B')} "
                     f"while replica 1's has crc {c_crc(b'b')}"]

    d = PartitionCheck("t", 1, (1, 2), leader=2)
    d.take(1, answer(error=1, hw=20, log_start=8))  # OFFSET_OUT_OF_RANGE below replica 1's log start
    assert d.position == 8 and d.cursor == {1: 8, 2: 8} and not d.failed
    d.take(1, answer([(8, 4, b"x"), (12, 8, b"y")], hw=20))
    d.take(2, answer([(8, 6, b"x")], hw=20))
    d.compare(lines.append)
    assert d.diverged and "replica 1's batch at offset 8 (last offset 11) does not line up" in lines[-1]
    assert not d.wants(1) and not d.wants(2)

    e = PartitionCheck("t", 2, (1, 2), leader=1)
    e.take(2, answer(error=6))
    assert e.failed[2].startswith("NOT_LEADER_OR_FOLLOWER fetching offset 0")


def c_crc(value: bytes) -> int:
    return core.batch.parse_header(bytes(build_batch([value] * 5, base_offset=5)), 0).crc


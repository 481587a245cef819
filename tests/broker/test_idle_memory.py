"""Memory of a real broker process: an idle single node stays small, and the log cleaner's dedupe buffer
(128 MiB by default) is taken for a cleaning and given back after it. Bounds, not timings."""
from tests.broker.test_compaction import (COMPACT, FAST_CLEANER, produce_keyed, push_out_of_active_segment,
                                          wait_cleaned)
from tests.kafka_wire import WireClient

IDLE_RSS_BOUND_KB = 40 * 1024  # an idle broker (and every embedded one in a user's tests) stays within 40 MiB
DEDUPE_BUFFER_KB = 128 * 1024  # log.cleaner.dedupe.buffer.size's default


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_an_idle_broker_stays_within_its_memory_bound(broker):
    assert rss_kb(broker.proc.pid) <= IDLE_RSS_BOUND_KB


def test_the_dedupe_buffer_is_given_back_after_a_cleaning(broker_factory):
    b = broker_factory(FAST_CLEANER)
    idle = rss_kb(b.proc.pid)
    with WireClient(b.port) as w:
        w.create_topic("compacted", 1, configs=COMPACT)
    acked = produce_keyed(b.bootstrap, "compacted", [(b"k%d" % (i % 20), b"v%d" % i, []) for i in range(500)])
    push_out_of_active_segment(b.bootstrap, "compacted")
    wait_cleaned(b, "compacted", acked[-1][0] + 1)
    grown = rss_kb(b.proc.pid) - idle
    assert grown < DEDUPE_BUFFER_KB // 2, f"RSS grew by {grown} KiB after a cleaning: the dedupe buffer is still held"

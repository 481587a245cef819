"""The share-partition lag (KIP-1226) as pybroker/share/admin.py computes it from a durable state: the high
watermark minus the start offset minus the records past it whose delivery is complete."""
from pybroker.share.admin import Summary, complete_count, lag
from pybroker.share.partition import RecordState
from pybroker.share.state_records import ShareState

AVAILABLE, ACQUIRED, ACKED, ARCHIVED = (RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED,
                                        RecordState.ARCHIVED)


def state(start, *batches):
    return ShareState(1, 0, start, list(batches))


def test_complete_counts_acknowledged_and_archived_records_from_the_start_offset():
    s = state(10, (10, 11, AVAILABLE, 1), (12, 14, ACKED, 1), (15, 15, ACQUIRED, 1), (16, 19, ARCHIVED, 5))
    assert complete_count(s) == 3 + 4
    assert complete_count(state(12, (8, 14, ACKED, 1))) == 3  # only what lies at or past the start offset
    assert complete_count(state(20, (8, 14, ACKED, 1))) == 0
    assert complete_count(state(5)) == 0  # a state just reset: nothing in flight


def test_lag_is_what_remains_to_be_delivered_for_good():
    s = state(10, (10, 11, AVAILABLE, 1), (12, 14, ACKED, 1))
    assert lag(20, Summary(0, s, complete_count(s))) == 20 - 10 - 3
    assert lag(10, Summary(0, state(10), 0)) == 0
    assert lag(3, Summary(0, state(10), 0)) == 0  # a start offset past the end (reset ahead): nothing to deliver


def test_lag_unknown_when_any_part_is():
    s = state(10)
    assert lag(-1, Summary(0, s, 0)) == -1  # the end offset could not be read
    assert lag(20, Summary(0, s, -1)) == -1  # a coordinator that does not report the complete count
    assert lag(20, Summary(0, None)) == -1  # no state
    assert lag(20, None) == -1

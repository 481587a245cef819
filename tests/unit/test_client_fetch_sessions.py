"""Our consumer's fetch session bookkeeping (KIP-227) in-process: what a Fetch names, forgets and how it
recovers (against a real broker: tests/broker/test_client_fetch_sessions.py)."""
import pytest

from pybroker.client.config import parse
from pybroker.client.consumer import CONSUMER_KEYS
from pybroker.client.fetch_session import FetchParams, FetchSession, next_epoch
from pybroker.client.fetcher import Fetcher
from pybroker.client.types import TopicPartition
from pybroker.protocol import RESPONSES
from tests.broker.test_client_fetch_sessions import ID_A, ID_B


def params(offset, topic_id=ID_A, epoch=-1):
    return FetchParams(topic_id, offset, 0, epoch, 1 << 20)


def test_full_then_incremental_then_forgotten():
    s = FetchSession()
    wanted = {("t", 0): params(0), ("t", 1): params(5)}
    plan = s.plan(wanted, True)
    assert (plan.session_id, plan.epoch, plan.send, plan.forgotten) == (0, 0, wanted, [])
    s.answered(77)
    assert (s.session_id, s.epoch) == (77, 1)
    plan = s.plan(dict(wanted), True)
    assert (plan.session_id, plan.epoch, plan.send, plan.forgotten) == (77, 1, {}, [])  # nothing changed
    s.answered(77)
    moved = {("t", 0): params(3), ("t", 2): params(0)}
    plan = s.plan(moved, True)
    assert plan.epoch == 2 and plan.send == moved and plan.forgotten == [("t", ID_A, 1)]
    s.answered(77)
    assert s.partitions == moved and s.epoch == 3


def test_new_topic_id_is_forgotten_and_added():
    s = FetchSession()
    s.plan({("t", 0): params(4)}, True)
    s.answered(9)
    plan = s.plan({("t", 0): params(0, ID_B)}, True)
    assert plan.send == {("t", 0): params(0, ID_B)} and plan.forgotten == [("t", ID_A, 0)]


def test_failures_start_over_with_a_full_fetch():
    s = FetchSession()
    s.plan({("t", 0): params(0)}, True)
    s.answered(5)
    s.failed(71)  # INVALID_FETCH_SESSION_EPOCH: close it and open another (id, 0)
    plan = s.plan({("t", 0): params(0)}, True)
    assert (plan.session_id, plan.epoch, len(plan.send)) == (5, 0, 1)
    s.answered(6)
    s.failed(70)  # FETCH_SESSION_ID_NOT_FOUND: the broker has none to close (0, 0)
    assert (s.plan({}, True).session_id, s.epoch) == (0, 0)
    s.failed(None)
    s.answered(0)  # no session granted (cache full): full fetches go on
    assert (s.session_id, s.epoch, s.incremental) == (0, 0, False)


def test_switching_between_names_and_ids_restarts():
    s = FetchSession()
    s.plan({("t", 0): params(0)}, True)
    s.answered(5)
    plan = s.plan({("t", 0): params(0, None)}, False)
    assert (plan.session_id, plan.epoch, len(plan.send)) == (5, 0, 1)


def test_epochs_wrap_past_zero():
    assert next_epoch(1) == 2 and next_epoch((1 << 31) - 1) == 1


@pytest.mark.parametrize("reset", ["earliest", "none"])
def test_diverging_epoch_goes_back_or_reports(reset):
    api = RESPONSES[1]
    partition = api.PartitionData(partition_index=0, error_code=0, high_watermark=40, last_stable_offset=40,
                                  log_start_offset=0, records=b"",
                                  diverging_epoch=api.EpochEndOffset(epoch=3, end_offset=25))
    response = api(responses=[api.FetchableTopicResponse(topic="t", partitions=[partition])])
    config = parse({"bootstrap.servers": "127.0.0.1:1", "auto.offset.reset": reset}, "consumer", CONSUMER_KEYS)
    fetcher = Fetcher(config, cluster=None)
    fetcher.set_assignment([("t", 0)], {("t", 0): 30})
    state = fetcher.states[TopicPartition("t", 0)]
    state.fetch_epoch = 4
    woke = fetcher._handle_response(response, {state.tp: (state, state.epoch, 30)}, diverging=True)
    if reset == "none":
        assert woke and state.error.name == "LOG_TRUNCATION" and "offset 25" in state.error.message
    else:
        assert not woke and state.error is None
        assert (state.position, state.fetch_position, state.fetch_epoch) == (25, 25, -1)


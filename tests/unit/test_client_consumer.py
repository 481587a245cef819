"""pybroker's consumer in-process: the read_committed codec and fetch plumbing
(against a real broker: tests/broker/test_client_consumer.py)."""
from pybroker.client import TopicPartition, arrow
from pybroker.client.config import parse
from pybroker.client.consumer import CONSUMER_KEYS
from pybroker.client.fetcher import Fetcher, batches_end
from pybroker.protocol import RESPONSES
from tests.broker.test_client_consumer import _transactional_log


def test_read_committed_codec_and_fetch_plumbing():
    """The broker has no transactions API (it refuses transactional produce and control batches),
    so this drives the fetcher's response handling with a real FetchResponse object carrying the
    aborted-transaction list, and checks both decode paths (poll and poll_batch)."""
    raw, visible, aborted = _transactional_log(100)
    assert batches_end(raw)[0] == 100 + 8
    resp_api = RESPONSES[1]
    partition = resp_api.PartitionData(partition_index=0, error_code=0, high_watermark=108, last_stable_offset=108,
                                       log_start_offset=0, aborted_transactions=[
                                           resp_api.AbortedTransaction(producer_id=pid, first_offset=first)
                                           for pid, first in aborted], records=raw)
    response = resp_api(responses=[resp_api.FetchableTopicResponse(topic="txn", partitions=[partition])])
    for isolation, expect in (("read_committed", visible),
                              ("read_uncommitted", None)):
        config = parse({"bootstrap.servers": "127.0.0.1:1", "isolation.level": isolation}, "consumer", CONSUMER_KEYS)
        for mode in ("records", "tables"):
            fetcher = Fetcher(config, cluster=None)
            fetcher.set_assignment([("txn", 0)], {("txn", 0): 100})
            state = fetcher.states[TopicPartition("txn", 0)]
            assert fetcher._handle_response(response, {state.tp: (state, state.epoch, 100)})
            assert state.fetch_position == 108
            if mode == "records":
                got = {r.offset: r.value for r in fetcher.take_records(100)}
            else:
                table = arrow.concat(fetcher.take_tables(100, arrow.to_record_batch))
                got = dict(zip(table.column("offset").to_pylist(), table.column("value").to_pylist()))
            if expect is None:  # read_uncommitted: every data record, markers skipped
                assert sorted(got) == [100, 101, 102, 103, 106, 107]
            else:
                assert got == expect
            assert fetcher.position(("txn", 0)) == 108  # past the markers


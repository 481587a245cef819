"""The group and transaction coordinators built in-process from a broker's typed services
(pybroker/services.py): a LogManager and a ReplicaManager in a tmp dir, the local metadata backend
and its control; no sockets, no broker process."""
import asyncio

from pybroker.coordinator.coordinator import CommitEntry
from pybroker.records import (TRANSACTIONAL, Record, build_batch, decode_control_record, decode_records,
                              is_control_batch)
from tests.inprocess import start_services, stop_services, wait_for


def test_committed_offsets_come_back_from_the_log_after_a_restart(tmp_path):
    async def run():
        services = await start_services(tmp_path)
        await services.offsets.ensure_topic()  # FindCoordinator's first step: __consumer_offsets exists, led here
        assert services.offsets.owns("g")
        await services.control.create_topic("orders", 2, 1)
        error, results = await services.coordinator.commit(
            "g", -1, "", None, [CommitEntry("orders", 0, 42, metadata="m"), CommitEntry("orders", 1, 7)])
        assert (error, results) == (0, {("orders", 0): 0, ("orders", 1): 0})
        await stop_services(services)

        services = await start_services(tmp_path)  # the offsets partitions load from their logs again
        error, found, _ = services.coordinator.fetch_offsets("g")
        assert error == 0
        assert {tp: (v.offset, v.metadata) for tp, v in found.items()} == {("orders", 0): (42, "m"),
                                                                          ("orders", 1): (7, "")}
        await stop_services(services)
    asyncio.run(run())


def test_a_committed_transaction_gets_its_marker_and_its_state_survives_a_restart(tmp_path):
    async def run():
        services = await start_services(tmp_path)
        await services.transactions.state_log.ensure_topic()
        txn = services.transactions
        await wait_for(lambda: txn.owns("t"), "the transaction state partition to load")
        error, pid, epoch = await txn.init_producer_id("t", 60000, None)
        assert (error, epoch) == (0, 0) and pid >= 0
        await services.control.create_topic("orders", 1, 1)
        assert await txn.add_partitions("t", pid, epoch, [("orders", 0)]) == 0
        batch = build_batch([Record(value=b"a"), Record(value=b"b")], attributes=TRANSACTIONAL,
                            producer_id=pid, producer_epoch=epoch, base_sequence=0)
        appended = services.replicas.append(1, {("orders", 0): batch}, verification={})
        assert appended[("orders", 0)].error == 0
        partition = services.replicas.get("orders", 0)
        assert partition.last_stable_offset == 0  # an open transaction holds read_committed back

        assert await txn.end_txn("t", pid, epoch, True) == 0
        await wait_for(lambda: txn.describe("t")[1].state.label == "CompleteCommit", "the commit to complete")
        assert partition.last_stable_offset == partition.log_end_offset == 3
        written, marker = (partition.log.read(offset, 1 << 20, max_offset=3).read() for offset in (0, 2))
        assert [r.value for r in decode_records(written)] == [b"a", b"b"]
        assert is_control_batch(marker) and decode_control_record(marker).commit
        await stop_services(services)

        services = await start_services(tmp_path)  # the coordinator replays __transaction_state
        txn = services.transactions
        await wait_for(lambda: txn.owns("t") and txn.describe("t")[1] is not None, "the state to load")
        error, md = txn.describe("t")
        assert (error, md.producer_id, md.state.label) == (0, pid, "CompleteCommit")
        await stop_services(services)
    asyncio.run(run())


def test_the_dispatcher_answers_produce_and_list_offsets_from_the_services(tmp_path):
    """Request frames in, response bytes out: the handlers reach nothing but the typed services."""
    from types import SimpleNamespace

    from pybroker.api.dispatcher import Dispatcher
    from pybroker.protocol import decode_response, encode_request
    from pybroker.protocol.messages import REQUESTS
    from pybroker.security.session import Session

    async def run():
        services = await start_services(tmp_path)
        await services.control.create_topic("orders", 1, 1)
        dispatcher = Dispatcher(services)
        conn = SimpleNamespace(session=Session("PLAINTEXT", "PLAINTEXT", "127.0.0.1"),
                               server=SimpleNamespace(listener_name="PLAINTEXT"))

        def call(request, version: int):
            answer = dispatcher.handle(memoryview(encode_request(version, 7, "t", request)), conn)
            header, body = decode_response(b"".join(answer), request.API_KEY, version)
            assert header.correlation_id == 7
            return body

        produce = REQUESTS[0]
        batch = bytes(build_batch([Record(value=b"x"), Record(value=b"y")]))
        body = call(produce(transactional_id=None, acks=1, timeout_ms=1000, topic_data=[produce.TopicProduceData(
            name="orders", partition_data=[produce.PartitionProduceData(index=0, records=batch)])]), 9)
        part = body.responses[0].partition_responses[0]
        assert (part.error_code, part.base_offset) == (0, 0)
        assert services.replicas.get("orders", 0).log_end_offset == 2

        lo = REQUESTS[2]
        body = call(lo(replica_id=-1, isolation_level=0, topics=[lo.ListOffsetsTopic(
            name="orders", partitions=[lo.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                               timestamp=-1, max_num_offsets=1)])]), 5)
        part = body.topics[0].partitions[0]
        assert (part.error_code, part.offset) == (0, 2)
        await stop_services(services)
    asyncio.run(run())

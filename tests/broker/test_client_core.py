"""Client core against a real broker: handshake, pipelining, metadata, failures, retries, config.

The cases of the other tiers: tests/unit/test_client_core.py."""
import asyncio
import socket
import time

import pytest

from pybroker.client import config as client_config
from pybroker.client import connection as client_connection
from pybroker.client.cluster import CONTROLLER, Cluster
from pybroker.client.connection import BrokerConnection
from pybroker.client.errors import (KafkaConnectionError, KafkaError, KafkaTimeoutError)
from pybroker.client.types import TopicPartition
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode
from pybroker.records import value_batch

METADATA, FETCH, LIST_OFFSETS, PRODUCE, CREATE_TOPICS, API_VERSIONS = 3, 1, 2, 0, 19, 18


def run(coro, timeout=30):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(bounded())


def cluster_for(broker, **props):
    return Cluster(client_config.parse({"bootstrap.servers": broker.bootstrap, **props}, "admin"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def create_topic(conn, name, partitions=1):
    api = REQUESTS[CREATE_TOPICS]
    req = api(topics=[api.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)],
              timeout_ms=10000)
    resp = await conn.request(req, conn.version(CREATE_TOPICS, 2, 7))
    assert resp.topics[0].error_code == 0, resp.topics[0].error_message


def metadata_request(topics):
    api = REQUESTS[METADATA]
    return api(topics=None if topics is None else [api.MetadataRequestTopic(name=t) for t in topics],
               allow_auto_topic_creation=False)


def fetch_request(topic, offset=0, max_wait_ms=0, max_bytes=64 << 20):
    api = REQUESTS[FETCH]
    return api(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
               topics=[api.FetchTopic(topic=topic, partitions=[
                   api.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)])])


def produce_request(topic, batch, acks=-1):
    api = REQUESTS[PRODUCE]
    return api(acks=acks, timeout_ms=10000, topic_data=[api.TopicProduceData(
        name=topic, partition_data=[api.PartitionProduceData(index=0, records=batch)])])


def list_offsets_request(topic, partitions, timestamp=-1):
    api = REQUESTS[LIST_OFFSETS]
    return api(replica_id=-1, topics=[api.ListOffsetsTopic(name=topic, partitions=[
        api.ListOffsetsPartition(partition_index=p, timestamp=timestamp) for p in partitions])])


# ---- connection ---------------------------------------------------------------------------

def test_handshake_negotiates_versions(broker):
    async def main():
        conn = await BrokerConnection.open("127.0.0.1", broker.port, "core-test", 10)
        try:
            assert conn.api_versions[METADATA][1] >= 1
            lo, hi = conn.api_versions[METADATA]
            assert conn.version(METADATA, 1, 12) == min(12, hi)
            assert conn.version(METADATA, 0, 2) == 2
            with pytest.raises(KafkaError) as info:
                conn.version(52, 0, 1)  # Vote (KRaft controllers only): the broker does not offer it
            assert info.value.name == "UNSUPPORTED_VERSION" and not info.value.retriable
            with pytest.raises(KafkaError) as info:
                conn.version(METADATA, hi + 1, hi + 3)  # only versions newer than the broker's
            assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
            assert not conn.closed and conn.in_flight == 0
        finally:
            await conn.close()
        assert conn.closed
        with pytest.raises(KafkaConnectionError):
            await conn.request(metadata_request([]), 1)
    run(main())


@pytest.mark.parametrize("api_versions_version", [0, 1, 2])
def test_handshake_with_older_api_versions(broker, monkeypatch, api_versions_version):
    monkeypatch.setattr(client_connection, "API_VERSIONS_RANGE", (0, api_versions_version))

    async def main():
        conn = await BrokerConnection.open("127.0.0.1", broker.port, "core-test", 10)
        assert conn.version(METADATA, 1, 12) >= 1
        await conn.close()
    run(main())


def test_connect_refused_is_a_connection_error():
    async def main():
        with pytest.raises(KafkaConnectionError) as info:
            await BrokerConnection.open("127.0.0.1", free_port(), "core-test", 5)
        assert info.value.retriable and info.value.name == "NETWORK_EXCEPTION"
    run(main())


def test_pipelined_requests_are_matched(broker):
    async def main():
        conn = await BrokerConnection.open("127.0.0.1", broker.port, "core-test", 10)
        names = [f"pipe-{i}" for i in range(8)]
        for i, name in enumerate(names):
            await create_topic(conn, name, partitions=i % 3 + 1)
        mv = conn.version(METADATA, 1, 12)
        lv = conn.version(LIST_OFFSETS, 1, 10)
        av = conn.version(API_VERSIONS, 0, 3)
        # many different requests in flight at once; each answer must be the one for its request
        reqs = []
        for i in range(600):
            name = names[i % len(names)]
            kind = i % 3
            if kind == 0:
                reqs.append((kind, name, conn.request(metadata_request([name]), mv)))
            elif kind == 1:
                reqs.append((kind, name, conn.request(list_offsets_request(name, [0]), lv)))
            else:
                reqs.append((kind, name, conn.request(REQUESTS[API_VERSIONS](  # v3+ needs valid names, as in Kafka
                    client_software_name="core-test", client_software_version="1"), av)))
        assert conn.in_flight > 1
        results = await asyncio.gather(*(r[2] for r in reqs))
        for (kind, name, _), body in zip(reqs, results):
            if kind == 0:
                assert [t.name for t in body.topics] == [name]
                assert len(body.topics[0].partitions) == names.index(name) % 3 + 1
            elif kind == 1:
                assert body.topics[0].name == name and body.topics[0].partitions[0].offset == 0
            else:
                assert body.error_code == 0 and any(k.api_key == METADATA for k in body.api_keys)
        assert conn.in_flight == 0
        await conn.close()
    run(main())


def test_large_response_frames_and_frame_bound(broker):
    async def main():
        conn = await BrokerConnection.open("127.0.0.1", broker.port, "core-test", 10)
        await create_topic(conn, "big")
        pv = conn.version(PRODUCE, 3, 11)
        total = 0
        for _ in range(6):  # ~4.8 MB: far more than the receive buffer
            batch = value_batch(100, 8000)
            total += 100
            resp = await conn.request(produce_request("big", batch), pv)
            assert resp.responses[0].partition_responses[0].error_code == 0
        fv = conn.version(FETCH, 4, 12)
        # a big fetch answer interleaved with small ones
        small = [conn.request(metadata_request(["big"]), conn.version(METADATA, 1, 12)) for _ in range(20)]
        fetched = conn.request(fetch_request("big"), fv)
        more = [conn.request(metadata_request([]), conn.version(METADATA, 1, 12)) for _ in range(20)]
        bodies = await asyncio.gather(fetched, *small, *more)
        part = bodies[0].responses[0].partitions[0]
        assert part.error_code == 0 and part.high_watermark == total
        assert len(part.records) > 4_000_000
        assert all(b.topics[0].name == "big" for b in bodies[1:21])
        await conn.close()

        # a client that accepts at most 1 MiB frames refuses the big answer and fails cleanly
        tight = await BrokerConnection.open("127.0.0.1", broker.port, "core-test", 10, max_frame_bytes=1 << 20)
        with pytest.raises(KafkaConnectionError) as info:
            await tight.request(fetch_request("big"), fv)
        assert "frame" in info.value.message
        assert tight.closed
    run(main())


def test_write_backpressure_and_request_future(broker):
    async def main():
        conn = await BrokerConnection.open("127.0.0.1", broker.port, "core-test", 10)
        await create_topic(conn, "bulk")
        pv = conn.version(PRODUCE, 3, 11)
        batch = bytes(value_batch(100, 9000))  # ~0.9 MB per request
        # more unsent bytes than the transport's high-water mark: later requests wait for the drain
        futures = [conn.request_future(produce_request("bulk", batch), pv) for _ in range(12)]
        assert all(asyncio.isfuture(f) for f in futures)
        bodies = await asyncio.gather(*futures)
        offsets = [b.responses[0].partition_responses[0].base_offset for b in bodies]
        assert offsets == [100 * i for i in range(12)]
        await conn.close()
    run(main())


def test_acks0_send_nowait(broker):
    async def main():
        conn = await BrokerConnection.open("127.0.0.1", broker.port, "core-test", 10)
        await create_topic(conn, "fire")
        pv = conn.version(PRODUCE, 3, 11)
        for _ in range(5):
            conn.send_nowait(produce_request("fire", value_batch(10, 50), acks=0), pv)
        # the connection stays usable and ordered after requests without responses
        lv = conn.version(LIST_OFFSETS, 1, 10)
        for _ in range(50):
            body = await conn.request(list_offsets_request("fire", [0]), lv)
            if body.topics[0].partitions[0].offset == 50:
                break
            await asyncio.sleep(0.05)
        assert body.topics[0].partitions[0].offset == 50
        await conn.close()
    run(main())


def test_request_timeout_closes_connection(broker):
    async def main():
        conn = await BrokerConnection.open("127.0.0.1", broker.port, "core-test", 10)
        await create_topic(conn, "idle")
        fv = conn.version(FETCH, 4, 12)
        # a long-poll fetch on an empty log answers after max_wait_ms: longer than our timeout
        slow = asyncio.ensure_future(conn.request(fetch_request("idle", max_wait_ms=5000), fv, timeout_s=0.3))
        other = asyncio.ensure_future(conn.request(fetch_request("idle", max_wait_ms=5000), fv, timeout_s=20))
        with pytest.raises(KafkaTimeoutError) as info:
            await slow
        assert info.value.retriable and info.value.name == "REQUEST_TIMED_OUT"
        with pytest.raises(KafkaConnectionError):
            await other
        assert conn.closed
    run(main())


def test_killed_broker_fails_pending_and_next_call_reconnects(broker_factory, tmp_path):
    port = free_port()
    broker = broker_factory(port=port)

    async def main():
        cluster = cluster_for(broker, **{"retry.backoff.ms": 50, "reconnect.backoff.ms": 20})
        conn = await cluster.any_connection()
        await create_topic(conn, "t")
        await cluster.refresh(["t"])
        fv = conn.version(FETCH, 4, 12)
        pending = [asyncio.ensure_future(conn.request(fetch_request("t", max_wait_ms=10000), fv))
                   for _ in range(3)]
        await asyncio.sleep(0.3)
        assert conn.in_flight == 3
        broker.kill()
        for fut in pending:
            with pytest.raises(KafkaConnectionError):
                await fut
        assert conn.closed
        # a call made while the broker is down keeps retrying and succeeds once it is back
        call = asyncio.ensure_future(cluster.call(None, metadata_request(["t"]), 1, 12, timeout_s=40))
        await asyncio.sleep(0.5)
        assert not call.done()
        broker.start()
        body = await call
        assert [t.name for t in body.topics] == ["t"]
        assert (await cluster.any_connection()) is not conn
        await cluster.close()
    run(main(), timeout=60)


def test_peer_closing_socket_fails_pending(broker):
    async def main():
        conn = await BrokerConnection.open("127.0.0.1", broker.port, "core-test", 10)
        await create_topic(conn, "t")
        fv = conn.version(FETCH, 4, 12)
        fut = asyncio.ensure_future(conn.request(fetch_request("t", max_wait_ms=10000), fv))
        await asyncio.sleep(0.1)
        # a request the broker cannot parse makes it drop the connection
        conn._transport.write(b"\x00\x00\x00\x08" + b"\xff" * 8)
        with pytest.raises(KafkaConnectionError):
            await fut
        assert conn.closed
    run(main())


# ---- cluster ------------------------------------------------------------------------------

def test_metadata_refresh(broker):
    async def main():
        cluster = cluster_for(broker)
        md = await cluster.refresh()
        assert md.controller_id in md.brokers and md.cluster_id
        assert cluster.partitions_for("m") is None
        conn = await cluster.any_connection()
        await create_topic(conn, "m", partitions=3)
        await create_topic(conn, "n", partitions=2)
        md = await cluster.refresh(["m"])
        assert set(md.topics) == {"m"}
        assert cluster.partitions_for("m") == [0, 1, 2]
        assert cluster.partitions_for("n") is None  # not asked for yet
        assert cluster.leader_for(TopicPartition("m", 1)) in md.brokers
        assert cluster.leader_for(TopicPartition("m", 7)) == -1
        await cluster.refresh()
        assert cluster.partitions_for("n") == [0, 1] and set(cluster.topics) >= {"m", "n"}
        leader = cluster.leader_for(TopicPartition("n", 0))
        assert (await cluster.connection(leader)).node_id == leader
        # a deleted topic disappears on the next refresh
        api = REQUESTS[20]
        resp = await conn.request(api(topic_names=["n"], topics=[api.DeleteTopicState(name="n")],  # v6: topics
                                      timeout_ms=10000), conn.version(20, 1, 6))
        assert resp.responses[0].error_code == 0
        await cluster.refresh(["n"])
        assert cluster.partitions_for("n") is None
        cluster.request_update()
        assert cluster.needs_update
        await cluster.maybe_refresh()
        assert not cluster.needs_update and cluster.partitions_for("m") == [0, 1, 2]
        # auto-creation through metadata
        await cluster.refresh(["auto-made"], auto_create=True)
        for _ in range(50):
            if cluster.partitions_for("auto-made"):
                break
            await asyncio.sleep(0.1)
            await cluster.refresh(["auto-made"])
        assert cluster.partitions_for("auto-made") == [0]
        await cluster.close()
        with pytest.raises(KafkaConnectionError):
            await cluster.any_connection()
    run(main())


def test_coordinator_lookup(broker):
    async def main():
        cluster = cluster_for(broker)
        conn = await cluster.coordinator("group-a")
        md = await cluster.refresh([])
        assert conn.node_id in md.brokers and cluster.coordinator_id("group-a") == conn.node_id
        assert (await cluster.coordinator("group-a")) is conn
        cluster.forget_coordinator("group-a")
        assert cluster.coordinator_id("group-a") == -1
        body = await cluster.call(None, REQUESTS[16](), 0, 4, group_id="group-a")  # ListGroups at the coordinator
        assert body.error_code == 0
        controller = await cluster.call(CONTROLLER, metadata_request([]), 1, 12)
        assert controller.controller_id == cluster.controller_id
        await cluster.close()
    run(main())


def test_call_retries_retriable_errors_with_backoff(broker):
    async def main():
        cluster = cluster_for(broker, **{"retry.backoff.ms": 10, "retry.backoff.max.ms": 40})
        await cluster.refresh()
        seen = []

        def flaky(body):  # the first answers "say" the leader moved
            seen.append(time.monotonic())
            return ErrorCode.NOT_LEADER_OR_FOLLOWER if len(seen) < 3 else 0
        refreshed = cluster._last_refresh
        body = await cluster.call(None, metadata_request([]), 1, 12, check=flaky)
        assert len(seen) == 3 and body.brokers
        assert cluster._last_refresh > refreshed  # stale-metadata errors refresh before retrying

        # a retriable error that persists gives up after `retries` retries
        seen.clear()
        with pytest.raises(KafkaError) as info:
            await cluster.call(None, metadata_request([]), 1, 12, retries=4,
                               check=lambda b: seen.append(1) or ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        assert len(seen) == 5 and info.value.name == "COORDINATOR_LOAD_IN_PROGRESS"

        # a non-retriable one is raised at once, with the broker's message
        seen.clear()
        with pytest.raises(KafkaError) as info:
            await cluster.call(None, metadata_request([]), 1, 12,
                               check=lambda b: seen.append(1) or (ErrorCode.INVALID_REQUEST, "nope"))
        assert len(seen) == 1 and info.value.message == "nope" and not info.value.retriable

        # real per-partition errors: ListOffsets for a partition that does not exist
        seen.clear()

        def partition_error(body):
            seen.append(1)
            return body.topics[0].partitions[0].error_code
        with pytest.raises(KafkaError) as info:
            await cluster.call(None, list_offsets_request("missing", [0]), 1, 10, retries=2, check=partition_error)
        assert info.value.name == "UNKNOWN_TOPIC_OR_PARTITION" and len(seen) == 3

        # the overall deadline stops retries even with many left
        seen.clear()
        with pytest.raises(KafkaError):
            await cluster.call(None, metadata_request([]), 1, 12, timeout_s=0.3,
                               check=lambda b: seen.append(1) or ErrorCode.NOT_COORDINATOR)
        assert 1 <= len(seen) < 100
        await cluster.close()
    run(main())


def test_unreachable_bootstrap_times_out():
    async def main():
        cluster = Cluster(client_config.parse({"bootstrap.servers": f"127.0.0.1:{free_port()}",
                                               "retry.backoff.ms": 20, "reconnect.backoff.ms": 10}, "admin"))
        with pytest.raises(KafkaConnectionError) as info:
            await cluster.call(None, metadata_request([]), 1, 12, timeout_s=0.5)
        assert "no broker is reachable" in info.value.message
        await cluster.close()
    run(main())


# ---- errors, config, runner ---------------------------------------------------------------



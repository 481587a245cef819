"""KIP-207 with our own clients: pybroker's AdminClient.list_offsets and Consumer.end_offsets (and a wire
client asking every broker, which reaches a new leader before any metadata names it), each asked
over and over from its own thread while the partition's leader is killed (-9) and then shut down
(SIGTERM), never see the end offset go back; each is answered again after each election (a new leader
that still lags answers OFFSET_NOT_AVAILABLE, which they retry); every acknowledged record is there.
(librdkafka's watermark query through the same faults: tests/cluster/test_end_offsets_failover.py.)"""
from pybroker.client import AdminClient, Consumer, KafkaError, LATEST, TopicPartition
from pybroker.protocol import REQUESTS
from tests.cluster import Cluster, require_zookeeper
from tests.cluster.test_replication import create_topic, wait_full_isr, wait_new_leader
from tests.kafka_wire import ConnectionClosed, WireClient
from tests.replication_checks import EndOffsetWatcher, LoggedProducer, check_data

OVERRIDES = {"min.insync.replicas": 2, "default.replication.factor": 3, "offsets.topic.num.partitions": 3,
             "replica.lag.time.max.ms": 3000, "zookeeper.session.timeout.ms": 6000}
REQUEST = REQUESTS[2]
NOT_LEADER_OR_FOLLOWER = 6
CLIENT = {"default.api.timeout.ms": 5000, "request.timeout.ms": 2000, "metadata.max.age.ms": 500}


class EveryBroker:
    """``ask()`` for a wire client that asks every broker at once (ListOffsets v7, latest), so it reaches
    a new leader as soon as it leads, without waiting for metadata; raises if none answered."""

    def __init__(self, cluster, topic: str):
        self.cluster, self.topic = cluster, topic
        self.conns: dict = {}
        self.codes: dict = {}  # error code -> how often a broker answered it

    def __call__(self) -> int:
        request = REQUEST(replica_id=-1, isolation_level=0, topics=[REQUEST.ListOffsetsTopic(
            name=self.topic, partitions=[REQUEST.ListOffsetsPartition(partition_index=0, timestamp=LATEST)])])
        answers = []
        for broker_id, b in self.cluster.brokers.items():
            try:
                if broker_id not in self.conns:
                    self.conns[broker_id] = WireClient(b.port, timeout=2)
                p = self.conns[broker_id].request(request, 7).topics[0].partitions[0]
            except (OSError, ConnectionClosed):
                conn = self.conns.pop(broker_id, None)
                if conn is not None:
                    conn.close()
                continue
            self.codes[p.error_code] = self.codes.get(p.error_code, 0) + 1
            if p.error_code == 0:
                answers.append(p.offset)
        if not answers:
            raise KafkaError(NOT_LEADER_OR_FOLLOWER, "no broker answered as the leader")
        return max(answers)  # two leaders for a moment (the deposed one not yet told): the client takes either

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()


def test_our_clients_never_see_the_end_offset_go_back(tmp_path, zookeeper):
    require_zookeeper()
    with Cluster(tmp_path, 3, zk=zookeeper, overrides=OVERRIDES) as cluster:
        topic = create_topic(cluster, "own-ends", partitions=1)
        tp = TopicPartition(topic, 0)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **CLIENT})
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "own-ends", **CLIENT})
        producer = LoggedProducer(cluster.bootstrap, topic).start()
        every = EveryBroker(cluster, topic)
        watchers = [EndOffsetWatcher("admin", lambda: admin.list_offsets({tp: LATEST})[tp].offset,
                                     (KafkaError,)).start(),
                    EndOffsetWatcher("consumer", lambda: consumer.end_offsets([tp])[tp], (KafkaError,)).start(),
                    EndOffsetWatcher("wire", every, (KafkaError,)).start()]
        try:
            producer.wait_acked(100, timeout=120)
            wait_full_isr(cluster, topic, 1)
            for w in watchers:
                w.wait_answers(5)
            for fault in ("kill", "stop"):
                state = cluster.partition_state(topic, 0)
                leader = state["leader"]
                getattr(cluster, fault)(leader)
                wait_new_leader(cluster, topic, leader, state["leader_epoch"], timeout=60)
                producer.wait_acked(50, timeout=60)
                for w in watchers:
                    w.wait_answers(5)
                cluster.restart(leader)
                wait_full_isr(cluster, topic, 1)
            producer.wait_acked(50, timeout=60)
            producer.stop()
            for w in watchers:
                w.stop()
                assert not w.went_back(), f"{w.name}: the end offset went back: {w.went_back()[:5]}"
                last_acked = max(o for _, o, _ in producer.acked if o is not None)
                assert w.seen[-1] <= w.ask() > last_acked, w.name  # and the end covers every acknowledged record
        finally:
            producer.stop()
            for w in watchers:
                w.stop()
            consumer.close()
            admin.close()
            every.close()
        assert not producer.errors, producer.errors[:5]
        check_data(cluster, topic, 1, producer)

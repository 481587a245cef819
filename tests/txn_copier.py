"""A consume-transform-produce copier with confluent-kafka transactions, run as its own process.

usage: python tests/txn_copier.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID PARTITIONS TOTAL [BATCH]

Copies INPUT partition p to OUTPUT partition p (same key and value), BATCH records per transaction,
committing the consumed offsets inside each transaction (``send_offsets_to_transaction``). It uses
assign(), not subscribe(): a restarted copier resumes at once instead of waiting out the session of
the one that was killed. It stops when the group's committed offsets reach TOTAL records. Errors
are handled as librdkafka documents: a retriable one retries the call, an abortable one aborts the
transaction and rewinds to the last commit, a fatal one ends the process with status 2.
"""
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

DEADLINE_S = 120  # a copier never runs longer than this
RETRIES = 10  # attempts of one transactional call that fails with a retriable error


def retried(call, *args):
    """``call(*args)``, again while it fails with a retriable error (e.g. the coordinator is moving)."""
    for attempt in range(RETRIES):
        try:
            return call(*args)
        except KafkaException as exc:
            if not exc.args[0].retriable() or attempt == RETRIES - 1:
                raise
            print(f"retrying {call.__name__}: {exc.args[0].str()}", flush=True)


def committed_start(consumer: Consumer, input_topic: str, partitions: int) -> list[TopicPartition]:
    """Where the last committed transaction left each partition (the beginning when nothing was committed)."""
    tps = consumer.committed([TopicPartition(input_topic, p) for p in range(partitions)], timeout=30)
    return [TopicPartition(input_topic, tp.partition, tp.offset if tp.offset >= 0 else 0) for tp in tps]


def main(argv: list[str]) -> int:
    bootstrap, input_topic, output_topic, group, txn_id, partitions, total = argv[:7]
    partitions, total = int(partitions), int(total)
    batch = int(argv[7]) if len(argv) > 7 else 100
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
                         # a failover (session expiry, election, the new leader found) fits well inside
                         # it: the records of a transaction time out with it, and the producer is fenced
                         "transaction.timeout.ms": 30000, "log_level": 4})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest", "log_level": 4})
    # fences any earlier incarnation and settles its open transaction before offsets are read
    producer.init_transactions(60)
    positions = committed_start(consumer, input_topic, partitions)
    consumer.assign(positions)
    next_offsets = {tp.partition: tp.offset for tp in positions}
    done = sum(next_offsets.values())
    print(f"start {done}", flush=True)
    end = time.monotonic() + DEADLINE_S
    while done < total and time.monotonic() < end:
        msgs = [m for m in consumer.consume(batch, 0.5) if m.error() is None]
        if not msgs:
            continue
        committed = dict(next_offsets)
        producer.begin_transaction()
        try:
            for m in msgs:
                producer.produce(output_topic, key=m.key(), value=m.value(), partition=m.partition())
                next_offsets[m.partition()] = m.offset() + 1
            offsets = [TopicPartition(input_topic, p, o) for p, o in next_offsets.items()]
            retried(producer.send_offsets_to_transaction, offsets, consumer.consumer_group_metadata(), 30)
            retried(producer.commit_transaction, 30)
        except KafkaException as exc:
            if not exc.args[0].txn_requires_abort():
                raise
            print(f"aborting: {exc.args[0].str()}", flush=True)
            retried(producer.abort_transaction, 30)
            next_offsets = committed  # the aborted records are copied again by the next transaction
            for p, o in committed.items():
                consumer.seek(TopicPartition(input_topic, p, o))
            continue
        done = sum(next_offsets.values())
        print(f"committed {done}", flush=True)
    consumer.close()
    return 0 if done >= total else 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KafkaException as exc:
        print(f"transaction error: {exc!r}", file=sys.stderr, flush=True)
        sys.exit(2)

"""Idempotent producing: the producer id and epoch, sequence arithmetic, and which broker errors
end a partition's sequence.

The broker deduplicates by (producer id, epoch, partition, base sequence) over the last five
batches of each producer; the per-partition sequence bookkeeping itself lives with the batches
in ``accumulator.py``.
"""
import asyncio
import logging

from pybroker.client.cluster import backoff_s
from pybroker.client.errors import KafkaError
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

INIT_PRODUCER_ID = 22
INIT_PRODUCER_ID_RANGE = (0, 5)  # v5 may answer TRANSACTION_ABORTABLE
SEQ_MOD = 1 << 31  # sequences are int32 and wrap to 0
MAX_IDEMPOTENT_IN_FLIGHT = 5  # batches per partition the broker remembers for deduplication


def next_sequence(sequence: int, count: int) -> int:
    """The sequence after ``count`` records starting at ``sequence``."""
    return (sequence + count) % SEQ_MOD


def is_fatal_for_partition(code: int) -> bool:
    """Errors after which the idempotent producer cannot continue a partition's sequence."""
    return code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID,
                    ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_PRODUCER_ID_MAPPING)


def sequence_verdict(code: int, out_of_order_is_retriable):
    """What an error means for an idempotent batch's sequence: None when nothing, else whether the
    batch may be retried (False: the partition's sequence is broken). ``out_of_order_is_retriable()``
    is asked only for OUT_OF_ORDER_SEQUENCE_NUMBER."""
    if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
        return out_of_order_is_retriable()
    if is_fatal_for_partition(code):
        return False
    return None


async def request_producer_id(cluster, cfg, stopped):
    """(producer_id, producer_epoch) from InitProducerId, retried with backoff until it works;
    None once ``stopped()`` says the producer is closing."""
    attempt = 0
    req = REQUESTS[INIT_PRODUCER_ID](transactional_id=None, transaction_timeout_ms=60000,
                                     producer_id=-1, producer_epoch=-1)
    while not stopped():
        try:
            body = await cluster.call(None, req, *INIT_PRODUCER_ID_RANGE)
        except KafkaError as exc:
            log.warning("InitProducerId failed (%s); retrying", exc)
            await asyncio.sleep(backoff_s(attempt, cfg["retry.backoff.ms"], cfg["retry.backoff.max.ms"]))
            attempt += 1
            continue
        return body.producer_id, body.producer_epoch
    return None

"""DescribeTransactions: the state of transactional ids this broker coordinates (others get
NOT_COORDINATOR; unknown ids TRANSACTIONAL_ID_NOT_FOUND). DESCRIBE on each id is required, and
partitions of topics the caller may not DESCRIBE are left out, as Kafka does."""
from pybroker.protocol.errors import TRANSACTIONAL_ID_AUTHORIZATION_FAILED
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0

Response = RESPONSES[API_KEY]


def handle(ctx, request):
    authz = ctx.authorizer
    states = []
    for tid in request.transactional_ids:
        if authz is not None and not authz.allowed(ctx, A.DESCRIBE, A.TRANSACTIONAL_ID, tid):
            states.append(_state(tid, TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            continue
        error, md = ctx.transactions.describe(tid)
        if error:
            states.append(_state(tid, error))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(md.partitions):
            by_topic.setdefault(topic, []).append(partition)
        if authz is not None:
            by_topic = {t: ps for t, ps in by_topic.items() if authz.allowed_quietly(ctx, A.DESCRIBE, A.TOPIC, t)}
        states.append(Response.TransactionState(
            error_code=0, transactional_id=tid, transaction_state=md.state.label,
            transaction_timeout_ms=md.timeout_ms, transaction_start_time_ms=md.start_ms,
            producer_id=md.producer_id, producer_epoch=md.producer_epoch,
            topics=[Response.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]))
    return Response(throttle_time_ms=0, transaction_states=states)


def _state(tid: str, error: int):
    # Kafka leaves an errored id's numbers at the schema defaults (0), not -1
    return Response.TransactionState(error_code=error, transactional_id=tid, transaction_state="",
                                     transaction_timeout_ms=0, transaction_start_time_ms=0, producer_id=0,
                                     producer_epoch=0, topics=[])

"""TxnOffsetCommit: a transactional producer commits a group's offsets inside its transaction.

The offsets are appended to the group's ``__consumer_offsets`` partition as the producer's
transactional batch and become visible only when the transaction commits (its marker lands
there). As Kafka: WRITE on the transactional id, READ on the group, then READ on each topic; an
unknown topic or partition gets UNKNOWN_TOPIC_OR_PARTITION; v3+ member fields are checked when
they name a member.
"""
from pybroker.coordinator.coordinator import CommitEntry
from pybroker.protocol.errors import (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
                                      GROUP_AUTHORIZATION_FAILED, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE,
                                      PRODUCER_FENCED, TOPIC_AUTHORIZATION_FAILED,
                                      TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTION_ABORTABLE)
from pybroker.protocol.messages import RESPONSES
from pybroker.security import acl as A

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 4
FIRST_MEMBER_VERSION = 3  # generation, member id and group instance id
FIRST_LEADER_EPOCH_VERSION = 2

FIRST_ABORTABLE_VERSION = 4  # KIP-890: clients that know TRANSACTION_ABORTABLE

Response = RESPONSES[API_KEY]


def _refusal(ctx, authz, request) -> int:
    """An error for the whole request from the ACLs (0: go on)."""
    if not authz.allowed(ctx, A.WRITE, A.TRANSACTIONAL_ID, request.transactional_id):
        return TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if not authz.allowed(ctx, A.READ, A.GROUP, request.group_id):
        return GROUP_AUTHORIZATION_FAILED
    return 0


def _for_client(error: int, version: int) -> int:
    """Errors as Kafka answers each version: the transaction verification's answers as a partition
    leader passes them on, and no COORDINATOR_LOAD_IN_PROGRESS for clients before 2.0."""
    if error == PRODUCER_FENCED:
        return INVALID_PRODUCER_EPOCH
    if error == TRANSACTION_ABORTABLE and version < FIRST_ABORTABLE_VERSION:
        return INVALID_TXN_STATE
    if error == COORDINATOR_LOAD_IN_PROGRESS and version < 2:
        return COORDINATOR_NOT_AVAILABLE
    return error


async def handle(ctx, request):
    authz = ctx.authorizer
    refusal = _refusal(ctx, authz, request) if authz is not None else 0
    errors = {}
    if refusal:
        errors = {(t.name, p.partition_index): refusal for t in request.topics for p in t.partitions}
    else:
        refused = set()
        if authz is not None:
            refused = {t.name for t in request.topics if not authz.allowed(ctx, A.READ, A.TOPIC, t.name)}
        entries = []
        for t in request.topics:
            for p in t.partitions:
                if t.name in refused:
                    errors[(t.name, p.partition_index)] = TOPIC_AUTHORIZATION_FAILED
                else:
                    entries.append(CommitEntry(
                        t.name, p.partition_index, p.committed_offset,
                        p.committed_leader_epoch if ctx.version >= FIRST_LEADER_EPOCH_VERSION else -1,
                        p.committed_metadata))
        if entries:
            member = ctx.version >= FIRST_MEMBER_VERSION
            errors.update(await ctx.coordinator.commit_transactional(
                request.group_id, request.transactional_id, request.producer_id, request.producer_epoch,
                request.generation_id if member else -1, request.member_id if member else "",
                request.group_instance_id if member else None, entries))
    errors = {tp: _for_client(e, ctx.version) for tp, e in errors.items()}
    topics = []
    for t in request.topics:
        topics.append(Response.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            Response.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                                      error_code=errors[(t.name, p.partition_index)])
            for p in t.partitions]))
    return Response(throttle_time_ms=0, topics=topics)

"""What ShareFetch and ShareAcknowledge share: their acknowledgement batches, share sessions, leader
hints for partitions that moved, and the answer's shape (partitions grouped by topic id)."""
from pybroker.protocol.errors import (GROUP_AUTHORIZATION_FAILED, INVALID_REQUEST, TOPIC_AUTHORIZATION_FAILED,
                                      UNKNOWN_TOPIC_ID)
from pybroker.security import acl as A
from pybroker.share.sessions import INITIAL_EPOCH


def acknowledgements(topics) -> dict:
    """{(topic id, index): [(first, last, [types])]} of a request's acknowledgement batches."""
    out = {}
    for t in topics or ():
        for p in t.partitions:
            batches = [(b.first_offset, b.last_offset, list(b.acknowledge_types))
                       for b in (p.acknowledgement_batches or ())]
            if batches:
                out.setdefault((t.topic_id, p.partition_index), []).extend(batches)
    return out


RENEW = 4


def refusal(ctx, request, acks: dict) -> tuple[int, str | None] | None:
    """Why a ShareFetch or ShareAcknowledge is refused as a whole (before its session is touched), or None."""
    authz = ctx.authorizer
    if authz is not None and not authz.allowed(ctx, A.READ, A.GROUP, request.group_id):
        return GROUP_AUTHORIZATION_FAILED, None
    if not request.group_id or not request.member_id:
        return INVALID_REQUEST, "a share group request needs a group id and a member id"
    if bad_types(acks, ctx.version >= 2 and request.is_renew_ack):
        return INVALID_REQUEST, "acknowledge type RENEW only in a renewing request"
    return None


def bad_types(acks: dict, renewing: bool) -> bool:
    """RENEW (KIP-1222) only in a renewing request (v2 IsRenewAck)."""
    return not renewing and any(RENEW in types for batches in acks.values() for _, _, types in batches)


def group_error(ctx, group_id: str) -> tuple[int, str | None]:
    """A group this broker coordinates that is a classic or consumer group: GROUP_ID_NOT_FOUND."""
    coordinator = ctx.services.coordinator
    if coordinator is None or not coordinator.ready or not coordinator.store.owns(group_id):
        return 0, None
    error, message = ctx.services.share.groups.check(group_id)
    return (error, message) if error and message else (0, None)


def open_or_use_session(ctx, share, group_id: str, member_id: str, epoch: int):
    """(error, session): epoch 0 opens one (what an older one of the member held is released), any
    other epoch must be the session's next (or -1, its last request)."""
    if epoch != INITIAL_EPOCH:
        return share.sessions.use(group_id, member_id, epoch)
    error, session, old = share.sessions.open(group_id, member_id, ctx.connection.id)
    if old is not None:
        share.release(old)
    if not error and share.connection_closed not in ctx.connection.close_callbacks:
        ctx.connection.close_callbacks.append(share.connection_closed)
    return error, session


async def apply_acknowledgements(ctx, share, group_id: str, member_id: str, acks: dict, results: dict,
                                 partition_data) -> None:
    """Apply ``acks``; each partition's answer (``partition_data`` objects in ``results``) gets its
    acknowledgement error."""
    names = ctx.metadata.topic_names
    authz = ctx.authorizer
    resolved = {}
    for (topic_id, index), batches in acks.items():
        name = names.get(topic_id)
        if name is None:
            results[(topic_id, index)] = _answer(partition_data, index, UNKNOWN_TOPIC_ID)
        elif authz is not None and not authz.allowed(ctx, A.READ, A.TOPIC, name):
            results[(topic_id, index)] = _answer(partition_data, index, TOPIC_AUTHORIZATION_FAILED)
        else:
            resolved[(name, index, topic_id)] = batches
    if not resolved:
        return
    errors = await share.partitions.acknowledge(group_id, member_id, resolved)
    for name, index, topic_id in resolved:
        results[(topic_id, index)] = _answer(partition_data, index, errors.get((name, index), 0))


def _answer(partition_data, index: int, ack_error: int):
    fields = partition_data.__slots__
    pd = partition_data(partition_index=index)
    if "acknowledge_error_code" in fields:  # ShareFetch: the fetch's own error stays separate
        pd.acknowledge_error_code = ack_error
    else:
        pd.error_code = ack_error
    return pd


def partitions_by_topic(results: dict) -> list:
    """[(topic id, [partition answers sorted by index])], topics in a stable order."""
    by_topic = {}
    for (topic_id, index), pd in results.items():
        by_topic.setdefault(topic_id, []).append(pd)
    return [(t, sorted(ps, key=lambda p: p.partition_index)) for t, ps in sorted(by_topic.items(),
                                                                                key=lambda kv: str(kv[0]))]

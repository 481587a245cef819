"""The admin client's share-group calls (KIP-932), as Kafka 4.2's Admin has them: describe share
groups, list / alter / delete their share-partition start offsets, delete share groups. Listing
share groups is ``list_groups(types=["share"])``.

Every request goes to the group's coordinator (FindCoordinator with the group key, as for consumer
groups), which reads and writes the share-partitions' durable state at their share coordinators.
Item failures raise ``KafkaErrors`` (see ``admin``). ``ShareGroupAdmin`` is mixed into
``AsyncAdminClient``.
"""
from pybroker.client.errors import KafkaError, error_for
from pybroker.client.types import (ShareGroupDescription, ShareMemberDescription, SharePartitionOffsetInfo,
                                   TopicPartition)
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode

SHARE_GROUP_DESCRIBE, DELETE_GROUPS = 77, 42
DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_OFFSETS = 90, 91, 92
SHARE_VERSIONS = {
    SHARE_GROUP_DESCRIBE: (1, 1), DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),  # v1: the lag
    ALTER_SHARE_GROUP_OFFSETS: (0, 0), DELETE_SHARE_GROUP_OFFSETS: (0, 0), DELETE_GROUPS: (0, 2),
}
SYNC_METHODS = ("describe_share_groups", "list_share_group_offsets", "alter_share_group_offsets",
                "delete_share_group_offsets", "delete_share_groups")


def _by_topic(tps) -> dict:
    out: dict = {}
    for tp in tps:
        out.setdefault(tp[0], []).append(int(tp[1]))
    return {t: sorted(set(ps)) for t, ps in sorted(out.items())}


def _per_partition(topics, value) -> tuple[dict, dict]:
    """An answer's partitions: ``{tp: value(partition)}`` of those without error, ``{tp: KafkaError}`` of
    the others."""
    results, errors = {}, {}
    for t in topics:
        for p in t.partitions:
            tp = TopicPartition(t.topic_name, p.partition_index)
            if p.error_code:
                errors[tp] = error_for(p.error_code, p.error_message)
            else:
                results[tp] = value(p)
    return results, errors


class ShareGroupAdmin:
    """Share-group calls of AsyncAdminClient (uses its ``cluster``, ``_groups`` and ``_finish``)."""

    async def _share_call(self, group_id: str, obj, check):
        lo, hi = SHARE_VERSIONS[obj.API_KEY]
        return await self.cluster.call(None, obj, lo, hi, group_id=group_id, check=check)

    async def describe_share_groups(self, group_ids) -> dict:
        """``{group_id: ShareGroupDescription}``; an unknown group (or one of another type) fails with
        GROUP_ID_NOT_FOUND."""
        api = REQUESTS[SHARE_GROUP_DESCRIBE]

        async def one(gid):
            def check(body):
                g = next((g for g in body.groups if g.group_id == gid), None)
                if g is None:
                    return ErrorCode.UNKNOWN_SERVER_ERROR, f"no result for group {gid!r}"
                return g.error_code, g.error_message
            try:
                resp = await self._share_call(gid, api(group_ids=[gid], include_authorized_operations=False), check)
            except KafkaError as exc:
                return exc
            g = next(g for g in resp.groups if g.group_id == gid)
            members = [ShareMemberDescription(
                m.member_id, m.client_id, m.client_host, m.rack_id, m.member_epoch,
                list(m.subscribed_topic_names or ()),
                sorted(TopicPartition(t.topic_name, p) for t in (m.assignment.topic_partitions if m.assignment else ())
                       for p in t.partitions)) for m in g.members]
            return ShareGroupDescription(g.group_id, g.group_state, g.group_epoch, g.assignment_epoch,
                                         g.assignor_name, members, self.cluster.coordinator_id(gid))
        return await self._groups(group_ids, one)

    async def list_share_group_offsets(self, group_id: str, partitions=None) -> dict:
        """The share group's share-partitions: ``{TopicPartition: SharePartitionOffsetInfo}`` (all of them,
        or only ``partitions``; start offset -1: the group has no state for the partition)."""
        api = REQUESTS[DESCRIBE_SHARE_GROUP_OFFSETS]
        topics = None
        if partitions is not None:
            topics = [api.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                      for t, ps in _by_topic(partitions).items()]
        req = api(groups=[api.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=topics)])

        def check(body):
            g = next((g for g in body.groups if g.group_id == group_id), None)
            if g is None:
                return ErrorCode.UNKNOWN_SERVER_ERROR, f"no result for group {group_id!r}"
            return g.error_code, g.error_message
        resp = await self._share_call(group_id, req, check)
        g = next(g for g in resp.groups if g.group_id == group_id)
        results, errors = _per_partition(g.topics, lambda p: SharePartitionOffsetInfo(
            p.start_offset, p.leader_epoch, getattr(p, "lag", -1)))
        return self._finish(results, errors)

    async def alter_share_group_offsets(self, group_id: str, offsets: dict) -> dict:
        """Move share-partition start offsets: ``{TopicPartition: offset}`` -> ``{TopicPartition: True}``.
        The group must be empty (NON_EMPTY_GROUP otherwise); records before a new start offset are
        never delivered, those after it are delivered again."""
        api = REQUESTS[ALTER_SHARE_GROUP_OFFSETS]
        offsets = {TopicPartition(tp[0], int(tp[1])): int(o) for tp, o in offsets.items()}
        by_topic: dict = {}
        for tp, o in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append(
                api.AlterShareGroupOffsetsRequestPartition(partition_index=tp.partition, start_offset=o))
        req = api(group_id=group_id, topics=[api.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                                             for t, ps in by_topic.items()])
        resp = await self._share_call(group_id, req, lambda b: (b.error_code, b.error_message))
        results, errors = _per_partition(resp.responses, lambda p: True)
        for tp in offsets:
            if tp not in results and tp not in errors:
                errors[tp] = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the broker sent no result for it",
                                        retriable=False)
        return self._finish(results, errors)

    async def delete_share_group_offsets(self, group_id: str, topics) -> dict:
        """Delete the share group's state for whole topics: its members start them afresh (at
        share.auto.offset.reset). ``{topic: True}``; the group must be empty."""
        api = REQUESTS[DELETE_SHARE_GROUP_OFFSETS]
        names = sorted(set([topics] if isinstance(topics, str) else topics))
        req = api(group_id=group_id, topics=[api.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in names])
        resp = await self._share_call(group_id, req, lambda b: (b.error_code, b.error_message))
        results, errors = {}, {}
        for t in resp.responses:
            if t.error_code:
                errors[t.topic_name] = error_for(t.error_code, t.error_message)
            else:
                results[t.topic_name] = True
        return self._finish(results, errors)

    async def delete_share_groups(self, group_ids) -> dict:
        """Delete empty share groups and their share-partition state: ``{group_id: True}``. A group with
        members fails with NON_EMPTY_GROUP; an unknown one with GROUP_ID_NOT_FOUND."""
        api = REQUESTS[DELETE_GROUPS]

        async def one(gid):
            def check(body):
                r = next((r for r in body.results if r.group_id == gid), None)
                return (ErrorCode.UNKNOWN_SERVER_ERROR, f"no result for group {gid!r}") if r is None else r.error_code
            try:
                await self._share_call(gid, api(groups_names=[gid]), check)
            except KafkaError as exc:
                return exc
            return True
        return await self._groups(group_ids, one)

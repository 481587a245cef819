"""What the share-group admin APIs (ShareGroupDescribe, Describe/Alter/DeleteShareGroupOffsets,
DeleteGroups of a share group) need beyond membership: the durable state of a group's share-partitions,
found, read, reset and deleted wherever their share coordinators are, and the partitions' end offsets
for the lag (KIP-1226).

Which share-partitions a group has state for is known only to the share coordinators (membership lives
in memory, pybroker/share/groups.py): a question about "every topic" asks the summary of each partition
of each topic, local states straight from this broker's coordinator, the others in one
ReadShareGroupStateSummary per coordinator broker. The lag of a share-partition is the partition's high
watermark minus its start offset minus the records past the start offset whose delivery is complete
(acknowledged or archived): what is still to be delivered for good. -1 when any part is unknown.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from pybroker.protocol.errors import (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
                                      REQUEST_TIMED_OUT)
from pybroker.protocol.messages import REQUESTS
from pybroker.share.coordinator import TOPIC
from pybroker.share.group import ShareGroup
from pybroker.share.partition import RecordState
from pybroker.share.state_records import ShareState, StateKey

log = logging.getLogger(__name__)

GROUP_TYPE = "share"
SUMMARY_KEY, LIST_OFFSETS_KEY = 87, 2
SUMMARY_VERSIONS, LIST_OFFSETS_VERSIONS = (0, 1), (1, 7)
BATCH = 1000  # share-partitions per ReadShareGroupStateSummary sent to one coordinator
RETRIES_S = (0.1, 0.3, 1.0)  # a coordinator moving or loading: asked again after these pauses, then given up
RETRIABLE = {NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT}
CONCURRENCY = 32  # state writes in flight at once
LATEST = -1
_COMPLETE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(frozen=True)
class Summary:
    error: int
    state: ShareState | None  # None: no state (or the error)
    complete: int = -1  # records at or past the start offset whose delivery is complete; -1 unknown


def complete_count(state: ShareState) -> int:
    """Records at or past the start offset that are acknowledged or archived (Kafka's deliveryCompleteCount)."""
    start = state.start_offset
    return sum(last - max(first, start) + 1 for first, last, s, _ in state.batches
               if s in _COMPLETE and last >= start)


def lag(end_offset: int, summary: Summary | None) -> int:
    if summary is None or summary.state is None or summary.complete < 0 or end_offset < 0:
        return -1
    return max(end_offset - summary.state.start_offset - summary.complete, 0)


# ---- the group ----------------------------------------------------------------------------------

def group_kind(services, group_id: str) -> str | None:
    """"share", "consumer" or "classic": the kind of the group of that id coordinated here, None for none."""
    share = services.share
    if share is not None and share.groups.describe(group_id) is not None:
        return GROUP_TYPE
    coordinator = services.coordinator
    if group_id in coordinator.consumer.groups:
        return "consumer"
    if coordinator.describe(group_id) is not None:
        return "classic"
    return None


def ensure_group(share, group_id: str) -> ShareGroup:
    """The share group, created Empty when unknown (AlterShareGroupOffsets creates it, as Kafka 4.2 does)."""
    group = share.groups.describe(group_id)
    if group is None:
        group = share.groups.groups[group_id] = ShareGroup(group_id)
    return group


# ---- which share-partitions and their summaries --------------------------------------------------

def topic_keys(services, group_id: str, topics=None) -> dict:
    """{StateKey: topic name} of every partition of ``topics`` (names; None: every topic with an id)."""
    out = {}
    for name, meta in services.metadata.topics.items():
        if topics is None and name.startswith("__"):
            continue
        if topics is not None and name not in topics:
            continue
        if not getattr(meta.topic_id, "int", 0):
            continue
        for index in sorted(meta.partitions):
            out[StateKey(group_id, meta.topic_id, index)] = name
    return out


async def summaries(share, keys) -> dict:
    """{StateKey: Summary} of ``keys``, asked of their coordinators (in batches), retried a little while
    a coordinator moves or loads."""
    keys = list(keys)
    services = share.services
    if services.control.topics.get(TOPIC) is None:  # the state topic was never created: no state anywhere
        return {k: Summary(0, None, -1) for k in keys}
    out: dict = {}
    pending = keys
    for pause in (*RETRIES_S, None):
        out.update(await _summaries_once(share, pending))
        pending = [k for k in pending if out[k].error in RETRIABLE]
        if not pending or pause is None:
            break
        await asyncio.sleep(pause)
    return out


async def _summaries_once(share, keys) -> dict:
    services = share.services
    by_leader: dict = {}
    for k in keys:
        state = services.metadata.partition(TOPIC, share.coordinator.partition_for(k))
        by_leader.setdefault(state.leader if state is not None else -1, []).append(k)
    out = {}
    remote = []
    for leader, ks in by_leader.items():
        if leader < 0:
            out.update({k: Summary(COORDINATOR_NOT_AVAILABLE, None) for k in ks})
        elif leader == services.node_id:
            for k in ks:
                error, state = share.coordinator.summary(k)
                out[k] = Summary(error, state, complete_count(state) if state is not None else -1)
        else:
            remote += [_remote_summaries(share, leader, ks[i:i + BATCH]) for i in range(0, len(ks), BATCH)]
    for got in await asyncio.gather(*remote):
        out.update(got)
    return out


async def _remote_summaries(share, broker_id: int, keys) -> dict:
    R = REQUESTS[SUMMARY_KEY]
    by_topic: dict = {}
    for k in keys:
        by_topic.setdefault(k.topic_id, []).append(k.partition)
    group_id = keys[0].group_id
    request = R(group_id=group_id, topics=[R.ReadStateSummaryData(topic_id=t, partitions=[
        R.PartitionData(partition=p, leader_epoch=-1) for p in ps]) for t, ps in by_topic.items()])
    try:
        response = await share.remote.peers.request(broker_id, request, SUMMARY_KEY, *SUMMARY_VERSIONS)
    except Exception as exc:  # the link failed or the peer moved: asked again (or reported) by the caller
        log.info("share coordinator %d unreachable for summaries: %s", broker_id, exc)
        return {k: Summary(COORDINATOR_NOT_AVAILABLE, None) for k in keys}
    out = {}
    for result in response.results:
        for p in result.partitions:
            key = StateKey(group_id, result.topic_id, p.partition)
            if p.error_code:
                out[key] = Summary(p.error_code, None)
            elif p.state_epoch < 0 and p.start_offset < 0:
                out[key] = Summary(0, None)
            else:
                out[key] = Summary(0, ShareState(p.state_epoch, p.leader_epoch, p.start_offset, []),
                                   getattr(p, "delivery_complete_count", -1))
    return {k: out.get(k, Summary(COORDINATOR_NOT_AVAILABLE, None)) for k in keys}


async def states_of(share, group_id: str, topics=None) -> tuple[dict, int]:
    """({StateKey: Summary} of the group's share-partitions that have state, on ``topics`` (None: every
    topic), the first error that left a share-partition unknown (0 when none))."""
    got = await summaries(share, topic_keys(share.services, group_id, topics))
    error = next((s.error for s in got.values() if s.error), 0)
    return {k: s for k, s in got.items() if s.state is not None}, error


# ---- changing states ------------------------------------------------------------------------------

async def delete_states(share, keys) -> dict:
    """{StateKey: error} after deleting the states of ``keys`` (through their share coordinators)."""
    return await _bounded({k: share.persister.delete(k) for k in keys})


async def reset_states(share, offsets: dict, current: dict) -> dict:
    """``offsets``: {StateKey: new start offset}; ``current``: {StateKey: Summary} now. Each share-partition's
    state starts again at its offset with the next state epoch, so a leader holding the old state is fenced
    on its next write. {StateKey: error}."""
    def epoch(k):
        s = current.get(k)
        return s.state.state_epoch + 1 if s is not None and s.state is not None else 1
    return await _bounded({k: share.persister.initialize(k, epoch(k), offset) for k, offset in offsets.items()})


async def _bounded(calls: dict) -> dict:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(coro):
        async with gate:
            return await coro
    keys = list(calls)
    results = await asyncio.gather(*(one(calls[k]) for k in keys))
    return dict(zip(keys, results))


# ---- end offsets ---------------------------------------------------------------------------------

async def end_offsets(share, partitions) -> dict:
    """{(topic, index): high watermark, -1 when unknown} from the partitions' leaders."""
    services = share.services
    out, remote = {}, {}
    for topic, index in partitions:
        state = services.metadata.partition(topic, index)
        leader = state.leader if state is not None else -1
        if leader == services.node_id:
            p = services.replicas.get_leader(topic, index)
            out[(topic, index)] = p.high_watermark if p is not None else -1
        elif leader >= 0:
            remote.setdefault(leader, []).append((topic, index))
        else:
            out[(topic, index)] = -1
    for got in await asyncio.gather(*(_remote_ends(share, b, tps) for b, tps in remote.items())):
        out.update(got)
    return out


async def _remote_ends(share, broker_id: int, partitions) -> dict:
    R = REQUESTS[LIST_OFFSETS_KEY]
    by_topic: dict = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    request = R(replica_id=-1, isolation_level=0, topics=[R.ListOffsetsTopic(name=t, partitions=[
        R.ListOffsetsPartition(partition_index=i, current_leader_epoch=-1, timestamp=LATEST) for i in ps])
        for t, ps in by_topic.items()])
    out = {tp: -1 for tp in partitions}
    try:
        response = await share.remote.peers.request(broker_id, request, LIST_OFFSETS_KEY, *LIST_OFFSETS_VERSIONS)
    except Exception as exc:  # the lag is then unknown (-1), as when Kafka's lookup fails
        log.info("broker %d unreachable for end offsets: %s", broker_id, exc)
        return out
    for t in response.topics:
        for p in t.partitions:
            if not p.error_code and (t.name, p.partition_index) in out:
                out[(t.name, p.partition_index)] = p.offset
    return out

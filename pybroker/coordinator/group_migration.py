"""Online migration between the group protocols (KIP-848, ``group.consumer.migration.policy``).

Upgrade: a consumer-protocol member joining a classic group that has members turns it into a
consumer group; each classic member keeps its current assignment (as the target too) at an epoch
equal to the classic generation, and goes on with JoinGroup/SyncGroup/Heartbeat inside it.
Downgrade: when the last consumer-protocol member leaves (or is fenced) and classic members remain,
the group turns back into a classic group at generation = group epoch, each member holding its
target assignment, and a rebalance starts so the client-side assignor takes over.
This module builds the converted groups; the coordinators swap them in and start their timers.
"""
from pybroker.coordinator import consumer_protocol as cp
from pybroker.coordinator.consumer_group import STABLE as MEMBER_STABLE
from pybroker.coordinator.consumer_group import ClassicProtocol, ConsumerGroup, ConsumerMember
from pybroker.coordinator.group import STABLE, Group, Member

POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


def upgrade_enabled(policy: str) -> bool:
    return policy in ("upgrade", "bidirectional")


def downgrade_enabled(policy: str) -> bool:
    return policy in ("downgrade", "bidirectional")


def to_consumer_group(classic: Group, topics) -> ConsumerGroup:
    """The consumer group a classic group becomes; raises cp.MalformedProtocol on unreadable metadata.
    ``topics``: name -> topic record (for topic ids)."""
    generation = classic.generation
    group = ConsumerGroup(classic.group_id, group_epoch=generation, assignment_epoch=generation)
    for m in classic.members.values():
        sub = cp.decode_subscription(m.metadata(classic.protocol) or m.protocols[0][1])
        assigned = {topics[name].topic_id: frozenset(ps) for name, ps in cp.decode_assignment(m.assignment).items()
                    if name in topics}
        member = ConsumerMember(m.member_id, m.group_instance_id, sub.rack_id or None, m.client_id, m.client_host,
                                m.rebalance_timeout_ms, tuple(sorted(set(sub.topics))), state=MEMBER_STABLE,
                                member_epoch=generation, previous_epoch=generation,
                                classic=ClassicProtocol(m.session_timeout_ms, list(m.protocols)))
        group.add(member)
        group._set_owned(member, assigned, {})
        group.target[member.member_id] = assigned
    return group


def to_classic_group(group: ConsumerGroup, leaving_id: str, topic_names: dict) -> Group:
    """The classic group (Stable, generation = group epoch) left when ``leaving_id`` goes.
    ``topic_names``: topic id -> name."""
    classic = Group(group.group_id, state=STABLE, generation=group.group_epoch, protocol_type=cp.PROTOCOL_TYPE)
    for m in group.members.values():
        if m.member_id == leaving_id:
            continue
        classic.add(Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.classic.session_timeout_ms,
                           m.rebalance_timeout_ms, cp.PROTOCOL_TYPE, list(m.classic.protocols)))
    classic.protocol = classic.select_protocol()
    for member in classic.members.values():
        target = group.target.get(member.member_id, {})
        names = {topic_names[t]: ps for t, ps in target.items() if t in topic_names}
        try:
            version = cp.decode_subscription(member.metadata(classic.protocol)).version
        except cp.MalformedProtocol:
            version = 0
        member.assignment = cp.encode_assignment(names, version)
    return classic

"""Topic set-up for ``pybroker mirror``: the target gets every matching source topic, with the same
partition count, the source topic's own config overrides and a replication factor that fits it.

Only topic-level overrides are copied (DescribeConfigs entries whose source is a dynamic topic
config), never the replication throttles or message.timestamp.type (a LogAppendTime target would
stamp its own times over the source's); an override the target refuses is left out and named.
A target topic with fewer partitions than its source is grown (CreatePartitions); one with more is
left as it is (every source partition still has its twin). Topics deleted on the source are never
deleted on the target.
"""
from pybroker.client import AdminClient, ConfigResource, KafkaError, KafkaErrors, NewTopic
from pybroker.protocol.errors import ErrorCode
from pybroker.tools.wire import ToolError

# throttles describe the source cluster's own replica traffic: meaningless (or harmful) elsewhere;
# LogAppendTime on the target would replace the timestamps the source's consumers see
NEVER_COPIED = frozenset({"leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
                          "message.timestamp.type"})


def mirrored(name: str, pattern) -> bool:
    """Whether a source topic is mirrored: the whole name matches and it is not internal."""
    return not name.startswith("__") and pattern.fullmatch(name) is not None


class TopicSync:
    """Brings the target's topics in line with the source's matching topics, one ``sync()`` at a time."""

    def __init__(self, source: AdminClient, target: AdminClient, pattern, replication_factor=None, say=print):
        self.source = source
        self.target = target
        self.pattern = pattern
        self.replication_factor = replication_factor
        self.say = say

    def sync(self) -> list:
        """Create or grow target topics; returns the matching source topics, all ready on the target."""
        src = self.source.list_topics()
        wanted = {name: t for name, t in src.topics.items()
                  if mirrored(name, self.pattern) and not t.internal and not t.error and t.partitions}
        if not wanted:
            return []
        tgt = self.target.list_topics()
        existing = {name: t for name, t in tgt.topics.items() if not t.error and t.partitions}
        missing = sorted(name for name in wanted if name not in existing)
        if missing:
            self._create(missing, wanted, max(1, len(tgt.brokers)))
        grow = {name: len(t.partitions) for name, t in wanted.items()
                if name in existing and len(existing[name].partitions) < len(t.partitions)}
        if grow:
            for name, count in sorted(grow.items()):
                self.say(f"target topic {name} has {len(existing[name].partitions)} partitions, the source "
                         f"{count}: adding {count - len(existing[name].partitions)}")
            self._tolerate(lambda: self.target.create_partitions(grow), "adding partitions")
        return sorted(wanted)

    def _create(self, names: list, wanted: dict, target_brokers: int) -> None:
        overrides = self._overrides(names)
        topics = []
        for name in names:
            source_rf = max(len(p.replicas) for p in wanted[name].partitions.values())
            rf = self.replication_factor or min(source_rf, target_brokers)
            config = dict(overrides.get(name, {}))
            min_isr = config.get("min.insync.replicas")
            if min_isr is not None and min_isr.isdigit() and int(min_isr) > rf:
                config["min.insync.replicas"] = str(rf)  # else acks=all writes could never succeed there
            topics.append(NewTopic(name, num_partitions=len(wanted[name].partitions), replication_factor=rf,
                                   config=config))
        try:
            self.target.create_topics(topics)
            failed = {}
        except KafkaErrors as exc:
            failed = exc.errors
        for t in topics:
            err = failed.get(t.name)
            if err is not None and err.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                continue  # another mirror instance (or a person) was first
            if err is not None and err.code == ErrorCode.INVALID_CONFIG and t.config:
                t = self._create_without_refused(t)
            elif err is not None:
                raise ToolError(f"cannot create topic {t.name} on the target: {err}")
            configs = ", ".join(f"{k}={v}" for k, v in sorted(t.config.items())) or "none"
            self.say(f"created topic {t.name} on the target: {t.num_partitions} partitions, "
                     f"replication factor {t.replication_factor}, config overrides: {configs}")

    def _overrides(self, names: list) -> dict:
        """{topic: {key: value}} of the source topics' own overrides (a topic that cannot be described: none)."""
        resources = [ConfigResource("topic", n) for n in names]
        try:
            found = self.source.describe_configs(resources, include_defaults=False)
        except KafkaErrors as exc:
            found = exc.results
            for res, err in exc.errors.items():
                self.say(f"cannot read the configs of source topic {res.name} ({err}): creating it without")
        return {res.name: {k: v for k, v in cfg.items() if v is not None and k not in NEVER_COPIED}
                for res, cfg in found.items()}

    def _create_without_refused(self, topic: NewTopic) -> NewTopic:
        """Create ``topic`` with only the overrides the target accepts, each tried on its own first."""
        kept = {}
        for key, value in sorted(topic.config.items()):
            trial = NewTopic(topic.name, topic.num_partitions, topic.replication_factor, {key: value})
            try:
                self.target.create_topics([trial], validate_only=True)
                kept[key] = value
            except KafkaErrors as exc:
                self.say(f"topic {topic.name}: not copying {key}={value}, the target refuses it "
                         f"({exc.errors.get(topic.name, exc)})")
        topic = NewTopic(topic.name, topic.num_partitions, topic.replication_factor, kept)
        self._tolerate(lambda: self.target.create_topics([topic]), f"creating topic {topic.name}")
        return topic

    @staticmethod
    def _tolerate(action, what: str) -> None:
        """Run an admin call whose 'already done' answers are fine (a concurrent mirror, a retry)."""
        done = (ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.INVALID_PARTITIONS)
        try:
            action()
        except KafkaErrors as exc:
            bad = {k: e for k, e in exc.errors.items() if e.code not in done}
            if bad:
                raise ToolError(f"{what} on the target failed: " + "; ".join(f"{k}: {e}" for k, e in bad.items()))
        except KafkaError as exc:
            raise ToolError(f"{what} on the target failed: {exc}") from None

"""Topic configs onto open logs: each partition's log takes its topic's overrides over the live
broker defaults (``config.log``, which dynamic ``log.*`` defaults replace in place)."""
from pybroker.log.config import LogConfig


def log_config_for(config, topics, topic: str) -> LogConfig:
    record = topics.get(topic)
    if record is None or not record.configs:
        return config.log
    return LogConfig.from_properties(record.configs, base=config.log)


def apply_log_config(replicas, config, topics, topic: str) -> None:
    cfg = log_config_for(config, topics, topic)
    for (t, _), p in list(replicas.partitions.items()):
        if t == topic:
            p.log.update_config(cfg)


def apply_leader_and_isr(services, controller_epoch: int, states, topic_ids: dict, leaders: dict) -> dict:
    """LeaderAndIsr applied to this broker's replicas ({(topic, partition): error}); new logs take
    their topic's configs (over the dynamic defaults when there are any)."""
    config, topics, replicas = services.config, services.control.topics, services.replicas
    errors = replicas.apply_states(controller_epoch, states, topic_ids,
                                   lambda topic: log_config_for(config, topics, topic), leaders)
    if config.log is not services.backend.dynamic_configs.static_log:  # logs open with the static defaults
        for topic in {s.topic for s in states}:
            apply_log_config(replicas, config, topics, topic)
    return errors

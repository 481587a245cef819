"""The consumer group protocol (KIP-848) in-process: regex subscriptions are matched again only when topic
names change (against a real broker: tests/broker/test_consumer_group_protocol.py)."""



def test_regexes_are_matched_again_only_when_the_topic_names_change():
    from pybroker.coordinator.topic_regex import TopicRegexes
    regexes = TopicRegexes()
    assert regexes.update(["orders-1", "orders-2", "payments"])
    first = regexes.matches(["orders-.*", "pay.*"])
    assert first == {"orders-.*": {"orders-1", "orders-2"}, "pay.*": {"payments"}}
    assert not regexes.update(["payments", "orders-2", "orders-1"])  # the same names: nothing to redo
    again = regexes.matches(["orders-.*", "pay.*"])
    assert all(again[p] is first[p] for p in first)  # the matches kept, not recomputed
    assert regexes.matches(["ord"]) == {"ord": frozenset()}  # a whole-name match, as Java's matches()
    assert regexes.update(["orders-1", "orders-3"])
    assert regexes.matches(["orders-.*"]) == {"orders-.*": {"orders-1", "orders-3"}}


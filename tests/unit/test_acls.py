"""ACL authorization in-process: the rules (deny wins, implied operations, hosts, wildcards), audit-line capping,
bindings Kafka refuses, a bad authorizer class (broker processes and clients: tests/broker/test_acls.py)."""
import pytest

from pybroker.security import acl as A
from pybroker.security.authorizer import AclAuthorizer
from tests.broker.test_acls import ALICE, ANON, AUTHORIZER, BOB


def _authz(*bindings, **kw) -> AclAuthorizer:
    a = AclAuthorizer(**kw)
    a.set_acls([A.AclBinding(A.ResourcePattern(t, n, p), A.AccessControlEntry(who, host, op, perm))
                for t, n, p, who, host, op, perm in bindings])
    return a


def test_rules_deny_wins_implied_operations_hosts_and_wildcards():
    a = _authz((A.TOPIC, "orders", A.LITERAL, "User:alice", "*", A.WRITE, A.ALLOW),
               (A.TOPIC, "orders", A.LITERAL, "User:alice", "10.0.0.9", A.ALL, A.DENY),
               (A.TOPIC, "log-", A.PREFIXED, "User:*", "*", A.READ, A.ALLOW),
               (A.TOPIC, "*", A.LITERAL, "User:bob", "*", A.ALTER_CONFIGS, A.ALLOW),
               (A.GROUP, "g", A.LITERAL, "User:alice", "1.2.3.4", A.READ, A.ALLOW))
    assert a.authorize(ALICE, "127.0.0.1", A.WRITE, A.TOPIC, "orders")
    assert a.authorize(ALICE, "127.0.0.1", A.DESCRIBE, A.TOPIC, "orders")  # implied by WRITE
    assert not a.authorize(ALICE, "127.0.0.1", A.READ, A.TOPIC, "orders")
    assert not a.authorize(ALICE, "10.0.0.9", A.WRITE, A.TOPIC, "orders")  # DENY (ALL, this host) wins
    assert a.authorize(BOB, "h", A.READ, A.TOPIC, "log-app") and a.authorize(ALICE, "h", A.DESCRIBE, A.TOPIC, "log-x")
    assert not a.authorize(BOB, "h", A.READ, A.TOPIC, "lo")
    assert a.authorize(BOB, "h", A.DESCRIBE_CONFIGS, A.TOPIC, "anything")  # implied by ALTER_CONFIGS on *
    assert not a.authorize(BOB, "h", A.DESCRIBE, A.TOPIC, "anything")
    assert a.authorize(ALICE, "1.2.3.4", A.READ, A.GROUP, "g")
    assert not a.authorize(ALICE, "1.2.3.5", A.READ, A.GROUP, "g")
    assert not a.authorize(ALICE, "h", A.READ, A.TOPIC, "no-acls")  # deny by default
    assert _authz(allow_everyone_if_no_acl_found=True).authorize(ALICE, "h", A.READ, A.TOPIC, "no-acls")
    assert _authz(super_users=["User:alice"]).authorize(ALICE, "h", A.ALTER, A.CLUSTER, "kafka-cluster")


def test_rules_any_topic_write_for_idempotent_producers():
    a = _authz((A.TOPIC, "a-", A.PREFIXED, "User:alice", "*", A.WRITE, A.ALLOW),
               (A.TOPIC, "a-b", A.PREFIXED, "User:alice", "*", A.WRITE, A.DENY),
               (A.TOPIC, "x", A.LITERAL, "User:bob", "*", A.WRITE, A.ALLOW),
               (A.TOPIC, "x", A.LITERAL, "User:bob", "*", A.WRITE, A.DENY))
    assert a.authorize_any(ALICE, "h", A.WRITE, A.TOPIC)  # a-c is writable
    assert not a.authorize_any(BOB, "h", A.WRITE, A.TOPIC)  # its one ALLOW is denied


def test_audit_lines_are_capped_per_second(caplog):
    from pybroker.security import authorizer as authz_module
    from pybroker.security.session import Session
    a = _authz()
    session = Session("PLAINTEXT", "PLAINTEXT", "10.0.0.7")
    with caplog.at_level("INFO", logger=authz_module.__name__):
        for _ in range(authz_module.AUDIT_LINES_PER_S * 4):
            a.audit_denial(session, A.WRITE, A.TOPIC, "orders", 0)
        logged = [r for r in caplog.records if r.getMessage() == "authorization denied"]
        assert len(logged) <= authz_module.AUDIT_LINES_PER_S * 2  # the flood may straddle one second boundary
        assert logged[0].fields == {"principal": ANON, "host": "10.0.0.7", "operation": "Write",
                                    "resource_type": "Topic", "resource_name": "orders", "api": "Produce"}
        a._audit_second -= 1  # the next denial falls into a new second: the suppressed ones are counted
        a.audit_denial(session, A.WRITE, A.TOPIC, "orders", 0)
    summary = [r for r in caplog.records if r.getMessage() == "authorization denials not logged"]
    assert summary and summary[-1].fields["count"] > 0


def test_bindings_kafka_refuses():
    ok = A.AclBinding(A.ResourcePattern(A.TOPIC, "t", A.LITERAL), A.AccessControlEntry("User:a", "*", A.READ, A.ALLOW))
    A.validate_binding(ok)
    for bad in (ok._replace(pattern=A.ResourcePattern(A.TOPIC, "*", A.PREFIXED)),
                ok._replace(pattern=A.ResourcePattern(A.TOPIC, "t", A.MATCH)),
                ok._replace(entry=ok.entry._replace(principal="Robot:x")),
                ok._replace(entry=ok.entry._replace(principal="alice")),
                ok._replace(pattern=A.ResourcePattern(A.CLUSTER, "other", A.LITERAL))):
        with pytest.raises(A.AclError):
            A.validate_binding(bad)


def test_unknown_authorizer_class_is_a_config_error():
    from pybroker.config import BrokerConfig, ConfigError
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        BrokerConfig.from_properties({"authorizer.class.name": "com.example.Custom"})
    cfg = BrokerConfig.from_properties({"authorizer.class.name": AUTHORIZER, "super.users": "User:a; User:b"})
    assert cfg.super_users == ("User:a", "User:b") and not cfg.allow_everyone_if_no_acl_found


"""The ACL authorizer: may this principal, from this host, do this operation on this resource?

Kafka's rules (StandardAuthorizer / AclAuthorizer): super users may do anything; the ACLs that
apply to a resource are its LITERAL ones, the LITERAL ``*`` of its type and every PREFIXED one
whose prefix starts its name; when none apply, ``allow.everyone.if.no.acl.found`` decides; a
matching DENY (principal or ``User:*``, host or ``*``, the operation or ALL) wins over any ALLOW;
an ALLOW of READ, WRITE, DELETE or ALTER implies DESCRIBE, one of ALTER_CONFIGS implies
DESCRIBE_CONFIGS, ALL implies everything.

Speed: the ACLs are indexed per resource when they change; each decision is cached by
(principal, host, operation, resource) until the next change, so a check on the request path is
one dict lookup.

Audit: each denial is one logfmt line at INFO on ``pybroker.security.authorizer``
(``msg="authorization denied" principal=User:bob host=10.0.0.7 operation=Write resource_type=Topic
resource_name=orders api=Produce``); past ``AUDIT_LINES_PER_S`` lines in a second the rest are
counted and summed up in one line (``msg="authorization denials not logged" count=N``) when the
next second's first denial comes, so a client hammering a denied resource cannot flood the log or
slow the broker.
"""
import logging
import time

from pybroker.security import acl as A

log = logging.getLogger(__name__)

AUTHORIZER_CLASSES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                      "kafka.security.authorizer.AclAuthorizer",
                      "pybroker.security.authorizer.AclAuthorizer")
DECISION_CACHE_MAX = 100_000  # distinct (principal, host, op, resource) decisions kept between ACL changes
AUDIT_LINES_PER_S = 50


class AclAuthorizer:
    def __init__(self, super_users=(), allow_everyone_if_no_acl_found: bool = False):
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self.bindings: frozenset = frozenset()
        self._literal: dict = {}    # (resource type, name) -> [entry]
        self._prefixed: dict = {}   # resource type -> {prefix: [entry]}
        self._resource_entries: dict = {}  # (resource type, name) -> entries that apply (cache)
        self._decisions: dict = {}
        self._audit_second = 0
        self._audit_lines = 0
        self._audit_suppressed = 0

    # ---- the ACL set ----------------------------------------------------------------------

    def set_acls(self, bindings) -> None:
        """Replace every ACL (loaded from the store or a change notification) and rebuild the index."""
        bindings = frozenset(bindings)
        literal, prefixed = {}, {}
        for b in bindings:
            p = b.pattern
            if p.pattern_type == A.LITERAL:
                literal.setdefault((p.resource_type, p.name), []).append(b.entry)
            else:
                prefixed.setdefault(p.resource_type, {}).setdefault(p.name, []).append(b.entry)
        self.bindings = bindings
        self._literal, self._prefixed = literal, prefixed
        self._resource_entries, self._decisions = {}, {}

    def matching(self, filt: A.AclBindingFilter) -> list:
        return sorted((b for b in self.bindings if filt.matches(b)), key=_binding_order)

    # ---- decisions ------------------------------------------------------------------------

    def authorize(self, principal, host: str, operation: int, resource_type: int, name: str) -> bool:
        key = (principal, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decide(principal, host, operation, resource_type, name)
            if len(self._decisions) >= DECISION_CACHE_MAX:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision

    def allowed(self, ctx, operation: int, resource_type: int, name: str) -> bool:
        """authorize() for the request's session; a denial is audited."""
        s = ctx.session
        if self.authorize(s.principal, s.client_host, operation, resource_type, name):
            return True
        self.audit_denial(s, operation, resource_type, name, ctx.header.request_api_key)
        return False

    def allowed_quietly(self, ctx, operation: int, resource_type: int, name: str) -> bool:
        """For filtering lists (all topics, all groups): Kafka does not audit what is left out."""
        s = ctx.session
        return self.authorize(s.principal, s.client_host, operation, resource_type, name)

    def authorize_any(self, principal, host: str, operation: int, resource_type: int) -> bool:
        """May the principal do ``operation`` on some resource of the type (Kafka's
        authorizeByResourceType)? An ALLOW counts unless a DENY covers its whole pattern."""
        who = str(principal)
        if who in self.super_users:
            return True
        anyone = f"{principal.type}:*"
        allowing = A.IMPLIED_BY.get(operation, (operation, A.ALL))
        allows, denies = [], []
        for b in self.bindings:
            p, e = b.pattern, b.entry
            if p.resource_type != resource_type or e.principal not in (who, anyone) \
                    or e.host not in (host, A.WILDCARD):
                continue
            if e.permission == A.DENY and e.operation in (operation, A.ALL):
                denies.append(p)
            elif e.permission == A.ALLOW and e.operation in allowing:
                allows.append(p)
        if any(d.pattern_type == A.LITERAL and d.name == A.WILDCARD for d in denies):
            return False
        for a in allows:
            if not any(_covers(d, a) for d in denies):
                return True
        return False

    def _decide(self, principal, host, operation, resource_type, name) -> bool:
        who = str(principal)
        if who in self.super_users:
            return True
        entries = self._entries(resource_type, name)
        if not entries:
            return self.allow_if_no_acl
        anyone = f"{principal.type}:*"
        allowing = A.IMPLIED_BY.get(operation, (operation, A.ALL))
        allowed = False
        for e in entries:
            if (e.principal != who and e.principal != anyone) or (e.host != host and e.host != A.WILDCARD):
                continue
            if e.permission == A.DENY:
                if e.operation == operation or e.operation == A.ALL:
                    return False
            elif e.operation in allowing:
                allowed = True
        return allowed

    def _entries(self, resource_type: int, name: str) -> list:
        key = (resource_type, name)
        entries = self._resource_entries.get(key)
        if entries is None:
            entries = list(self._literal.get(key, ()))
            if name != A.WILDCARD:
                entries += self._literal.get((resource_type, A.WILDCARD), ())
            prefixes = self._prefixed.get(resource_type)
            if prefixes:  # one lookup per prefix length of the name, not one per PREFIXED ACL
                for i in range(1, len(name) + 1):
                    entries += prefixes.get(name[:i], ())
            if len(self._resource_entries) >= DECISION_CACHE_MAX:
                self._resource_entries.clear()
            self._resource_entries[key] = entries
        return entries

    # ---- audit ----------------------------------------------------------------------------

    def audit_denial(self, session, operation: int, resource_type: int, name: str, api_key: int) -> None:
        now = int(time.monotonic())
        if now != self._audit_second:
            if self._audit_suppressed:
                log.info("authorization denials not logged", extra={"fields": {"count": self._audit_suppressed}})
            self._audit_second, self._audit_lines, self._audit_suppressed = now, 0, 0
        if self._audit_lines >= AUDIT_LINES_PER_S:
            self._audit_suppressed += 1
            return
        self._audit_lines += 1
        from pybroker.protocol import API_NAMES
        log.info("authorization denied", extra={"fields": {
            "principal": str(session.principal), "host": session.client_host,
            "operation": A.OPERATION_NAMES.get(operation, operation),
            "resource_type": A.RESOURCE_NAMES.get(resource_type, resource_type), "resource_name": name,
            "api": API_NAMES.get(api_key, api_key)}})


def _covers(deny, allow) -> bool:
    """Does a DENY pattern take away every resource the ALLOW pattern grants?"""
    if deny.pattern_type == A.LITERAL:
        return allow.pattern_type == A.LITERAL and deny.name == allow.name
    return allow.name.startswith(deny.name)


def _binding_order(b):
    p, e = b.pattern, b.entry
    return (p.resource_type, p.pattern_type, p.name, e.principal, e.host, e.operation, e.permission)


def new_authorizer(config) -> AclAuthorizer | None:
    """The authorizer the config asks for, or None when authorization is off."""
    if not config.authorizer_class_name:
        return None
    return AclAuthorizer(config.super_users, config.allow_everyone_if_no_acl_found)

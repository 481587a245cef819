"""Durable ACLs: a JSON file on a single node, Kafka's ZooKeeper layout on a cluster.

Single node: ``acls.json`` in the first log dir, ``{"format": 1, "acls": [{"resourceType",
"name", "patternType", "principal", "host", "operation", "permissionType"}]}``, rewritten whole
(temp file, fsync, rename, fsync of the directory), so a crash leaves the old or the new set.

Cluster (as Kafka's ZooKeeper mode): ``/kafka-acl/<ResourceType>/<name>`` for LITERAL patterns and
``/kafka-acl-extended/prefixed/<ResourceType>/<name>`` for PREFIXED ones, each holding
``{"version": 1, "acls": [{"principal", "permissionType", "operation", "host"}]}``, written with
version checks so two brokers changing one resource do not lose an update. Every change adds a
sequential node under ``/kafka-acl-changes`` (LITERAL: ``Type:name``) or
``/kafka-acl-extended-changes`` (JSON pattern); every broker watches both and re-reads the ACLs.
Notifications older than 15 minutes are deleted by the next writer, as Kafka does.
"""
import asyncio
import json
import logging
import os
import time

from pybroker.durable_json import children, follow_changes, read_znode_json, update_znode_json, write_json_atomically
from pybroker.security import acl as A

log = logging.getLogger(__name__)

FILE = "acls.json"
LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
CAS_RETRIES = 20  # version-checked writes racing other brokers
NOTIFICATION_TTL_S = 15 * 60


class LocalAclStore:
    def __init__(self, log_dir: str, authorizer):
        self.path = os.path.join(log_dir, FILE)
        self.authorizer = authorizer
        self._lock = asyncio.Lock()

    async def startup(self) -> None:
        self.authorizer.set_acls(self._read())

    def _read(self) -> set:
        if not os.path.exists(self.path):
            return set()
        with open(self.path) as f:
            data = json.load(f)
        return {A.binding_from_json(d) for d in data.get("acls", [])}

    async def _save(self, bindings: set) -> None:
        body = {"format": 1, "acls": [A.binding_to_json(b) for b in sorted(bindings, key=_order)]}
        await asyncio.to_thread(write_json_atomically, self.path, body)
        self.authorizer.set_acls(bindings)

    async def create(self, bindings) -> None:
        async with self._lock:
            current = set(self.authorizer.bindings)
            if not set(bindings) <= current:
                await self._save(current | set(bindings))

    async def delete(self, filters) -> list:
        """Per filter, the bindings it removed."""
        async with self._lock:
            current = set(self.authorizer.bindings)
            removed = [self.authorizer.matching(f) for f in filters]
            gone = {b for group in removed for b in group}
            if gone:
                await self._save(current - gone)
            return removed


class ZkAclStore:
    def __init__(self, zk, authorizer):
        self.kazoo = zk.kazoo
        self.authorizer = authorizer

    async def startup(self) -> None:
        await follow_changes(self.kazoo, (LITERAL_CHANGES, EXTENDED_CHANGES), self.read_all,
                             self.authorizer.set_acls, "ACLs")

    def read_all(self) -> set:
        out = set()
        for root, pattern_type in ((LITERAL_ROOT, A.LITERAL), (PREFIXED_ROOT, A.PREFIXED)):
            for type_name in children(self.kazoo, root):
                resource_type = A.RESOURCE_BY_NAME.get(type_name.lower())
                if resource_type is None:
                    continue
                for name in children(self.kazoo, f"{root}/{type_name}"):
                    pattern = A.ResourcePattern(resource_type, name, pattern_type)
                    doc = read_znode_json(self.kazoo, _path(pattern))[0]
                    out.update(A.AclBinding(pattern, e) for e in _entries(doc, _path(pattern)))
        return out

    def _update(self, pattern, change) -> None:
        """Apply ``change(entries) -> entries`` to one resource's znode with a version check."""
        path = _path(pattern)

        def new_doc(doc):
            entries = _entries(doc, path)
            new = change(set(entries))
            if new == entries:
                return doc
            return {"version": 1, "acls": [A.entry_to_json(e) for e in sorted(new)]} if new else None
        if update_znode_json(self.kazoo, path, new_doc, CAS_RETRIES):
            self._notify(pattern)

    def _notify(self, pattern) -> None:
        if pattern.pattern_type == A.LITERAL:
            path, data = LITERAL_CHANGES, f"{A.RESOURCE_NAMES[pattern.resource_type]}:{pattern.name}"
        else:
            path, data = EXTENDED_CHANGES, json.dumps({
                "version": 1, "resourceType": A.RESOURCE_NAMES[pattern.resource_type], "name": pattern.name,
                "patternType": A.PATTERN_NAMES[pattern.pattern_type].capitalize()})
        self.kazoo.create(f"{path}/{CHANGE_PREFIX}", data.encode(), sequence=True, makepath=True)
        self._purge_notifications(path)

    def _purge_notifications(self, path: str) -> None:
        """Notifications older than Kafka's 15 minutes have been seen by every live broker: drop them."""
        from kazoo.exceptions import NoNodeError
        cutoff_ms = (time.time() - NOTIFICATION_TTL_S) * 1000
        for child in children(self.kazoo, path):
            try:
                if self.kazoo.exists(f"{path}/{child}").ctime < cutoff_ms:
                    self.kazoo.delete(f"{path}/{child}")
            except (NoNodeError, AttributeError):
                continue  # another broker purged it first

    def _create(self, bindings) -> set:
        for pattern, entries in _by_pattern(bindings).items():
            self._update(pattern, lambda current, add=entries: current | add)
        return self.read_all()

    def _delete(self, filters) -> tuple:
        current = self.read_all()  # the source of truth, not this broker's copy
        removed = [sorted((b for b in current if f.matches(b)), key=_order) for f in filters]
        gone = {b for group in removed for b in group}
        for pattern, entries in _by_pattern(gone).items():
            self._update(pattern, lambda current, drop=entries: current - drop)
        return removed, self.read_all()

    async def create(self, bindings) -> None:
        self.authorizer.set_acls(await asyncio.to_thread(self._create, bindings))

    async def delete(self, filters) -> list:
        removed, now = await asyncio.to_thread(self._delete, filters)
        self.authorizer.set_acls(now)
        return removed


def _path(pattern) -> str:
    root = LITERAL_ROOT if pattern.pattern_type == A.LITERAL else PREFIXED_ROOT
    return f"{root}/{A.RESOURCE_NAMES[pattern.resource_type]}/{pattern.name}"


def _entries(doc: dict, path: str) -> set:
    """The access control entries of one resource's znode document; none when unreadable."""
    try:
        return {A.entry_from_json(d) for d in doc.get("acls", [])}
    except (KeyError, AttributeError, TypeError):
        log.warning("ignoring unreadable ACLs at %s", path)
        return set()


def _by_pattern(bindings) -> dict:
    out = {}
    for b in bindings:
        out.setdefault(b.pattern, set()).add(b.entry)
    return out


def _order(b):
    p, e = b.pattern, b.entry
    return (p.resource_type, p.pattern_type, p.name, e.principal, e.host, e.operation, e.permission)

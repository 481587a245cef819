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

from pybroker.quota.store import write_json_atomically
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
        self.loop = None

    async def startup(self) -> None:
        self.loop = asyncio.get_running_loop()
        for path in (LITERAL_CHANGES, EXTENDED_CHANGES):
            await asyncio.to_thread(self.kazoo.ensure_path, path)
        self.authorizer.set_acls(await asyncio.to_thread(self.read_all))
        for path in (LITERAL_CHANGES, EXTENDED_CHANGES):
            await asyncio.to_thread(self.kazoo.ChildrenWatch, path, self._on_changes)

    def _on_changes(self, children) -> None:
        """kazoo thread: re-read every ACL and hand the set to the loop."""
        try:
            bindings = self.read_all()
        except Exception:
            log.exception("reading ACLs from ZooKeeper failed")
            return
        self.loop.call_soon_threadsafe(self.authorizer.set_acls, bindings)

    def _children(self, path: str) -> list:
        return self.kazoo.get_children(path) if self.kazoo.exists(path) else []

    def read_all(self) -> set:
        out = set()
        for root, pattern_type in ((LITERAL_ROOT, A.LITERAL), (PREFIXED_ROOT, A.PREFIXED)):
            for type_name in self._children(root):
                resource_type = A.RESOURCE_BY_NAME.get(type_name.lower())
                if resource_type is None:
                    continue
                for name in self._children(f"{root}/{type_name}"):
                    pattern = A.ResourcePattern(resource_type, name, pattern_type)
                    out.update(A.AclBinding(pattern, e) for e in self._entries(_path(pattern))[0])
        return out

    def _entries(self, path: str):
        """(entries, znode version or None when absent)."""
        from kazoo.exceptions import NoNodeError
        try:
            data, stat = self.kazoo.get(path)
        except NoNodeError:
            return set(), None
        try:
            acls = json.loads(data).get("acls", []) if data else []
            return {A.entry_from_json(d) for d in acls}, stat.version
        except (ValueError, KeyError, AttributeError):
            log.warning("ignoring unreadable ACLs at %s", path)
            return set(), stat.version

    def _update(self, pattern, change) -> None:
        """Apply ``change(entries) -> entries`` to one resource's znode with a version check."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
        path = _path(pattern)
        for _ in range(CAS_RETRIES):
            entries, version = self._entries(path)
            new = change(set(entries))
            if new == entries:
                return
            body = json.dumps({"version": 1, "acls": [A.entry_to_json(e) for e in sorted(new)]}).encode()
            try:
                if version is None:
                    self.kazoo.create(path, body, makepath=True)
                elif new:
                    self.kazoo.set(path, body, version=version)
                else:
                    self.kazoo.delete(path, version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another broker changed it first: read again
            self._notify(pattern)
            return
        raise RuntimeError(f"ACLs of {pattern} kept changing under us; try again")

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
        for child in self._children(path):
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


def _by_pattern(bindings) -> dict:
    out = {}
    for b in bindings:
        out.setdefault(b.pattern, set()).add(b.entry)
    return out


def _order(b):
    p, e = b.pattern, b.entry
    return (p.resource_type, p.pattern_type, p.name, e.principal, e.host, e.operation, e.permission)

"""Durable client quota configs.

Single node: ``client-quotas.json`` in the first log dir, ``{"format": 1, "quotas": [{"entity":
[[type, name|null], ...], "config": {key: value}}]}``, rewritten whole (temp file, fsync, rename,
fsync of the directory), so a crash leaves the old or the new set.

Cluster: Kafka's ZooKeeper layout, ``/config/clients/<id>``, ``/config/users/<user>`` and
``/config/users/<user>/clients/<id>`` (``<default>`` for a default) holding ``{"version": 1,
"config": {key: "value"}}``; each change also creates a sequential ``/config/changes/config_change_``
node, which every broker watches and then re-reads all quota entities.
"""
import asyncio
import json
import logging
import os

from pybroker.log.checkpoint import fsync_dir
from pybroker.quota import entities as ent
from pybroker.quota.manager import apply_alterations

log = logging.getLogger(__name__)

FILE = "client-quotas.json"
CHANGES = "/config/changes"
CHANGE_PREFIX = "config_change_"


def write_json_atomically(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


class LocalQuotaStore:
    def __init__(self, log_dir: str, manager):
        self.path = os.path.join(log_dir, FILE)
        self.manager = manager

    async def startup(self) -> None:
        self.load()

    def load(self) -> None:
        self.manager.set_all(self._read())

    def _read(self) -> dict:
        if not os.path.exists(self.path):
            return {}
        with open(self.path) as f:
            data = json.load(f)
        return {ent.from_json(q["entity"]): {k: float(v) for k, v in q["config"].items()}
                for q in data.get("quotas", [])}

    async def alter(self, alterations, validate_only: bool) -> None:
        new = apply_alterations(self.manager.configs, alterations)
        if validate_only:
            return
        body = {"format": 1, "quotas": [{"entity": ent.to_json(e), "config": v} for e, v in
                                        sorted(new.items(), key=lambda kv: repr(kv[0]))]}
        await asyncio.to_thread(write_json_atomically, self.path, body)
        self.manager.set_all(new)


class ZkQuotaStore:
    def __init__(self, zk, manager):
        self.zk = zk
        self.kazoo = zk.kazoo
        self.manager = manager
        self.loop = None

    async def startup(self) -> None:
        self.loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.kazoo.ensure_path, CHANGES)
        self.manager.set_all(await asyncio.to_thread(self.read_all))
        await asyncio.to_thread(self.kazoo.ChildrenWatch, CHANGES, self._on_changes)

    def _on_changes(self, children) -> None:
        """kazoo thread: re-read every quota entity and hand the result to the loop."""
        try:
            configs = self.read_all()
        except Exception:
            log.exception("reading client quotas from ZooKeeper failed")
            return
        self.loop.call_soon_threadsafe(self.manager.set_all, configs)

    def _children(self, path: str) -> list:
        return self.kazoo.get_children(path) if self.kazoo.exists(path) else []

    def _config(self, path: str) -> dict:
        try:
            data = self.kazoo.get("/config/" + path)[0]
            raw = json.loads(data).get("config", {}) if data else {}
            return {k: float(v) for k, v in raw.items() if k in ent.KEYS}
        except Exception:
            return {}

    def read_all(self) -> dict:
        paths = [f"clients/{c}" for c in self._children("/config/clients")]
        for user in self._children("/config/users"):
            paths.append(f"users/{user}")
            paths += [f"users/{user}/clients/{c}" for c in self._children(f"/config/users/{user}/clients")]
        out = {}
        for path in paths:
            values = self._config(path)
            if values:
                out[ent.from_path(path)] = values
        return out

    def _write(self, alterations) -> None:
        for entity, ops in alterations:
            path = "/config/" + ent.to_path(entity)
            current = {}
            if self.kazoo.exists(path):
                data = self.kazoo.get(path)[0]
                current = dict(json.loads(data).get("config", {})) if data else {}
            for key, value, remove in ops:
                if remove:
                    current.pop(key, None)
                else:
                    current[key] = str(int(value)) if value == int(value) else str(value)
            body = json.dumps({"version": 1, "config": current}).encode()
            if self.kazoo.exists(path):
                self.kazoo.set(path, body)
            else:
                self.kazoo.create(path, body, makepath=True)
            self.kazoo.create(f"{CHANGES}/{CHANGE_PREFIX}",
                              json.dumps({"version": 2, "entity_path": ent.to_path(entity)}).encode(),
                              sequence=True, makepath=True)

    async def alter(self, alterations, validate_only: bool) -> None:
        if validate_only:
            return
        await asyncio.to_thread(self._write, alterations)
        self.manager.set_all(await asyncio.to_thread(self.read_all))

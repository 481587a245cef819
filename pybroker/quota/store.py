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

from pybroker.durable_json import children, follow_changes, update_znode_json, write_json_atomically
from pybroker.quota import entities as ent
from pybroker.quota.manager import apply_alterations

log = logging.getLogger(__name__)

FILE = "client-quotas.json"
CHANGES = "/config/changes"
CHANGE_PREFIX = "config_change_"
CAS_ATTEMPTS = 10  # version-checked writes racing other brokers (and SCRAM changes of the same user)


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

    async def startup(self) -> None:
        await follow_changes(self.kazoo, (CHANGES,), self.read_all, self.manager.set_all, "client quotas")

    def _config(self, path: str) -> dict:
        try:
            data = self.kazoo.get("/config/" + path)[0]
            raw = json.loads(data).get("config", {}) if data else {}
            return {k: float(v) for k, v in raw.items() if k in ent.KEYS}
        except Exception:
            return {}

    def read_all(self) -> dict:
        paths = [f"clients/{c}" for c in children(self.kazoo, "/config/clients")]
        for user in children(self.kazoo, "/config/users"):
            paths.append(f"users/{user}")
            paths += [f"users/{user}/clients/{c}" for c in children(self.kazoo, f"/config/users/{user}/clients")]
        out = {}
        for path in paths:
            values = self._config(path)
            if values:
                out[ent.from_path(path)] = values
        return out

    def _write(self, alterations) -> None:
        for entity, ops in alterations:
            def change(doc, ops=ops):
                config = doc.get("config") or {}
                for key, value, remove in ops:
                    if remove:
                        config.pop(key, None)
                    else:
                        config[key] = str(int(value)) if value == int(value) else str(value)
                return {"version": 1, "config": config}
            update_znode_json(self.kazoo, "/config/" + ent.to_path(entity), change, CAS_ATTEMPTS)
            self.kazoo.create(f"{CHANGES}/{CHANGE_PREFIX}",
                              json.dumps({"version": 2, "entity_path": ent.to_path(entity)}).encode(),
                              sequence=True, makepath=True)

    async def alter(self, alterations, validate_only: bool) -> None:
        if validate_only:
            return
        await asyncio.to_thread(self._write, alterations)
        self.manager.set_all(await asyncio.to_thread(self.read_all))

"""Durable SCRAM credentials: salt, iterations, StoredKey and ServerKey per user and mechanism.

Single node: ``scram-credentials.json`` in the first log dir (mode 0600), ``{"format": 1,
"users": {"alice": {"SCRAM-SHA-256": "salt=...,stored_key=...,server_key=...,iterations=4096"}}}``,
rewritten whole (temp file, fsync, rename, fsync of the directory): a crash leaves the old or the
new set, and a change is on disk before logins see it.

Cluster: Kafka's layout, the ``config`` map of ``/config/users/<user>`` (user name URL-encoded as
Kafka's Sanitizer does) with the mechanism name as key, next to the user's client quotas (a
read-modify-write with the znode version keeps both); every change adds a sequential
``/config/changes/config_change_`` node, which every broker watches and then re-reads the users.

Readers see an immutable snapshot ``{user: {mechanism: ScramCredential}}`` swapped on change.
"""
import asyncio
import json
import logging
import os
import urllib.parse
from types import MappingProxyType

from pybroker.durable_json import follow_changes, read_znode_json, update_znode_json, write_json_atomically
from pybroker.security.sasl.scram import MECHANISMS, ScramCredential

log = logging.getLogger(__name__)

FILE = "scram-credentials.json"
FORMAT = 1
USERS = "/config/users"
CHANGES = "/config/changes"
CHANGE_PREFIX = "config_change_"
CAS_ATTEMPTS = 10


def sanitize(user: str) -> str:
    """Kafka's Sanitizer: URL-encode (Java's URLEncoder, with ' ' as %20 and '*' as %2A)."""
    return urllib.parse.quote(user, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


def scram_entries(config: dict) -> dict:
    """The SCRAM credentials among a user's config keys; a malformed one is skipped with a warning."""
    out = {}
    for mech in MECHANISMS:
        text = config.get(mech)
        if text is None:
            continue
        try:
            out[mech] = ScramCredential.from_text(text)
        except ValueError:
            log.warning("ignoring a malformed %s credential", mech)
    return out


class _Snapshot:
    def __init__(self):
        self.users = MappingProxyType({})

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def _set(self, users: dict) -> None:
        self.users = MappingProxyType({u: MappingProxyType(dict(c)) for u, c in users.items() if c})

    async def current(self):
        """{user: {mechanism: credential}} as stored now (what DescribeUserScramCredentials tells)."""
        return self.users


class LocalCredentialStore(_Snapshot):
    def __init__(self, log_dir: str):
        super().__init__()
        self.path = os.path.join(log_dir, FILE)
        self._writing = asyncio.Lock()  # two alterations in flight must not lose each other's users

    async def startup(self) -> None:
        self._set(await asyncio.to_thread(self._read))

    def _read(self) -> dict:
        try:
            with open(self.path) as f:
                data = json.load(f)
        except FileNotFoundError:
            return {}
        return {user: scram_entries(config) for user, config in data.get("users", {}).items()}

    async def apply(self, changes: dict) -> dict:
        """``changes``: {user: {mechanism: ScramCredential, or None to delete}} -> {user: None | exception}."""
        async with self._writing:
            return await self._apply(changes)

    async def _apply(self, changes: dict) -> dict:
        new = {u: dict(c) for u, c in self.users.items()}
        for user, mechs in changes.items():
            entry = new.setdefault(user, {})
            for mech, cred in mechs.items():
                if cred is None:
                    entry.pop(mech, None)
                else:
                    entry[mech] = cred
        body = {"format": FORMAT, "users": {u: {m: c.to_text() for m, c in sorted(mechs.items())}
                                            for u, mechs in sorted(new.items()) if mechs}}
        try:
            await asyncio.to_thread(write_json_atomically, self.path, body, 0o600)
        except OSError as exc:
            log.error("writing %s failed: %s", self.path, exc)
            return {user: exc for user in changes}
        self._set(new)
        return {user: None for user in changes}


class ZkCredentialStore(_Snapshot):
    def __init__(self, zk):
        super().__init__()
        self.kazoo = zk.kazoo

    async def startup(self) -> None:
        await follow_changes(self.kazoo, (CHANGES,), self.read_all, self._set, "SCRAM credentials")

    def read_all(self) -> dict:
        from kazoo.exceptions import NoNodeError
        try:
            names = self.kazoo.get_children(USERS)
        except NoNodeError:
            return {}
        out = {}
        for name in names:
            creds = scram_entries(read_znode_json(self.kazoo, f"{USERS}/{name}")[0].get("config") or {})
            if creds:
                out[desanitize(name)] = creds
        return out

    def _write_user(self, user: str, mechs: dict) -> None:
        def change(doc):
            config = doc.get("config") or {}  # the user's quotas stay as they are
            for mech, cred in mechs.items():
                if cred is None:
                    config.pop(mech, None)
                else:
                    config[mech] = cred.to_text()
            return {"version": 1, "config": config}
        update_znode_json(self.kazoo, f"{USERS}/{sanitize(user)}", change, CAS_ATTEMPTS)
        self.kazoo.create(f"{CHANGES}/{CHANGE_PREFIX}",
                          json.dumps({"version": 2, "entity_path": f"users/{sanitize(user)}"}).encode(),
                          sequence=True, makepath=True)

    def _apply(self, changes: dict) -> dict:
        results = {}
        for user, mechs in changes.items():
            try:
                self._write_user(user, mechs)
                results[user] = None
            except Exception as exc:
                log.error("writing the SCRAM credentials of a user to ZooKeeper failed: %s", exc)
                results[user] = exc
        return results

    async def apply(self, changes: dict) -> dict:
        results = await asyncio.to_thread(self._apply, changes)
        self._set(await asyncio.to_thread(self.read_all))  # our own logins see the change at once
        return results

    async def current(self):
        """Read from ZooKeeper, as Kafka does: a change made through another broker is told at once."""
        self._set(await asyncio.to_thread(self.read_all))
        return self.users

"""Group configs on a cluster: a znode per group with overrides, ``/config/groups/<group>``, in the topic
configs' JSON shape (``{"version": 1, "config": {key: value}}``), mirrored by every broker.

Any broker changes a group's znode with a version-checked read-modify-write (pybroker/durable_json.py),
checking the result against its own group.* bounds (pybroker/coordinator/group_configs.py); a group
whose last override goes is deleted. Every broker watches ``/config/groups`` (children) and each
group's znode (data), so a change made through one broker reaches the others as soon as ZooKeeper
tells them; watch callbacks only hand the new value to the event loop.

Znode names are the group ids percent-encoded (RFC 3986 unreserved characters kept, so the usual ids
keep their name; ``/``, control and non-ASCII characters, and the names ``.`` and ``..`` escaped).
"""
import asyncio
import json
import logging
from urllib.parse import quote, unquote

from pybroker.controller.zk_paths import CONFIG_GROUPS
from pybroker.coordinator.group_configs import new_overrides
from pybroker.durable_json import update_znode_json

log = logging.getLogger(__name__)

WRITE_ATTEMPTS = 20  # version-checked writes retried while other brokers change the same group


def znode_name(group_id: str) -> str:
    name = quote(group_id, safe="-_.~")
    return name.replace(".", "%2E") if name in (".", "..") else name


def group_path(group_id: str) -> str:
    return f"{CONFIG_GROUPS}/{znode_name(group_id)}"


def _configs_of(data) -> dict[str, str] | None:
    """A group znode's overrides; None when the body is unreadable."""
    try:
        doc = json.loads(data) if data else {}
        configs = doc.get("config", {})
    except (ValueError, AttributeError):
        return None
    if not isinstance(configs, dict):
        return None
    return {str(k): str(v) for k, v in configs.items()}


class ClusterGroupConfigs:
    """This broker's view of every group's overrides, kept current from ZooKeeper watches."""

    def __init__(self, zk, config):
        self.zk = zk
        self.config = config
        self.groups: dict[str, dict[str, str]] = {}
        self._watched: set[str] = set()  # znode names with a data watch (kept while the broker runs)
        self.loop = None

    async def startup(self) -> None:
        """Read every group's overrides (before requests are served), then follow them."""
        self.loop = asyncio.get_running_loop()
        kz = self.zk.kazoo
        await asyncio.to_thread(kz.ensure_path, CONFIG_GROUPS)
        for name in await asyncio.to_thread(kz.get_children, CONFIG_GROUPS):
            data = await asyncio.to_thread(self._read, name)
            configs = _configs_of(data)
            if configs:
                self.groups[unquote(name)] = configs
        await asyncio.to_thread(kz.ChildrenWatch, CONFIG_GROUPS, self._on_children)

    def _read(self, name: str):
        from kazoo.exceptions import NoNodeError
        try:
            return self.zk.kazoo.get(f"{CONFIG_GROUPS}/{name}")[0]
        except NoNodeError:
            return None

    def _on_children(self, children) -> None:
        """kazoo thread: hand the list of groups with overrides to the loop."""
        self.loop.call_soon_threadsafe(self._listed, list(children))

    def _listed(self, children) -> None:
        for name in children:
            if name not in self._watched:
                self._watched.add(name)
                self.loop.create_task(asyncio.to_thread(self._watch, name))
        present = {unquote(name) for name in children}
        for group in [g for g in self.groups if g not in present]:
            self._set(group, {})

    def _watch(self, name: str) -> None:
        """A worker thread: the watch's first read blocks. It stays set if the group's znode goes, so a
        group given overrides again is seen too."""
        self.zk.kazoo.DataWatch(f"{CONFIG_GROUPS}/{name}", lambda data, stat: self._on_data(name, data))

    def _on_data(self, name: str, data) -> None:
        configs = _configs_of(data)
        if configs is None:
            log.warning("ignoring the unreadable configs of group %s", unquote(name))
            return
        self.loop.call_soon_threadsafe(self._set, unquote(name), configs)

    def _set(self, group_id: str, configs: dict) -> None:
        if configs:
            self.groups[group_id] = dict(configs)
        else:
            self.groups.pop(group_id, None)

    # ---- the control's methods ----------------------------------------------------------------

    def group_configs(self, group_id: str) -> dict[str, str]:
        return dict(self.groups.get(group_id, {}))

    async def alter(self, group_id: str, changes: dict, validate_only: bool, replace_all: bool) -> None:
        """Check the change against the group's znode as it is now, and write it unless validating."""
        outcome = {}

        def change(doc: dict):
            current = _configs_of(json.dumps(doc)) or {}
            new = new_overrides(current, changes, replace_all, self.config)  # raises InvalidConfigError
            outcome["new"], outcome["changed"] = new, new != current
            if validate_only or new == current:
                return doc
            return {"version": 1, "config": new} if new else None

        await asyncio.to_thread(update_znode_json, self.zk.kazoo, group_path(group_id), change, WRITE_ATTEMPTS)
        if not validate_only and outcome["changed"]:
            self._set(group_id, outcome["new"])
            log.info("altered configs of group %s: %s", group_id, dict(sorted(outcome["new"].items())))

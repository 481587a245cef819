"""Small JSON documents kept durably: a local file or a ZooKeeper znode.

A file is rewritten whole (temp file, fsync, rename, fsync of the directory), so a crash leaves
the old or the new document. A znode is changed by read-modify-write with a version check, read
again and retried when another broker wrote it in between, so concurrent writers never lose each
other's keys. ``follow_changes`` keeps a broker's copy current from change-notification nodes.
"""
import asyncio
import copy
import json
import logging
import os

from pybroker.log.checkpoint import fsync_dir

log = logging.getLogger(__name__)


def write_json_atomically(path: str, obj, mode: int = 0o666) -> None:
    """Replace ``path`` with ``obj`` as JSON; ``mode`` (less the umask) is for a new file: 0o600 for secrets."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def children(kazoo, path: str) -> list:
    """The children of ``path``, none when it does not exist."""
    return kazoo.get_children(path) if kazoo.exists(path) else []


def read_znode_json(kazoo, path: str) -> tuple[dict, int | None]:
    """(document, znode version); ({}, None) when absent, ({}, version) when empty or unreadable."""
    from kazoo.exceptions import NoNodeError
    try:
        data, stat = kazoo.get(path)
    except NoNodeError:
        return {}, None
    try:
        doc = json.loads(data) if data else {}
    except ValueError:
        log.warning("ignoring unreadable JSON at %s", path)
        return {}, stat.version
    return (doc if isinstance(doc, dict) else {}), stat.version


def update_znode_json(kazoo, path: str, change, attempts: int) -> bool:
    """Apply ``change(document) -> document`` to one znode with a version check; None deletes it.

    ``change`` gets a fresh copy each attempt ({} when the znode is absent). Returns whether
    anything was written (an unchanged document is not).
    """
    from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
    for _ in range(attempts):
        doc, version = read_znode_json(kazoo, path)
        new = change(copy.deepcopy(doc))
        if new == doc or (new is None and version is None):
            return False
        try:
            if new is None:
                kazoo.delete(path, version=version)
            elif version is None:
                kazoo.create(path, json.dumps(new).encode(), makepath=True)
            else:
                kazoo.set(path, json.dumps(new).encode(), version=version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # another broker changed it first: read again
        return True
    raise RuntimeError(f"{path} kept changing under us; giving up after {attempts} attempts")


async def follow_changes(kazoo, change_paths, read_all, publish, what: str) -> None:
    """``publish(read_all())`` now, and again on the loop whenever a node appears under ``change_paths``."""
    loop = asyncio.get_running_loop()
    for path in change_paths:
        await asyncio.to_thread(kazoo.ensure_path, path)
    publish(await asyncio.to_thread(read_all))

    def on_changes(_children) -> None:  # runs on kazoo's thread
        try:
            value = read_all()
        except Exception:
            log.exception("reading %s from ZooKeeper failed", what)
            return
        loop.call_soon_threadsafe(publish, value)

    for path in change_paths:
        await asyncio.to_thread(kazoo.ChildrenWatch, path, on_changes)

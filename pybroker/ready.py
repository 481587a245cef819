"""``pybroker serve --ready-file PATH``: a small JSON file that says the broker is serving, and where.

Written once the listeners accept connections (after ``Broker.start``), atomically (a temporary
file in the same directory, then ``rename``), so a reader sees either no file or a whole one::

    {"pid": 4242, "version": "0.1.0", "listeners": {"PLAINTEXT": "127.0.0.1:40123"}}

``listeners`` maps each listener name to the host:port it is bound to (a port 0 in the config is
the real port here). The file is removed on a clean exit; after a crash (SIGKILL) it stays behind,
so a supervisor should check ``pid`` or remove the file before starting the broker again.
Kept free of heavy imports: it is on the ``serve`` path.
"""
import json
import os

from pybroker.version import __version__


def ready_info(servers) -> dict:
    """The file's content for the broker's bound listeners (each with listener_name, host, port)."""
    return {"pid": os.getpid(), "version": __version__,
            "listeners": {s.listener_name: f"{s.host}:{s.port}" for s in servers}}


def write_ready_file(path: str, info: dict) -> None:
    path = os.path.abspath(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(info, f)
        f.write("\n")
    os.replace(tmp, path)  # atomic within one file system


def read_ready_file(path: str) -> dict | None:
    """The file's content, or None while it does not exist yet."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def remove_ready_file(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass

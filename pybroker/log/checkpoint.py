"""Kafka's checkpoint files: ``version``, ``count``, then one entry per line; replaced atomically.

Offset checkpoints (recovery-point, replication, log-start) hold ``topic partition offset``
lines; the leader-epoch checkpoint holds ``epoch start_offset`` lines. A file that cannot be
parsed raises ``CheckpointError`` and the caller falls back to the safe default (full recovery).
"""
import os

VERSION = 0

RECOVERY_POINT = "recovery-point-offset-checkpoint"
REPLICATION = "replication-offset-checkpoint"
LOG_START = "log-start-offset-checkpoint"
LEADER_EPOCH = "leader-epoch-checkpoint"


class CheckpointError(ValueError):
    pass


def write_lines(path: str, lines: list[str]) -> None:
    """Write version, count and lines to a temp file, fsync it, rename it over ``path``."""
    tmp = path + ".tmp"
    body = f"{VERSION}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def read_lines(path: str, fields: int) -> list[list[str]]:
    """Entries of a checkpoint, each split into ``fields`` parts; [] when the file is absent."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: unreadable: {exc}") from None
    rows = text.split("\n")
    if rows and rows[-1] == "":
        rows.pop()
    if len(rows) < 2 or rows[0].strip() != str(VERSION):
        raise CheckpointError(f"{path}: bad header")
    try:
        count = int(rows[1])
    except ValueError:
        raise CheckpointError(f"{path}: bad entry count {rows[1]!r}") from None
    entries = [row.split() for row in rows[2:]]
    if count != len(entries) or any(len(e) != fields for e in entries):
        raise CheckpointError(f"{path}: expected {count} entries of {fields} fields")
    return entries


def write_offsets(path: str, offsets: dict[tuple[str, int], int]) -> None:
    write_lines(path, [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())])


def read_offsets(path: str) -> dict[tuple[str, int], int]:
    try:
        return {(t, int(p)): int(o) for t, p, o in read_lines(path, 3)}
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


def write_epochs(path: str, epochs: list[tuple[int, int]]) -> None:
    write_lines(path, [f"{e} {o}" for e, o in epochs])


def read_epochs(path: str) -> list[tuple[int, int]]:
    try:
        return [(int(e), int(o)) for e, o in read_lines(path, 2)]
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


def fsync_dir(path: str) -> None:
    """Make a rename or a new file in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""``partition.metadata``: the topic id a partition directory belongs to, in Kafka's format.

Two lines, no trailing newline::

    version: 0
    topic_id: <22 characters of unpadded base64url>

Written once, when a partition is first opened with a known topic id (temp file, then rename);
not fsynced on the event loop, as the id is always derivable from the metadata store: a file
that a power loss left missing or empty is written again. A file naming another topic id means
the directory belongs to a deleted incarnation of the topic (or another cluster): the partition
is refused with INCONSISTENT_TOPIC_ID, never adopted or overwritten. An unreadable file is a
storage error that needs an operator.
"""
import base64
import binascii
import os
import re
import uuid

from pybroker.errors import InconsistentTopicIdError, PartitionMetadataError

FILE_NAME = "partition.metadata"
VERSION = 0
ZERO_UUID = uuid.UUID(int=0)
_LINE = re.compile(r"^(\w+):\s+(\S+)$")


def encode(topic_id: uuid.UUID) -> str:
    b64 = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")
    return f"version: {VERSION}\ntopic_id: {b64}"


def decode(text: str, where: str = FILE_NAME) -> uuid.UUID:
    """The topic id of a file's text; PartitionMetadataError when it is not Kafka's format."""
    lines = text.split("\n")
    fields = [_LINE.match(line.strip()) for line in lines[:2]]
    if len(lines) < 2 or not all(fields) or fields[0].group(1) != "version" or fields[1].group(1) != "topic_id":
        raise PartitionMetadataError(f"{where}: malformed partition metadata {text[:80]!r}")
    if not fields[0].group(2).isdigit() or int(fields[0].group(2)) < VERSION:
        raise PartitionMetadataError(f"{where}: unknown partition metadata version {fields[0].group(2)!r}")
    raw = fields[1].group(2)
    try:
        topic_id = uuid.UUID(bytes=base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (ValueError, binascii.Error):
        raise PartitionMetadataError(f"{where}: bad topic id {raw!r}") from None
    if topic_id == ZERO_UUID:
        raise PartitionMetadataError(f"{where}: the zero topic id is not a topic id")
    return topic_id


def read(directory: str) -> uuid.UUID | None:
    """The topic id stored in ``directory``, or None when there is none (missing or empty file)."""
    path = os.path.join(directory, FILE_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise PartitionMetadataError(f"{path}: cannot read: {exc}") from None
    return decode(text, path) if text.strip() else None


def write(directory: str, topic_id: uuid.UUID) -> None:
    path = os.path.join(directory, FILE_NAME)
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(encode(topic_id))
        os.replace(tmp, path)
    except OSError as exc:
        raise PartitionMetadataError(f"{path}: cannot write: {exc}") from None


def check_or_assign(directory: str, topic_id) -> uuid.UUID | None:
    """The directory's topic id after opening it as ``topic_id`` (None or zero: not known).

    Writes the id when the directory has none; raises InconsistentTopicIdError when it has another.
    """
    known = topic_id if isinstance(topic_id, uuid.UUID) and topic_id != ZERO_UUID else None
    stored = read(directory)
    if stored is None:
        if known is not None:
            write(directory, known)
        return known
    if known is not None and stored != known:
        raise InconsistentTopicIdError(
            f"{directory} holds topic id {encode(stored).split()[-1]}, but the topic's id is "
            f"{encode(known).split()[-1]}: the directory belongs to another incarnation of the topic")
    return stored

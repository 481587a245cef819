"""Contract of the hot-path Kafka codecs (native/kafka_codec.pyx, pybroker/_pure/kafka_codec.py).

``decode_produce`` reads a ProduceRequest body, versions 3-11, laid out as:
  transactional_id  STRING, nullable (int16 length, -1 = null, then UTF-8)
  acks              INT16
  timeout_ms        INT32
  topic_data        ARRAY (int32 count) of: name STRING, partition_data ARRAY of:
                      index INT32, records RECORDS (int32 length, -1 = null, then bytes)
Flexible versions (9+) use the compact forms: strings, arrays and records carry an unsigned
varint (at most 5 bytes, 32 bits) of length + 1 (0 = null; a string over 32767 bytes, a null
topic name or a null array is refused), and each partition, each topic and the request end
with a tagged-field section (uvarint count, then uvarint tag, uvarint size and that many
bytes per field); ProduceRequest defines no tags, so every one is checked and skipped.
Records come back as memoryview slices of the frame (zero copy: ``.obj is frame.obj``).
Bytes after the body are ignored, as Kafka does. Every length and count is checked against the
bytes left before anything is read, sliced or allocated; malformed input raises
``DecodeError`` whose message names the field, its offset in the frame and the numbers involved;
a version outside 3-11 raises ``UnsupportedVersionError`` (a DecodeError). ``frame`` must be a
contiguous one-dimensional buffer of 1-byte items (TypeError otherwise).

``encode_fetch`` writes a FetchResponse body, versions 4-17, with each partition's
records field left as the caller's slice object so it can be sent with sendfile: the result is
a list alternating ``bytes`` and slice objects, starting with bytes, with one bytes part per run
between slices. ``session_id`` and ``error_code`` go in the header (v7+); aborted transactions:
null unless committed_only, else the result's ``aborted_transactions`` ((producer id, first
offset) pairs; None or empty: an empty array); preferred read replica -1 (v11+).
Flexible versions (12+) write compact arrays, strings and records (uvarint length + 1) and a
tagged-field section after each aborted transaction, partition, topic and the body: a
partition's carries ``diverging_epoch`` (tag 0, from the result's (epoch, end offset) or None)
and ``current_leader`` (tag 1, (leader id, leader epoch) or None); the body's carries
``node_endpoints`` (tag 0, v16+, (node id, host, port, rack or None) tuples) when given.
``tagged=False`` is the caller's word that no result has a diverging epoch or a current leader:
those attributes are then not read and every partition's tagged-field section is empty (the common
case, a byte per partition and no attribute lookups).
From v13 a topic is written as its id (``.topic_id``: uuid.UUID or 16 bytes), not its name;
the records of a partition are followed by its tagged fields, so those open the next bytes part.
A field out of range for its wire type, a non-integer, a topic name that is not a str of at
most 32767 UTF-8 bytes, a bad topic id, an unsupported version or a results list whose length
differs from the number of requested partitions raises ``EncodeError`` (a ValueError); both
implementations give the same message.
"""
from typing import NamedTuple, Protocol, Sequence

from pybroker.protocol.primitives import DecodeError, EncodeError, UnsupportedVersionError

__all__ = ["PartitionData", "TopicData", "ProduceData", "KafkaCodec",
           "DecodeError", "EncodeError", "UnsupportedVersionError",
           "PRODUCE_MIN_VERSION", "PRODUCE_MAX_VERSION", "PRODUCE_FIRST_FLEXIBLE_VERSION", "MAX_STRING",
           "FETCH_MIN_VERSION", "FETCH_MAX_VERSION"]

PRODUCE_MIN_VERSION = 3
PRODUCE_MAX_VERSION = 11
PRODUCE_FIRST_FLEXIBLE_VERSION = 9
MAX_STRING = 0x7FFF  # as Kafka's readers: a longer compact string is refused
FETCH_MIN_VERSION = 4
FETCH_MAX_VERSION = 17


class PartitionData(NamedTuple):
    index: int
    records: memoryview | None  # a slice of the request frame, or None for null records


class TopicData(NamedTuple):
    name: str
    partitions: list  # of PartitionData


class ProduceData(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list  # of TopicData


class KafkaCodec(Protocol):
    def decode_produce(self, frame: memoryview, pos: int, version: int) -> ProduceData:
        """ProduceRequest v3-v11 body starting at ``pos`` of ``frame`` (after the header)."""

    def encode_fetch(self, version: int, topics: Sequence, results: Sequence,
                     committed_only: bool, session_id: int = 0, error_code: int = 0,
                     node_endpoints: Sequence | None = None, tagged: bool = True) -> list:
        """FetchResponse v4-v17 body: ``topics`` have ``.topic`` (v4-v12) or ``.topic_id`` (v13+)
        and ``.partitions[i].partition``;
        ``results`` (flat, request order) have ``.error``, ``.high_watermark``,
        ``.last_stable_offset``, ``.log_start_offset``, ``.records`` (None or an object with
        ``.length``, passed through untouched), read when ``committed_only``,
        ``.aborted_transactions`` and, v12+ unless ``tagged`` is false, ``.diverging_epoch`` and
        ``.current_leader``."""

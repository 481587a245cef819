"""Contract of the hot-path Kafka codecs (native/kafka_codec.pyx, pybroker/_pure/kafka_codec.py).

``decode_produce`` reads a ProduceRequest body, versions 3-8 (non-flexible), laid out as:
  transactional_id  STRING, nullable (int16 length, -1 = null, then UTF-8)
  acks              INT16
  timeout_ms        INT32
  topic_data        ARRAY (int32 count) of: name STRING, partition_data ARRAY of:
                      index INT32, records RECORDS (int32 length, -1 = null, then bytes)
Records come back as memoryview slices of the frame (zero copy: ``.obj is frame.obj``).
Bytes after the body are ignored, as Kafka does. Every length and count is checked against the
bytes left before anything is read, sliced or allocated; malformed input raises
``DecodeError`` whose message names the field, its offset in the frame and the numbers involved;
a version outside 3-8 raises ``UnsupportedVersionError`` (a DecodeError). ``frame`` must be a
contiguous one-dimensional buffer of 1-byte items (TypeError otherwise).

``encode_fetch`` writes a FetchResponse body, versions 4-11 (non-flexible), with each partition's
records field left as the caller's slice object so it can be sent with sendfile: the result is
a list alternating ``bytes`` and slice objects, starting with bytes, with one bytes part per run
between slices. Session id 0; aborted transactions: null unless committed_only, else the result's
``aborted_transactions`` ((producer id, first offset) pairs; None or empty: an empty array);
preferred read replica -1 (v11+). A field out of range for its wire type, a non-integer,
a topic name that is not a str of at most 32767 UTF-8 bytes, an unsupported version or a
results list whose length differs from the number of requested partitions raises
``EncodeError`` (a ValueError); both implementations give the same message.
"""
from typing import NamedTuple, Protocol, Sequence

from pybroker.protocol.primitives import DecodeError, EncodeError, UnsupportedVersionError

__all__ = ["PartitionData", "TopicData", "ProduceData", "KafkaCodec",
           "DecodeError", "EncodeError", "UnsupportedVersionError",
           "PRODUCE_MIN_VERSION", "PRODUCE_MAX_VERSION", "FETCH_MIN_VERSION", "FETCH_MAX_VERSION"]

PRODUCE_MIN_VERSION = 3
PRODUCE_MAX_VERSION = 8
FETCH_MIN_VERSION = 4
FETCH_MAX_VERSION = 11


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
        """ProduceRequest v3-v8 body starting at ``pos`` of ``frame`` (after the header)."""

    def encode_fetch(self, version: int, topics: Sequence, results: Sequence,
                     committed_only: bool) -> list:
        """FetchResponse v4-v11 body: ``topics`` have ``.topic`` and ``.partitions[i].partition``;
        ``results`` (flat, request order) have ``.error``, ``.high_watermark``,
        ``.last_stable_offset``, ``.log_start_offset``, ``.records`` (None or an object with
        ``.length``, passed through untouched) and, read when ``committed_only``,
        ``.aborted_transactions``."""

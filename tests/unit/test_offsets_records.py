"""The __consumer_offsets key/value codec: golden bytes per schema version, round trips, bad input,
and Kafka's group -> offsets-partition hash."""

import pytest

from pybroker.coordinator.records import (GroupKey, OffsetKey, OffsetValue, decode_key,
                                          decode_offset_commit_value, encode_group_metadata_key,
                                          encode_offset_commit_key, encode_offset_commit_value,
                                          java_abs, java_string_hash, offsets_partition)


def s16(text: str) -> bytes:
    """A classic STRING assembled by hand: INT16 byte length, UTF-8."""
    b = text.encode()
    return len(b).to_bytes(2, "big") + b


def i16(n): return n.to_bytes(2, "big", signed=True)
def i32(n): return n.to_bytes(4, "big", signed=True)
def i64(n): return n.to_bytes(8, "big", signed=True)


# ---------------------------------------------------------------- keys

def test_offset_commit_key_golden_bytes():
    got = encode_offset_commit_key("g1", "orders", 7)
    assert got == b"\x00\x01" + b"\x00\x02g1" + b"\x00\x06orders" + b"\x00\x00\x00\x07"
    assert decode_key(got) == OffsetKey("g1", "orders", 7)


def test_offset_commit_key_version_0_decodes_the_same():
    buf = i16(0) + s16("grp") + s16("t") + i32(2)
    assert decode_key(buf) == OffsetKey("grp", "t", 2)


def test_group_metadata_key_golden_bytes():
    got = encode_group_metadata_key("my-group")
    assert got == b"\x00\x02\x00\x08my-group"
    assert decode_key(got) == GroupKey("my-group")


@pytest.mark.parametrize("group,topic,partition", [
    ("", "", 0), ("g", "t", 2**31 - 1), ("grüppe-ñ", "tópico😀", 12), ("x" * 300, "y" * 249, 0)])
def test_key_round_trips(group, topic, partition):
    assert decode_key(encode_offset_commit_key(group, topic, partition)) == OffsetKey(group, topic, partition)
    assert decode_key(encode_group_metadata_key(group)) == GroupKey(group)


def test_unicode_string_length_counts_utf8_bytes():
    got = encode_group_metadata_key("é")
    assert got == b"\x00\x02\x00\x02\xc3\xa9"


@pytest.mark.parametrize("version", [3, 4, 5, 9, -1, 0x7fff])
def test_unknown_key_versions_decode_to_none(version):
    assert decode_key(i16(version) + b"whatever follows") is None


# ---------------------------------------------------------------- values

def test_offset_commit_value_v3_golden_bytes():
    got = encode_offset_commit_value(offset=42, leader_epoch=5, metadata="meta", commit_timestamp=1_700_000_000_000)
    assert got == i16(3) + i64(42) + i32(5) + s16("meta") + i64(1_700_000_000_000)
    assert got[:2] == b"\x00\x03"
    assert decode_offset_commit_value(got) == OffsetValue(42, 5, "meta", 1_700_000_000_000, -1)


def test_offset_commit_value_v1_when_expire_timestamp_given():
    got = encode_offset_commit_value(offset=10, leader_epoch=5, metadata="", commit_timestamp=1000,
                                     expire_timestamp=2000)
    # v1 has no leader epoch: it is dropped, as Kafka drops it
    assert got == i16(1) + i64(10) + s16("") + i64(1000) + i64(2000)
    assert decode_offset_commit_value(got) == OffsetValue(10, -1, "", 1000, 2000)


def test_offset_commit_value_none_metadata_is_empty_string():
    got = encode_offset_commit_value(1, -1, None, 5)
    assert got == i16(3) + i64(1) + i32(-1) + s16("") + i64(5)


def test_offset_commit_value_v0_golden_decode():
    buf = i16(0) + i64(99) + s16("m0") + i64(123)
    assert decode_offset_commit_value(buf) == OffsetValue(99, -1, "m0", 123, -1)


def test_offset_commit_value_v2_golden_decode():
    buf = i16(2) + i64(2**40) + s16("") + i64(-1)
    assert decode_offset_commit_value(buf) == OffsetValue(2**40, -1, "", -1, -1)


def test_offset_commit_value_v4_flexible_decode():
    # offset, leader epoch, COMPACT_STRING (uvarint len+1), commit timestamp, empty tagged fields
    buf = i16(4) + i64(7) + i32(3) + bytes([len(b"abc") + 1]) + b"abc" + i64(55) + b"\x00"
    assert decode_offset_commit_value(buf) == OffsetValue(7, 3, "abc", 55, -1)
    # an unknown tag is skipped: count 1, tag 9, size 2, 2 bytes
    tagged = i16(4) + i64(7) + i32(3) + b"\x01" + i64(55) + b"\x01\x09\x02\xaa\xbb"
    assert decode_offset_commit_value(tagged) == OffsetValue(7, 3, "", 55, -1)


def test_offset_commit_value_v4_long_metadata_uses_multibyte_varint():
    meta = "z" * 200  # length+1 = 201 -> varint 0xc9 0x01
    buf = i16(4) + i64(1) + i32(0) + b"\xc9\x01" + meta.encode() + i64(2) + b"\x00"
    assert decode_offset_commit_value(buf).metadata == meta


@pytest.mark.parametrize("args", [
    (0, -1, "", 0), (2**63 - 1, 2**31 - 1, "ünïcode😀", 2**62), (-1, 0, "m" * 1000, -1)])
def test_offset_commit_value_round_trips(args):
    v = decode_offset_commit_value(encode_offset_commit_value(*args))
    assert v == OffsetValue(*args, -1)
    v1 = decode_offset_commit_value(encode_offset_commit_value(*args, expire_timestamp=77))
    assert v1 == OffsetValue(args[0], -1, args[2], args[3], 77)


def test_decode_accepts_bytearray_and_memoryview():
    raw = encode_offset_commit_value(3, 1, "x", 9)
    assert decode_offset_commit_value(bytearray(raw)) == decode_offset_commit_value(memoryview(raw))
    key = encode_offset_commit_key("g", "t", 1)
    assert decode_key(memoryview(key)[0:len(key)]) == OffsetKey("g", "t", 1)


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("raw", [
    encode_offset_commit_key("group", "topic", 3),
    encode_group_metadata_key("group"),
])
def test_truncated_keys_raise_value_error(raw):
    for cut in range(len(raw)):
        with pytest.raises(ValueError, match="truncated"):
            decode_key(raw[:cut])


@pytest.mark.parametrize("raw", [
    encode_offset_commit_value(5, 1, "meta", 100),
    encode_offset_commit_value(5, 1, "meta", 100, 200),
    i16(0) + i64(1) + s16("ab") + i64(2),
    i16(4) + i64(7) + i32(3) + b"\x04abc" + i64(55) + b"\x00",
])
def test_truncated_values_raise_value_error(raw):
    for cut in range(len(raw)):
        with pytest.raises(ValueError, match="truncated"):
            decode_offset_commit_value(raw[:cut])


def test_garbage_raises_value_error():
    with pytest.raises(ValueError, match="unknown version 5"):
        decode_offset_commit_value(i16(5) + b"\x00" * 30)
    with pytest.raises(ValueError, match="unknown version -2"):
        decode_offset_commit_value(i16(-2) + b"\x00" * 30)
    with pytest.raises(ValueError, match="not nullable"):
        decode_offset_commit_value(i16(3) + i64(1) + i32(0) + i16(-1) + i64(0))
    with pytest.raises(ValueError, match="truncated"):  # a string length past the end
        decode_key(i16(1) + i16(0x7fff) + b"ab")
    with pytest.raises(ValueError, match="UTF-8"):
        decode_key(i16(2) + i16(2) + b"\xff\xfe")
    with pytest.raises(ValueError, match="trailing"):
        decode_key(encode_group_metadata_key("g") + b"\x00")
    with pytest.raises(ValueError, match="trailing"):
        decode_offset_commit_value(encode_offset_commit_value(1, 1, "", 1) + b"junk")
    with pytest.raises(ValueError, match="longer than 5"):
        decode_offset_commit_value(i16(4) + i64(1) + i32(0) + b"\xff" * 6)
    with pytest.raises(ValueError, match="no bytes"):
        decode_key(None)
    with pytest.raises(ValueError, match="expected bytes"):
        decode_offset_commit_value("not bytes")


def test_encode_rejects_strings_too_long_for_int16_length():
    with pytest.raises(ValueError, match="too long"):
        encode_group_metadata_key("x" * 40000)


# ---------------------------------------------------------------- partitioning (Java semantics)

def java_hash_by_hand(units):
    """s[0]*31^(n-1) + ... + s[n-1] in int32, folded step by step."""
    h = 0
    for u in units:
        h = (h * 31 + u) % 2**32
    return h - 2**32 if h >= 2**31 else h


def test_java_string_hash_known_values():
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("Aa") == java_string_hash("BB") == 65 * 31 + 97 == 2112
    # "group": ((((103*31+114)*31+111)*31+117)*31+112)
    assert java_string_hash("group") == ((((103 * 31 + 114) * 31 + 111) * 31 + 117) * 31 + 112) == 98629247
    # overflow to a negative int: Java's well-known "hello world".hashCode() == 1794106052,
    # and a long one that wraps negative, computed by the formula
    assert java_string_hash("hello world") == 1794106052
    long_name = "consumer-group-with-a-long-name"
    assert java_string_hash(long_name) == java_hash_by_hand(long_name.encode())
    # the famous string whose hashCode is Integer.MIN_VALUE
    assert java_string_hash("polygenelubricants") == -2**31


def test_java_string_hash_uses_utf16_code_units():
    # é is one unit (0xE9); U+1F600 is the surrogate pair D83D DE00 -- not its UTF-8 bytes
    assert java_string_hash("é") == 0xE9
    expected = java_hash_by_hand([0x67, 0xE9, 0xD83D, 0xDE00])
    assert java_string_hash("gé😀") == expected
    assert expected == ((0x67 * 31 + 0xE9) * 31 + 0xD83D) * 31 + 0xDE00  # small enough not to wrap
    assert java_string_hash("日本") == 0x65E5 * 31 + 0x672C


def test_offsets_partition_matches_kafka():
    assert java_abs(-5) == 5 and java_abs(7) == 7 and java_abs(-2**31) == 0
    assert offsets_partition("", 50) == 0
    assert offsets_partition("a", 50) == 97 % 50
    assert offsets_partition("group", 50) == 98629247 % 50 == 47
    neg = "consumer-group-with-a-long-name"
    h = java_hash_by_hand(neg.encode())
    assert offsets_partition(neg, 50) == abs(h) % 50
    # Integer.MIN_VALUE: Utils.abs gives 0, so partition 0 for any count
    assert offsets_partition("polygenelubricants", 50) == 0
    assert offsets_partition("polygenelubricants", 7) == 0
    assert all(0 <= offsets_partition(f"g{i}", 3) < 3 for i in range(100))
    with pytest.raises(ValueError):
        offsets_partition("g", 0)

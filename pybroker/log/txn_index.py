"""The aborted-transaction index of one segment: ``<base>.txnindex``, Kafka's format.

Entries of 34 bytes, big-endian: version int16 (0), producer id int64, first offset int64, last
offset int64 (the ABORT marker's offset), last stable offset int64 (the LSO once that transaction
ended). One entry is appended when an ABORT marker ends a transaction with data, into the segment
that holds the marker, so entries are ordered by last offset. The file is created with its first
entry (most segments never have one). Never checksummed: it is synced with its segment, and a
segment recovered from its batches gets its index rebuilt from the producer state replay; a torn
tail entry is ignored when loading.
"""
import os
import struct
import threading
from typing import NamedTuple

from pybroker import core

ENTRY = struct.Struct(">hqqqq")
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndex:
    """The entries of one ``.txnindex``, kept in memory too (they are few), appended to the file."""

    def __init__(self, path: str):
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._fd = -1
        self._fd_lock = threading.Lock()
        self._dirty = False
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        for pos in range(0, len(data) - ENTRY.size + 1, ENTRY.size):
            version, *fields = ENTRY.unpack_from(data, pos)
            if version != VERSION:
                break  # garbage from here on: keep what came before, as a torn tail
            self.entries.append(AbortedTxn(*fields))
        if len(data) != len(self.entries) * ENTRY.size:
            self._rewrite()

    def append(self, txn: AbortedTxn) -> None:
        if self.entries and txn.last_offset < self.entries[-1].last_offset:
            raise ValueError(f"{self.path}: aborted transaction ending at {txn.last_offset} "
                             f"after one ending at {self.entries[-1].last_offset}")
        self.entries.append(txn)
        fd = self._open()
        os.write(fd, ENTRY.pack(VERSION, *txn))
        self._dirty = True

    def _open(self) -> int:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound); True when later segments need no look."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after ``offset`` (the segment was cut there)."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) != len(self.entries):
            self.entries = keep
            self._rewrite()

    def reset(self) -> None:
        """Forget every entry (the segment is being recovered: they are rebuilt)."""
        self.entries = []
        self._close()
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass

    def replace(self, entries) -> None:
        self.entries = list(entries)
        self._rewrite()

    def _rewrite(self) -> None:
        self._close()
        if not self.entries:
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass
            return
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"".join(ENTRY.pack(VERSION, *t) for t in self.entries))
        os.replace(tmp, self.path)
        self._dirty = True

    def flush(self) -> None:
        """Sync the entries written so far (the flusher's thread: a private fd, so a close on the
        event loop meanwhile cannot pull the descriptor from under the sync)."""
        with self._fd_lock:
            if not self._dirty:
                return
            self._dirty = False
            try:
                fd = os.dup(self._fd) if self._fd >= 0 else os.open(self.path, os.O_RDONLY) if self.entries else -1
            except FileNotFoundError:  # rewritten without entries meanwhile: nothing to sync
                return
        if fd >= 0:
            try:
                core.fileio.fdatasync(fd)
            finally:
                os.close(fd)

    def rename(self, path: str) -> None:
        if os.path.exists(self.path):
            os.replace(self.path, path)
        self.path = path

    def _close(self) -> None:
        with self._fd_lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def close(self) -> None:
        self._close()

    def delete(self) -> None:
        self._close()
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass

"""The log: segments of record batches with sparse indexes, recovery, retention and checkpoints."""
from pybroker.log.config import LogConfig
from pybroker.log.log import AppendInfo, FetchSlice, Log
from pybroker.log.manager import LogManager
from pybroker.log.segment import LogSegment

__all__ = ["AppendInfo", "FetchSlice", "Log", "LogConfig", "LogManager", "LogSegment"]

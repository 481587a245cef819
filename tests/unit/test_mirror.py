"""``pybroker mirror``'s replay check in-process (between real clusters: tests/interop/test_mirror.py)."""
import pytest

from tests.interop.test_mirror import replays


def test_replay_check_accepts_only_contiguous_replays():
    src = list(range(10))
    assert replays(src, src) == 0
    assert replays(src, [0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7, 8, 9]) == 1  # a restart from 2 after copying to 4
    for bad in ([0, 1, 3, 4, 5, 6, 7, 8, 9],  # 2 missing
                [0, 1, 2, 3, 2, 4, 5, 6, 7, 8, 9],  # a replay that skips 3
                [0, 1, 2, 1, 2, 3, 4, 5, 6, 7, 8],  # the last record missing
                [1, 0, 2, 3, 4, 5, 6, 7, 8, 9]):  # out of order
        with pytest.raises(AssertionError):
            replays(src, bad)


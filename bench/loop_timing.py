"""Microbenchmark timing shared by the in-process benchmarks: each sample is the mean time of one
call over a loop sized once so that a sample lasts about ``min_time`` seconds."""
import time


def call_samples_us(fn, runs: int, min_time: float, max_loop: int = 1 << 20) -> list[float]:
    """``runs`` samples of microseconds per call of ``fn``."""
    n = 1
    while True:  # size the loop once so that one timing lasts about min_time
        t = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t >= min_time / 4 or n >= max_loop:
            break
        n *= 4
    n = max(1, int(n * min_time / max(time.perf_counter() - t, 1e-9)))
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t) / n * 1e6)
    return samples

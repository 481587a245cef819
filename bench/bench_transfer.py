"""Throughput of a page-cached file slice → 127.0.0.1 TCP socket, by transfer method.

    python bench/bench_transfer.py [--size-mb 1024] [--runs 5]

The receiver is a separate process that recv_into's a reusable buffer and discards, then
reports the byte count back; a run's time spans the first send to that report. Methods,
alternated run by run (the order rotates each run):
  baseline  a plain C blocking sendfile loop (bench/csrc/sendfile_baseline.c, built now with
            cc -O2 -shared -fPIC, called through ctypes, which releases the GIL)
  native    pybroker._native.transfer.send_slice_all   (non-blocking socket + poll)
  io_uring  pybroker.uring.UringSender.send_slice_all  (non-blocking socket + poll)
  pure      pybroker._pure.transfer.send_slice_all     (os.sendfile + select.poll)
GB/s is 1e9 bytes per second. Sender and receiver share the machine's cores, so the sender's
own CPU time per GB (user+sys of this process, io-wq workers included) is reported too.
"""
import argparse
import ctypes
import multiprocessing as mp
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pybroker import core  # noqa: E402
from pybroker.uring import UringSender, UringUnavailableError  # noqa: E402

BLOCK = 16 << 20


def receiver(listener: socket.socket, conn) -> None:
    """Accept connections one after another; drain each to EOF and report its byte count."""
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    while True:
        sock, _ = listener.accept()
        total = 0
        while True:
            n = sock.recv_into(view)
            if not n:
                break
            total += n
        sock.close()
        conn.send(total)
        if conn.poll() and conn.recv() == "stop":
            return


def _cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def make_file(directory: Path, size: int) -> Path:
    path = directory / "segment.log"
    block = os.urandom(BLOCK)
    with open(path, "wb") as f:
        left = size
        while left:
            f.write(block[:min(left, BLOCK)])
            left -= min(left, BLOCK)
    # read it once so every run is served from the page cache
    buf = bytearray(BLOCK)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    return path


def build_baseline(directory: Path):
    lib = directory / "sendfile_baseline.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(lib),
                    str(HERE / "csrc" / "sendfile_baseline.c")], check=True)
    fn = ctypes.CDLL(str(lib)).sendfile_all
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    fn.restype = ctypes.c_longlong
    return fn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--uring-chunks", type=int, default=8, help="pipe-size chunks per io_uring submit")
    ap.add_argument("--methods", default="baseline,native,io_uring,pure")
    args = ap.parse_args()
    size = args.size_mb << 20

    tmp = Path(tempfile.mkdtemp(prefix="bench_transfer-"))
    try:
        t0 = time.perf_counter()
        path = make_file(tmp, size)
        print(f"file: {args.size_mb} MiB in {tmp} (created and cached in {time.perf_counter() - t0:.1f} s)")
        baseline = build_baseline(tmp)
        native = core.load("transfer", "native")
        pure = core.load("transfer", "pure")
        methods = {
            "baseline": lambda s, fd: baseline(s, fd, 0, size),
            "native": lambda s, fd: native.send_slice_all(s, fd, 0, size),
            "pure": lambda s, fd: pure.send_slice_all(s, fd, 0, size),
        }
        uring = None
        try:
            uring = UringSender(chunks=args.uring_chunks)
            methods["io_uring"] = lambda s, fd: uring.send_slice_all(s, fd, 0, size)
            print(f"io_uring: pipe {uring.pipe_size >> 10} KiB, {args.uring_chunks} chunks per submit")
        except UringUnavailableError as exc:
            print(f"io_uring unavailable: {exc}")
        order = [m for m in args.methods.split(",") if m in methods]

        listener = socket.create_server(("127.0.0.1", 0))
        parent, child = mp.Pipe()
        proc = mp.Process(target=receiver, args=(listener, child), daemon=True)
        proc.start()
        fd = os.open(path, os.O_RDONLY)
        rates = {m: [] for m in order}
        cpu = {m: [] for m in order}
        try:
            for run in range(args.runs):
                shift = run % len(order)
                for name in order[shift:] + order[:shift]:
                    sock = socket.create_connection(listener.getsockname())
                    sock.setblocking(name == "baseline")  # the C loop blocks; ours poll
                    cpu0 = _cpu()
                    start = time.perf_counter()
                    sent = methods[name](sock.fileno(), fd)
                    sock.close()
                    got = parent.recv()
                    elapsed = time.perf_counter() - start
                    cpu[name].append((_cpu() - cpu0) / (size / 1e9))
                    assert sent == size and got == size, (name, sent, got)
                    rates[name].append(size / elapsed / 1e9)
            parent.send("stop")
            socket.create_connection(listener.getsockname()).close()
        finally:
            os.close(fd)
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
            if uring is not None:
                uring.close()

        base = statistics.median(rates["baseline"]) if "baseline" in rates else None
        print(f"\n{args.size_mb} MiB page-cached file -> 127.0.0.1 TCP, receiver in another process, "
              f"{args.runs} runs, {os.cpu_count()} CPUs")
        print(f"{'method':<10} {'median GB/s':>12} {'min':>7} {'max':>7} {'vs baseline':>12} "
              f"{'sender CPU s/GB':>16}")
        for name in order:
            r = rates[name]
            med = statistics.median(r)
            ratio = f"{med / base:.2f}x" if base else "-"
            print(f"{name:<10} {med:>12.2f} {min(r):>7.2f} {max(r):>7.2f} {ratio:>12} "
                  f"{statistics.median(cpu[name]):>16.3f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""A small pool of math-verify worker processes with a per-call deadline.

Why processes: math-verify's timeouts use `signal.alarm`, which raises outside the main thread
(verl calls scorers from executor threads and Ray actors), and a runaway sympy call in a thread
can never be stopped. A worker that misses its deadline is killed and replaced; the others keep
running. Thread-safe: each call borrows one idle worker.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time

_WORKER_MODULE = "xrpo_verl.rewards._verify_worker"


class WorkerTimeout(Exception):
    """The worker did not answer before the deadline; it has been killed."""


class WorkerDied(RuntimeError):
    """The worker exited while working on a request (the request crashed it)."""


class _Worker:
    def __init__(self, startup_timeout_s: float):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", _WORKER_MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            bufsize=0,
        )
        self._buffer = b""
        try:
            ready = self.read_reply(time.monotonic() + startup_timeout_s)
        except WorkerTimeout:  # a machine problem, not the answer's fault: never a "timeout" verdict
            raise RuntimeError(f"math-verify worker did not start within {startup_timeout_s} s") from None
        except WorkerDied as exc:  # likewise never scored: no answer was involved
            raise RuntimeError(f"math-verify worker failed to start: {exc}") from None
        if ready.get("status") != "ready":
            raise RuntimeError(f"math-verify worker sent {ready!r} instead of 'ready'")

    def read_reply(self, deadline: float) -> dict:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                self.kill()
                raise WorkerTimeout
            chunk = os.read(fd, 65536)
            if not chunk:
                code = self.proc.wait()
                raise WorkerDied(f"math-verify worker exited with code {code}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def request(self, payload: dict, timeout_s: float) -> dict:
        try:
            self.proc.stdin.write((json.dumps(payload) + "\n").encode())
        except BrokenPipeError:
            raise WorkerDied(f"math-verify worker exited with code {self.proc.wait()}") from None
        return self.read_reply(time.monotonic() + timeout_s)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class VerifyPool:
    """`num_workers` lazily started workers; `call` blocks until one is free.

    Args:
        num_workers: most worker processes alive at once (each is one busy core at most).
        startup_timeout_s: limit for a worker to import math-verify; not billed to any request.
    """

    def __init__(self, num_workers: int, startup_timeout_s: float = 120.0):
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.num_workers = num_workers
        self.startup_timeout_s = startup_timeout_s
        self._slots: queue.Queue[_Worker | None] = queue.Queue()
        for _ in range(num_workers):
            self._slots.put(None)  # None: not started yet
        self._all: list[_Worker] = []
        self._lock = threading.Lock()

    def call(self, payload: dict, timeout_s: float) -> dict:
        """Send one request; raise `WorkerTimeout` if no reply comes within `timeout_s`."""
        worker = self._slots.get()
        try:
            if worker is None or not worker.alive():
                worker = _Worker(self.startup_timeout_s)
                with self._lock:
                    self._all = [w for w in self._all if w.alive()] + [worker]
            reply = worker.request(payload, timeout_s)
        except BaseException:
            if worker is not None:
                worker.kill()
            self._slots.put(None)  # a fresh worker takes this slot next time
            raise
        self._slots.put(worker)
        return reply

    def close(self) -> None:
        with self._lock:
            for worker in self._all:
                worker.kill()
            self._all.clear()


_POOLS: dict[tuple[int, int], VerifyPool] = {}
_POOLS_LOCK = threading.Lock()


def get_pool(num_workers: int) -> VerifyPool:
    """The process-wide pool of this size (a forked child builds its own)."""
    key = (os.getpid(), num_workers)
    with _POOLS_LOCK:
        if key not in _POOLS:
            _POOLS[key] = VerifyPool(num_workers)
        return _POOLS[key]


@atexit.register
def _close_pools() -> None:
    for (pid, _), pool in list(_POOLS.items()):
        if pid == os.getpid():
            pool.close()

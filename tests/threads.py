"""Callers in threads, for the tests of code that many threads call at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def in_threads(n: int, call: Callable[[int], Any], gap: float | None = None) -> list[Any]:
    """call(0..n-1) in n threads, each result or the exception it raised. `gap` None: the
    threads are released together (a barrier); else thread i starts `gap * i` seconds in."""
    barrier = threading.Barrier(n) if gap is None else None
    results: list[Any] = [None] * n

    def worker(i: int) -> None:
        if barrier is not None:
            barrier.wait()
        else:
            time.sleep((gap or 0.0) * i)
        try:
            results[i] = call(i)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a caller hung"
    return results

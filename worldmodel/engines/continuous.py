"""Continuous (iteration-level) batching on the own decode path: rows from any threads join
the running batch between decode steps and leave it the step they end.

    decoder = ContinuousDecoder(lean, eos_ids, prefix_cache, decode_text, max_rows=32)
    new_tokens = decoder.generate(rows, cfg, seeds)     # from any thread; blocks
    decoder.close()

Why. Batching whole calls (`lean_generate` on a gathered batch) runs the batch until its
longest row ends: the rows that ended early leave their share of each step idle, and the
requests that arrive meanwhile wait for the whole batch. Here one loop thread owns the
batch. Each iteration it admits prefilled rows (while fewer than `max_rows` are live),
runs one decode step for every live row, and retires the rows that ended; a request's
future resolves when its last row has ended.

Prefill. Queued rows' prompts are prefilled through the prefix cache, so a row reuses
the longest cached start of its own prompt (its session's previous step, or the same
context when it is a retry); the rows taken at once share one pass (`_prefill_many`).
With `overlap_prefill` (the default) a second thread does this while the loop thread
decodes, taking every queued row up to `prefill_rows` rows ahead:
prefill is a few large matmuls and decoding many small calls, so on a CPU the two take
two cores instead of taking turns on one (on 2 cores, serving 32 BFCL sessions: see the
README's serving figures). Without it the loop prefills up to `prefill_rows` queued rows
itself before each step. When a pass over rows taken together raises, each row is
prefilled again on its own, so only the rows whose own prefill fails get the error (the
other requests, and the rows already decoding, go on). Either way a row computes the same
bits: a prompt's prefill equals its prefill alone, and its first token comes from its own
row's logits, whichever rows are near it.

Cache layout. One set of key/value tensors (`max_rows` rows, `capacity` slots) holds every
live row; a decode step writes all rows' newest token at the same slot `w`. A row admitted
at `w` gets its prompt's keys right-aligned to end at slot `w - 1`; the slots before them
are masked (`key_valid`) and rotary positions count the row's own tokens only, so a row
sees exactly what it would alone: the same greedy tokens as `lean_generate`, and a sampled
row the same draws (each row has its own generator seeded with its seed). Each row's
attention reads a window of its own span rounded up to 64 slots, ending at `w` (the masked
slots before its first included), so the layout keeps MARGIN free slots before every row;
rows of one window width share one attention call (lean.py, `_attend_decode`). A single
masked call over the batch's whole span would let the other rows' lengths change how the
kernel blocks the sum, which bfloat16 rounding makes visible in the tokens.

Live rows occupy rows [0, n); a retired row's place is taken by the last live row. When
`w` would run past the capacity, the live span is copied to the front of fresh tensors
(grown when the rows need more room).

Each row keeps its own GenerationConfig (greedy or sampled, temperature, top-p,
`max_new_tokens`, stop strings), so greedy first answers and sampled retries share steps.
`on_step(n)` is called after each decode step with the rows it ran.

Locks. `lock` is held while a prompt is prefilled (it guards the prefix cache; share it
with anything else that touches `prefix_cache`). Decode steps touch only the batch's own
cache and the model's read-only weights, so they run outside it; without
`overlap_prefill` the loop holds it for its prefills and decode steps both, as before.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch
from torch import Tensor

from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.engines.decode import PrefixCache, _prefill_rows, _sample
from simworld.worldmodel.engines.lean import DECODE_BLOCK, KVCache, LeanLlama

log = logging.getLogger(__name__)

MARGIN = DECODE_BLOCK - 1  # free slots the layout keeps before every row: its decode window


@dataclass
class _Request:
    outputs: list[list[int]]
    future: Future[list[list[int]]] = field(default_factory=Future)
    left: int = 0  # rows not ended yet
    failed: bool = False


@dataclass
class _Row:
    request: _Request
    index: int  # the row's place in its request
    prompt: list[int]
    cfg: GenerationConfig
    gen: torch.Generator
    out: list[int] = field(default_factory=list)
    last: int = 0  # the token the next decode step feeds
    pos: int = 0  # its rotary position
    first: int = 0  # the row's first cache slot
    prefill: _Prefill | None = None  # set once prefilled, cleared once placed in the batch


@dataclass
class _Prefill:
    """A prefilled prompt: its keys and values at slots [first, cache.capacity) of row
    `index` of `cache`, the rotary position of its first new token, and its logits (V,)."""

    cache: KVCache
    index: int
    first: int
    pos: int
    logits: Tensor


class ContinuousDecoder:
    """Requests' rows decoded in one running batch that rows join and leave step by step;
    see the module docstring (Prefill, Locks)."""

    def __init__(
        self,
        lean: LeanLlama,
        eos_ids: set[int],
        prefix_cache: PrefixCache,
        decode_text: Callable[[list[int]], str] | None = None,
        *,
        max_rows: int = 32,
        prefill_rows: int = 8,
        overlap_prefill: bool = True,
        lock: threading.Lock | None = None,
        on_step: Callable[[int], None] | None = None,
    ) -> None:
        if max_rows < 1 or prefill_rows < 1:
            raise ValueError(
                f"max_rows and prefill_rows must be >= 1, got {max_rows} and {prefill_rows}"
            )
        self.lean = lean
        self.eos_ids = set(eos_ids)
        self.prefix_cache = prefix_cache
        self.decode_text = decode_text
        self.max_rows = max_rows
        self.prefill_rows = prefill_rows
        self.overlap_prefill = overlap_prefill
        self.on_step = on_step
        self.steps = self.admitted = self.relayouts = 0  # counters, for tests and metrics
        self._lock = lock or threading.Lock()
        self._cond = threading.Condition()  # guards _queue, _ready, _prefilling and _closed
        self._queue: deque[_Row] = deque()  # submitted, not prefilled
        self._ready: deque[_Row] = deque()  # prefilled (overlap_prefill), not placed
        self._prefilling = 0  # rows the prefill thread has taken and not yet made ready
        self._closed = False
        self._thread: threading.Thread | None = None
        self._prefill_thread: threading.Thread | None = None
        # batch state: touched by the loop thread only
        self._live: list[_Row] = []
        self._cache: KVCache | None = None
        self._valid = torch.zeros(0, 0, dtype=torch.bool)  # (max_rows, capacity)
        self._w = 0  # the slot the next decode step writes

    # ------------------------------------------------------------------ callers' side

    def submit(
        self, rows: Sequence[Sequence[int]], cfg: GenerationConfig, seeds: Sequence[int]
    ) -> Future[list[list[int]]]:
        """Queue `rows` (token lists) to decode with `cfg`, row j sampling with `seeds[j]`;
        the future gives each row's new tokens (the end token excluded)."""
        if len(seeds) != len(rows):
            raise ValueError(f"{len(rows)} rows but {len(seeds)} seeds: one seed per row")
        if any(not r for r in rows):
            raise ValueError("every prompt must have at least one token")
        if cfg.stop and self.decode_text is None:
            raise ValueError("stop strings need decode_text (tokens to text)")
        request = _Request(outputs=[[] for _ in rows], left=len(rows))
        if not rows:
            request.future.set_result([])
            return request.future
        device = self.lean.device
        gen_device = "cpu" if device.type == "mps" else device
        new = [
            _Row(
                request=request,
                index=j,
                prompt=list(row),
                cfg=cfg,
                gen=torch.Generator(device=gen_device).manual_seed(int(seed)),
            )
            for j, (row, seed) in enumerate(zip(rows, seeds, strict=True))
        ]
        with self._cond:
            if self._closed:
                raise RuntimeError("ContinuousDecoder.submit was called after close()")
            self._queue.extend(new)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name=f"ContinuousDecoder-{id(self):x}", daemon=True
                )
                self._thread.start()
                if self.overlap_prefill:
                    self._prefill_thread = threading.Thread(
                        target=self._prefill_loop,
                        name=f"ContinuousDecoder-prefill-{id(self):x}",
                        daemon=True,
                    )
                    self._prefill_thread.start()
            self._cond.notify_all()
        return request.future

    def generate(
        self, rows: Sequence[Sequence[int]], cfg: GenerationConfig, seeds: Sequence[int]
    ) -> list[list[int]]:
        """`submit(...).result()`: blocks until every row has ended."""
        return self.submit(rows, cfg, seeds).result()

    def close(self) -> None:
        """Finish the rows already queued or live, then stop the loop; later `submit` calls
        raise. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            threads = (self._prefill_thread, self._thread)
        for thread in threads:
            if thread is not None and thread is not threading.current_thread():
                thread.join()

    # ------------------------------------------------------------------ the loop

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._ready and not self._live and not self._inline_work():
                    if self._closed and not self._queue and not self._prefilling:
                        return
                    self._cond.wait()
                if self.overlap_prefill:
                    room = self.max_rows - len(self._live)
                    admit = [self._ready.popleft() for _ in range(min(room, len(self._ready)))]
                    self._cond.notify_all()  # the prefill thread may run ahead again
                else:
                    room = min(self.max_rows - len(self._live), self.prefill_rows)
                    admit = [self._queue.popleft() for _ in range(min(room, len(self._queue)))]
            try:
                if self.overlap_prefill:
                    self._run(admit)
                else:
                    with self._lock:
                        self._prefill_apart_on_failure(admit)
                        admit = [row for row in admit if row.prefill is not None]
                        self._run(admit)
            # The rows' callers get what the model raised; the loop must survive it, or
            # every later caller would wait forever. (A failed prefill has failed only its
            # own rows by now; what reaches here broke a placement or a decode step.)
            except BaseException as exc:
                failed, self._live = [*admit, *self._live], []
                _fail(failed, exc)

    def _inline_work(self) -> bool:
        """Whether the loop prefills itself and has queued rows (called under _cond)."""
        return not self.overlap_prefill and bool(self._queue) and len(self._live) < self.max_rows

    def _run(self, admit: list[_Row]) -> None:
        if admit:
            self._admit(admit)
        if self._live:
            self._step()

    def _prefill_loop(self) -> None:
        """The prefill thread (overlap_prefill): queued rows in order, the ones queued at
        once prefilled together in one pass (`_prefill`), at most `prefill_rows` ahead of
        the loop."""
        while True:
            with self._cond:
                while not self._queue or len(self._ready) + self._prefilling >= self.prefill_rows:
                    if self._closed and not self._queue:
                        return
                    self._cond.wait()
                room = self.prefill_rows - len(self._ready) - self._prefilling
                rows = [self._queue.popleft() for _ in range(min(room, len(self._queue)))]
                self._prefilling += len(rows)
            with self._lock:
                self._prefill_apart_on_failure(rows)
            with self._cond:
                self._prefilling -= len(rows)
                self._ready.extend(row for row in rows if row.prefill is not None)
                self._cond.notify_all()

    def _prefill_apart_on_failure(self, rows: list[_Row]) -> None:
        """`_prefill(rows)`; when it raises, each row again on its own, so that only the
        rows whose own prefill fails get the error (rows of other requests go on)."""
        try:
            self._prefill(rows)
        except BaseException as exc:
            if len(rows) == 1:
                _fail(rows, exc)
                return
            for row in rows:
                try:
                    self._prefill([row])
                except BaseException as own:
                    _fail([row], own)

    def _prefill(self, rows: list[_Row]) -> None:
        """Prefill `rows` (`_prefill_rows`: the prompts in one pass through the prefix
        cache, their last tokens run as a decode step) and keep each row's keys and logits
        on it."""
        if not rows:
            return
        tmp, _, next_pos, logits, firsts, order = _prefill_rows(
            self.lean, [row.prompt for row in rows], self.prefix_cache, 0
        )
        for b, i in enumerate(order):
            rows[i].prefill = _Prefill(tmp, b, firsts[b], int(next_pos[b]), logits[b])

    def _admit(self, rows: list[_Row]) -> None:
        """Take each prefilled row's first token and place the rows that go on into the
        batch's cache, their prompts' keys right-aligned to end at slot `w - 1`."""
        self.admitted += len(rows)
        logits = torch.stack([_prefilled(row).logits for row in rows])  # (len(rows), V)
        joining: list[_Row] = []
        for row, token in zip(rows, self._pick(logits, rows), strict=True):
            row.pos = _prefilled(row).pos
            if self._record(row, token):
                joining.append(row)
            else:
                row.prefill = None
        if not joining:
            return
        span = max(_span(_prefilled(row)) for row in joining)
        need = max(r.cfg.max_new_tokens - len(r.out) for r in [*self._live, *joining])
        self._make_room(span, need)
        assert self._cache is not None
        w = self._w
        for row in joining:
            p, b = _prefilled(row), len(self._live)
            size, end = _span(p), p.cache.capacity
            for dst, src in zip(self._cache.tensors(), p.cache.tensors(), strict=True):
                dst[b, :, w - size : w] = src[p.index, :, p.first : end]
            self._valid[b] = False
            self._valid[b, w - size : w] = True
            row.first, row.prefill = w - size, None
            self._live.append(row)

    def _make_room(self, span: int, need: int) -> None:
        """Ensure rows of `span` prompt slots can be placed to end at `w - 1` and every live
        row can write `need` more slots; otherwise copy the live span to fresh tensors."""
        live, w = self._live, self._w
        cache = self._cache
        if cache is not None and w >= span + MARGIN and w + need <= cache.capacity:
            return
        lo = min((r.first for r in live), default=w)
        used = w - lo
        base = max(span - used, 0) + MARGIN  # where the live span starts in the new layout
        new_w = base + used
        capacity = new_w + need + max(span, need)  # slack: fewer relayouts
        if cache is not None and cache.capacity > capacity:
            capacity = cache.capacity
        fresh = self.lean.new_cache(self.max_rows, capacity)
        for t in fresh.tensors():  # masked slots must hold finite numbers: 0 × NaN is NaN
            t.zero_()
        valid = torch.zeros(self.max_rows, capacity, dtype=torch.bool, device=self.lean.device)
        n = len(live)
        if cache is not None and n:
            for dst, src in zip(fresh.tensors(), cache.tensors(), strict=True):
                dst[:n, :, base:new_w] = src[:n, :, lo:w]
            valid[:n, base:new_w] = self._valid[:n, lo:w]
        for row in live:
            row.first += base - lo
        self._cache, self._valid, self._w = fresh, valid, new_w
        self.relayouts += 1

    def _step(self) -> None:
        """One decode step for every live row, then retire the rows that ended."""
        assert self._cache is not None
        live, n, w = self._live, len(self._live), self._w
        lo = min(r.first for r in live) - MARGIN  # room for each row's decode window
        window = _window(self._cache, n, lo)
        valid = self._valid[:n, lo:]  # (n, capacity - lo), a view: writes go through
        valid[:, w - lo] = True
        dev = self.lean.device
        ids = torch.tensor([[r.last] for r in live], device=dev)  # (n, 1)
        pos = torch.tensor([[r.pos] for r in live], device=dev)  # (n, 1)
        firsts = [r.first - lo for r in live]  # each row's window depends on its span only
        hidden = self.lean.forward(ids, pos, window, w - lo, valid, firsts)  # (n, D)
        logits = self.lean.logits(hidden, window, valid, w - lo + 1)  # (n, V)
        self._w = w + 1
        ended: list[int] = []
        for b, (row, token) in enumerate(zip(live, self._pick(logits, live), strict=True)):
            row.pos += 1
            if not self._record(row, token):
                ended.append(b)
        for b in reversed(ended):  # highest first: a moved row is never one still to retire
            self._retire(b)
        self.steps += 1
        if self.on_step is not None:
            try:
                self.on_step(n)
            # A metrics hook must not fail the rows it counts.
            except Exception:
                log.exception("on_step(%d) raised; decoding goes on", n)

    def _retire(self, b: int) -> None:
        """Drop live row `b`: the last live row takes its place (cache rows included)."""
        assert self._cache is not None
        last = len(self._live) - 1
        if b != last:
            for t in self._cache.tensors():
                t[b] = t[last]
            self._valid[b] = self._valid[last]
            self._live[b] = self._live[last]
        self._live.pop()

    # ------------------------------------------------------------------ per row

    def _pick(self, logits: Tensor, rows: Sequence[_Row]) -> list[int]:
        """Each row's next token from `logits` (len(rows), V): argmax for greedy rows;
        sampled rows drawn with their own generators, grouped by temperature and top-p."""
        picked: list[int] = logits.argmax(dim=-1).tolist()
        groups: dict[tuple[float, float], list[int]] = {}
        for i, row in enumerate(rows):
            if row.cfg.do_sample:
                groups.setdefault((row.cfg.temperature, row.cfg.top_p), []).append(i)
        for idx in groups.values():
            cfg = rows[idx[0]].cfg
            drawn = _sample(logits[idx], cfg, [rows[i].gen for i in idx]).tolist()
            for i, token in zip(idx, drawn, strict=True):
                picked[i] = token
        return picked

    def _record(self, row: _Row, token: int) -> bool:
        """Add `token` to the row's output; False when the row has ended (an end token,
        its token bound, or a stop string), its request then told when it was the last."""
        going = token not in self.eos_ids
        if going:
            row.out.append(token)
            row.last = token
            if len(row.out) >= row.cfg.max_new_tokens:
                going = False
            elif row.cfg.stop and self.decode_text is not None:
                text = self.decode_text(row.out)
                going = not any(s in text for s in row.cfg.stop)
        if not going:
            request = row.request
            request.outputs[row.index] = row.out
            request.left -= 1
            if request.left == 0 and not request.failed:
                request.future.set_result(request.outputs)
        return going


def _prefilled(row: _Row) -> _Prefill:
    assert row.prefill is not None, "a row is placed only once prefilled"
    return row.prefill


def _span(p: _Prefill) -> int:
    return p.cache.capacity - p.first


def _fail(rows: Sequence[_Row], exc: BaseException) -> None:
    """Give `exc` to the requests of `rows` that have not failed yet."""
    for row in rows:
        row.prefill = None
        if not row.request.failed:
            row.request.failed = True
            row.request.future.set_exception(exc)


def _window(cache: KVCache, n: int, lo: int) -> KVCache:
    """Views of rows [0, n) and slots [lo, capacity) of `cache` (writes go through)."""
    k = [t[:n, :, lo:] for t in cache.k]
    v = [t[:n, :, lo:] for t in cache.v]
    copy_k = cache.copy_k[:n, :, lo:] if cache.copy_k is not None else None
    ids = cache.ids[:n, :, lo:] if cache.ids is not None else None
    return KVCache(k=k, v=v, copy_k=copy_k, ids=ids)


__all__ = ["ContinuousDecoder"]

"""The transformers engine: a Hugging Face causal LM and its tokenizer, on CPU or GPU.

    engine = TransformersEngine(model, tokenizer, device="cpu", decode="own")
    engine.generate(["<prompt>", ...], GenerationConfig(max_new_tokens=64))
    engine.generate_chat([[{"role": "user", "content": "..."}]], cfg, validate=is_json)

Two decode paths with the same greedy outputs:
- `decode="own"` (default for Llama models): `decode.lean_generate` over `lean.LeanLlama`,
  static KV cache tensors, each prompt prefilled from the longest start it shares with a
  prompt prefilled before (`prefix_cache_size` entries, kept across calls), per-row seeds
  (row i of a request samples with seed `cfg.row_seed(i)`, whatever else is in the batch:
  `independent_rows`).
- `decode="generate"`: HF `model.generate` (left padding, its dynamic KV cache); any causal
  LM; sampling repeats for the same batch and seed only. A copy-head model runs it without
  a cache (its pointer needs every position; copy_head.py): correct, and slow.

`dtype="bfloat16"` casts the weights (of the model passed in, in place) and so the KV cache
to bfloat16: on CPUs with AMX or AVX512-BF16 the matmuls run several times faster than in
float32, at the price of bfloat16 rounding (greedy outputs can change; logits and the copy
head's mixture are still computed in float32). "auto" picks bfloat16 where it runs natively
(`native_bfloat16`), float32 elsewhere; None keeps the checkpoint's dtype. A prompt gets
the same tokens alone, in a batch of one call (`generate` with several prompts, eval,
`--batching gather`) or in a continuous batch, whatever shares its batch and whatever the
prefix cache held, in either dtype: prefill attention runs per prompt in blocks aligned
to the cache's cut, each decode row attends to a window that depends on its own span only
(decode.py, lean.py), and the matmuls on these CPUs compute each row the same for any
number of rows (checked by the tests).

Prompts are sorted (token lists in lexicographic order, so shared prefixes sit together)
and run in batches of `batch_size`; outputs come back in the caller's order.
`start_continuous(max_rows)` switches the own path to continuous batching
(continuous.py): from then on concurrent callers' rows share decode steps, each joining
the running batch when it arrives and leaving it when it ends, its prompt prefilled by a
second thread while the batch decodes (`concurrent` is then True: call it from as many
threads as you like); `stop_continuous()` switches back. An output ends
before the first end token (the tokenizer's eos and the model's generation-config eos) or
stop string, or after `max_new_tokens`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Literal

import torch
import transformers
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from simworld.worldmodel.copy_head import is_copy_model
from simworld.worldmodel.engines.base import (
    DTYPE_CHOICES,
    ChatMessages,
    GenerationConfig,
    RetryReport,
    Validator,
    generate_validated,
    truncate_at_stop,
)
from simworld.worldmodel.engines.continuous import ContinuousDecoder
from simworld.worldmodel.engines.decode import PrefixCache, lean_generate
from simworld.worldmodel.engines.lean import LeanLlama, unsupported_reason

DecodePath = Literal["own", "generate"]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # DTYPE_CHOICES but "auto"


def native_bfloat16(device: str | torch.device) -> bool:
    """Whether bfloat16 matmuls run natively on `device`: a CUDA GPU that supports them, or a
    CPU with AMX tiles or AVX512-BF16 (elsewhere the CPU emulates them, slower than fp32)."""
    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type != "cpu":
        return False
    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")  # torch.cpu, torch >= 2.3
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def resolve_dtype(name: str | torch.dtype, device: str | torch.device = "cpu") -> torch.dtype:
    """A dtype from its name in DTYPE_CHOICES (or a torch dtype in DTYPES); "auto" is bfloat16
    where `native_bfloat16(device)`, else float32. Anything else: a ValueError."""
    if isinstance(name, torch.dtype) and name in DTYPES.values():
        return name
    if name == "auto":
        return torch.bfloat16 if native_bfloat16(device) else torch.float32
    if isinstance(name, str) and name in DTYPES:
        return DTYPES[name]
    choices = ", ".join(DTYPE_CHOICES)
    raise ValueError(f"dtype {name!r} is not supported: choose one of {choices}")


class TransformersEngine:
    """Batched generation with a `transformers` model; see the module docstring."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        device: str | torch.device | None = None,
        decode: DecodePath | None = None,
        batch_size: int = 32,
        prefix_cache_size: int = 8,
        max_retries: int = 2,
        ignore_eos: bool = False,
        dtype: str | torch.dtype | None = None,
    ) -> None:
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos token: it must end an observation")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if device is not None:
            torch.nn.Module.to(model, device)
        if dtype is not None:  # casts the caller's model in place
            torch.nn.Module.to(model, resolve_dtype(dtype, model.device))
        torch.nn.Module.eval(model)
        self.model = model
        self.tokenizer = tokenizer
        self.device = self.model.device
        reason = unsupported_reason(self.model)
        if decode == "own" and reason is not None:
            raise NotImplementedError(f"decode='own' cannot run this model: {reason}")
        self.decode: DecodePath = decode or ("own" if reason is None else "generate")
        self.lean = LeanLlama(self.model) if self.decode == "own" else None
        self.prefix_cache = PrefixCache(prefix_cache_size)
        self.batch_size = batch_size
        self.max_retries = max_retries
        # ignore_eos: every output runs to max_new_tokens (benchmarks: equal work per path)
        self.eos_ids = set() if ignore_eos else _eos_ids(self.model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id: int = pad if pad is not None else int(tokenizer.eos_token_id)
        self.last_report = RetryReport()
        self._lock = threading.Lock()  # one model run at a time (the prefix cache too)
        self._tokenizer_lock = threading.Lock()  # encoding from several threads at once
        self.continuous: ContinuousDecoder | None = None

    @property
    def independent_rows(self) -> bool:
        """Whether a row's output depends only on its prompt and its row seed (the own
        decode path); HF `generate` seeds a whole batch at once."""
        return self.lean is not None

    @property
    def concurrent(self) -> bool:
        """Whether concurrent calls share decode steps (continuous batching is on)."""
        return self.continuous is not None

    def start_continuous(
        self,
        max_rows: int = 32,
        on_step: Callable[[int], None] | None = None,
        *,
        overlap_prefill: bool = True,
    ) -> bool:
        """Switch to continuous batching of up to `max_rows` live rows (`on_step(n)` after
        each decode step of n rows); each row then reuses the longest cached start of its
        own prompt, so give the prefix cache room for a prompt per live session.
        `overlap_prefill`: prompts are prefilled in a thread of their own while the batch
        decodes (continuous.py). False, and nothing changes, on HF `generate`, which cannot
        take rows mid-batch."""
        if self.lean is None:
            return False
        self.stop_continuous()
        self.continuous = ContinuousDecoder(
            self.lean,
            self.eos_ids,
            self.prefix_cache,
            self._text,
            max_rows=max_rows,
            overlap_prefill=overlap_prefill,
            lock=self._lock,
            on_step=on_step,
        )
        return True

    def stop_continuous(self) -> None:
        """Finish what continuous batching has queued and switch back to batched calls."""
        decoder, self.continuous = self.continuous, None
        if decoder is not None:
            decoder.close()

    def generate(self, prompts: Sequence[str], cfg: GenerationConfig) -> list[str]:
        rows = self._encode(prompts, add_special_tokens=True)
        return self._complete(rows, cfg, list(range(len(rows))))

    def generate_chat(
        self,
        messages: Sequence[ChatMessages],
        cfg: GenerationConfig,
        validate: Validator | None = None,
    ) -> list[str]:
        """Render each conversation with the tokenizer's chat template (generation prompt
        added), generate, and retry rows that `validate` rejects (`max_retries`, reported
        in `last_report`)."""
        if self.tokenizer.chat_template is None:
            raise ValueError("the tokenizer has no chat template; use generate() with text")
        texts = [
            str(self.tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False))
            for m in messages
        ]
        rows = self._encode(texts, add_special_tokens=False)  # the template wrote any BOS

        def run(indices: list[int], run_cfg: GenerationConfig) -> list[str]:
            return self._complete([rows[i] for i in indices], run_cfg, indices)

        outputs, self.last_report = generate_validated(
            run, len(rows), cfg, validate, self.max_retries
        )
        return outputs

    def _encode(self, texts: Sequence[str], add_special_tokens: bool) -> list[list[int]]:
        if isinstance(texts, str):
            raise TypeError("pass a sequence of prompts, not one string")
        with self._tokenizer_lock:
            enc = self.tokenizer(list(texts), add_special_tokens=add_special_tokens)
        rows: list[list[int]] = enc["input_ids"]
        if any(not r for r in rows):
            raise ValueError("a prompt encodes to no tokens")
        return rows

    def generate_tokens(
        self, rows: Sequence[list[int]], cfg: GenerationConfig, seed_offsets: Sequence[int] = ()
    ) -> list[list[int]]:
        """Token-level generation: new tokens per row (end token excluded), in sorted
        batches of `batch_size`; row j samples with seed `cfg.row_seed(seed_offsets[j])`
        (default: `cfg.row_seed(j)`)."""
        offsets = list(seed_offsets) or list(range(len(rows)))
        decoder = self.continuous
        if decoder is not None:
            return decoder.generate(rows, cfg, [cfg.row_seed(i) for i in offsets])
        order = sorted(range(len(rows)), key=lambda i: rows[i])
        out: list[list[int]] = [[] for _ in rows]
        with self._lock:
            for lo in range(0, len(order), self.batch_size):
                chunk = order[lo : lo + self.batch_size]
                seeds = [cfg.row_seed(offsets[i]) for i in chunk]
                new = self._generate_ids([list(rows[i]) for i in chunk], cfg, seeds)
                for i, ids in zip(chunk, new, strict=True):
                    out[i] = ids
        return out

    def _complete(
        self, rows: list[list[int]], cfg: GenerationConfig, seed_offsets: list[int]
    ) -> list[str]:
        new = self.generate_tokens(rows, cfg, seed_offsets)
        return [truncate_at_stop(self._text(ids), cfg.stop)[0] for ids in new]

    def _generate_ids(
        self, rows: list[list[int]], cfg: GenerationConfig, seeds: list[int]
    ) -> list[list[int]]:
        if self.lean is not None:
            return lean_generate(
                self.lean, rows, cfg, self.eos_ids, seeds, self.prefix_cache, self._text
            )
        return self._hf_generate(rows, cfg, seeds[0])

    def _text(self, ids: list[int]) -> str:
        with self._tokenizer_lock:
            return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    def _hf_generate(
        self, rows: list[list[int]], cfg: GenerationConfig, seed: int
    ) -> list[list[int]]:
        """HF `generate` on a left-padded batch, seeded globally with the batch's first seed."""
        B, T = len(rows), max(len(r) for r in rows)
        ids = torch.full((B, T), self.pad_id, dtype=torch.long)  # (B, T)
        mask = torch.zeros(B, T, dtype=torch.long)  # (B, T)
        for b, r in enumerate(rows):
            ids[b, T - len(r) :] = torch.tensor(r)
            mask[b, T - len(r) :] = 1
        gen_cfg = transformers.GenerationConfig(  # type: ignore[no-untyped-call]
            max_new_tokens=cfg.max_new_tokens,
            do_sample=cfg.do_sample,
            temperature=cfg.temperature if cfg.do_sample else None,
            top_p=cfg.top_p if cfg.do_sample else None,
            top_k=None,
            eos_token_id=sorted(self.eos_ids),
            pad_token_id=self.pad_id,
            stop_strings=list(cfg.stop) or None,
            # a copy head needs every position each step (copy_head.py): no cache
            use_cache=not is_copy_model(self.model),
        )
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.inference_mode():
            torch.manual_seed(seed)
            out = self.model.generate(  # type: ignore[operator]
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                generation_config=gen_cfg,
                tokenizer=self.tokenizer if cfg.stop else None,
            )  # (B, T + new)
        return [_until_eos(r, self.eos_ids) for r in out[:, T:].tolist()]


def _eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    ids = {int(tokenizer.eos_token_id)}
    configured = model.generation_config.eos_token_id if model.generation_config else None
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(i) for i in configured)
    return ids


def _until_eos(ids: list[int], eos_ids: set[int]) -> list[int]:
    for i, t in enumerate(ids):
        if t in eos_ids:
            return ids[:i]
    return ids

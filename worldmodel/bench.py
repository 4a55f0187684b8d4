"""Decode speed: HF `generate` against the own decode path, at several batch sizes.

    python -m simworld.worldmodel.bench      # a random ~5.3M-parameter Llama, ~215-token
                                             # prompts, 24 new tokens (about a minute)

`decode_benchmark(model, tokenizer, prompts)` prints and returns one row per (path, batch):
ms per observation, new tokens/s, and the fraction of the machine's bound reached. The
bound for one observation is 2 × parameters × (context + new tokens) FLOPs at the fp32
matmul rate measured in the same run (`matmul_rate`); it counts the embedding and every
position's head, so a path that skips work (a shared prefix prefilled once) can pass 1.

`random_llama` and `synthetic_tokenizer` build the stand-ins (also used by the tests).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from simworld.worldmodel.copy_head import is_copy_model, without_copy_head
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.engines.hf import DecodePath, TransformersEngine

EOS = "<|endoftext|>"
WORDS = (
    "file",
    "directory",
    "path",
    "name",
    "size",
    "owner",
    "read",
    "write",
    "create",
    "delete",
    "move",
    "copy",
    "list",
    "status",
    "account",
    "balance",
    "transfer",
    "order",
    "ticket",
    "flight",
    "hotel",
    "booking",
    "user",
    "message",
    "email",
    "query",
    "result",
    "error",
    "true",
    "false",
    "null",
    "id",
    "token",
    "date",
    "time",
    "price",
    "amount",
    "currency",
    "city",
)


@dataclass(frozen=True)
class BenchRow:
    path: str
    batch: int
    ms_per_obs: float
    tokens_per_s: float
    bound_fraction: float
    context: float
    new_tokens: float


def synthetic_text(rng: random.Random, n_fields: int) -> str:
    """JSON-like tool traffic made of a small vocabulary of API words."""
    record = {
        rng.choice(WORDS) + "_" + rng.choice(WORDS): rng.choice(
            [rng.choice(WORDS), rng.randint(0, 9999), rng.random() < 0.5]
        )
        for _ in range(n_fields)
    }
    return json.dumps(record)


def synthetic_tokenizer(vocab_size: int, seed: int = 0) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on synthetic text; `<|endoftext|>` is eos and pad."""
    rng = random.Random(seed)
    corpus = [synthetic_text(rng, 8) for _ in range(2000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, eos_token=EOS, pad_token=EOS
    )


def random_llama(
    vocab_size: int,
    hidden: int = 256,
    layers: int = 4,
    heads: int = 4,
    kv_heads: int | None = None,
    intermediate: int = 704,
    init_range: float = 0.02,
    seed: int = 0,
) -> LlamaForCausalLM:
    """A randomly initialised Llama (defaults: ~5.3M parameters at vocab 4096)."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads or heads,
        max_position_embeddings=2048,
        initializer_range=init_range,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    torch.nn.Module.eval(model)
    return model


def matmul_rate(seconds: float = 0.5, n: int = 512) -> float:
    """fp32 FLOP/s of an (n, n) @ (n, n) matmul on this machine, best of a short loop."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best, stop = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < stop:
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def decode_benchmark(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    prompts: Sequence[str],
    batch_sizes: Sequence[int] = (1, 8, 32),
    new_tokens: int = 24,
    paths: Sequence[DecodePath] = ("generate", "own"),
    label: str = "",
    repeats: int = 3,
) -> list[BenchRow]:
    """Time greedy decoding of `new_tokens` per prompt for each path and batch size; a
    batch of b times ceil(4 / b) * b prompts (at least 4 observations), the fastest of
    `repeats` timed calls (a shared machine's noise only ever slows a call down). Prints
    the table.

    Every observation decodes exactly `new_tokens` tokens (end tokens ignored), so each
    path does the same work whatever the model writes. A copy-head model (copy_head.py)
    cannot keep its pointer in HF's KV cache, so its "generate" rows run the same Llama
    without the head (`without_copy_head`: the same weights, a little less work per
    token): HF's decode machinery at equal size."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    rate = matmul_rate()
    params = sum(p.numel() for p in model.parameters())
    rows = tokenizer(list(prompts))["input_ids"]
    cfg = GenerationConfig(max_new_tokens=new_tokens)
    table = []
    for path in paths:
        for batch in batch_sizes:
            n = max(batch, 4 // batch * batch)
            if len(rows) < n + batch:
                raise ValueError(f"need at least {n + batch} prompts for batch {batch}")
            runs = (
                without_copy_head(model) if path == "generate" and is_copy_model(model) else model
            )
            engine = TransformersEngine(
                runs, tokenizer, decode=path, batch_size=batch, ignore_eos=True
            )
            engine.generate_tokens(rows[-batch:], cfg)  # warm-up on other prompts
            elapsed = float("inf")
            for _ in range(repeats):
                engine.prefix_cache.clear()  # only prompts of the timed call share prefixes
                t0 = time.perf_counter()
                out = engine.generate_tokens(rows[:n], cfg)
                elapsed = min(elapsed, time.perf_counter() - t0)
            context = sum(len(r) for r in rows[:n]) / n
            new = sum(len(o) for o in out) / n
            bound_s = 2 * params * (context + new) / rate
            table.append(
                BenchRow(
                    path=f"{path}{label}",
                    batch=batch,
                    ms_per_obs=1000 * elapsed / n,
                    tokens_per_s=n * new / elapsed,
                    bound_fraction=bound_s / (elapsed / n),
                    context=context,
                    new_tokens=new,
                )
            )
    _print_table(table, params, rate)
    return table


def _print_table(table: Sequence[BenchRow], params: int, rate: float) -> None:
    print(f"{params / 1e6:.2f}M parameters; fp32 matmul rate {rate / 1e9:.1f} GFLOP/s")
    print(
        f"{'path':<22}{'batch':>6}{'ms/obs':>10}{'tok/s':>10}{'of bound':>10}{'ctx':>7}{'new':>6}"
    )
    for r in table:
        print(
            f"{r.path:<22}{r.batch:>6}{r.ms_per_obs:>10.1f}{r.tokens_per_s:>10.0f}"
            f"{r.bound_fraction:>10.2f}{r.context:>7.0f}{r.new_tokens:>6.1f}"
        )


def synthetic_prompts(
    tokenizer: PreTrainedTokenizerFast, n: int, context: int, shared: int = 0, seed: int = 1
) -> list[str]:
    """`n` prompts of about `context` tokens whose first ~`shared` tokens are identical
    (the schemas and rules of one environment), the rest differing per prompt."""
    rng = random.Random(seed)

    def cut(text: str, tokens: int) -> str:
        return str(tokenizer.decode(tokenizer(text)["input_ids"][:tokens]))

    head = cut(" ".join(synthetic_text(rng, 40) for _ in range(4)), shared) if shared else ""
    tails = [" ".join(synthetic_text(rng, 40) for _ in range(4)) for _ in range(n)]
    return [head + cut(t, context - shared) for t in tails]


def main() -> None:
    torch.set_num_threads(min(2, torch.get_num_threads()))
    tokenizer = synthetic_tokenizer(4096)
    model = random_llama(len(tokenizer))
    distinct = synthetic_prompts(tokenizer, 64, context=215)
    decode_benchmark(model, tokenizer, distinct)
    shared = synthetic_prompts(tokenizer, 64, context=215, shared=150)
    decode_benchmark(model, tokenizer, shared, paths=("own",), label=" shared-150")


if __name__ == "__main__":
    main()

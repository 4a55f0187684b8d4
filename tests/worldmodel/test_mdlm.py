"""The MDLM: its loss (hand-computed, and equal to a token's cross-entropy given everything
else), its attention split (the cached path equals one block-diffusion forward; the prefix
never depends on the target), the sampler (no mask left, the prefix encoded once and never
altered, deterministic greedy, batched = alone), and its checkpoint round trip."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from simworld.worldmodel.checkpoint import CheckpointMeta, load_checkpoint
from simworld.worldmodel.copy_head import mixture_logprobs
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.mdlm import MDLM, MDLMConfig, PrefixKV, load_mdlm, mdlm_loss, save_mdlm
from simworld.worldmodel.mdlm_sample import MDLMEngine, _choose, sample_tokens
from simworld.worldmodel.tokenizer import train_tokenizer
from simworld.worldmodel.world_model import TextWorldModel, load_world_model

V = 50
PAD, EOS = 0, 1


def _model(seed: int = 0, **overrides: int) -> MDLM:
    torch.manual_seed(seed)
    cfg = MDLMConfig.preset("tiny", target_len=overrides.pop("target_len", 6), **overrides)
    model = MDLM(cfg, V)
    model.train(False)
    return model


def _prefix(model: MDLM, rows: list[list[int]]) -> PrefixKV:
    P = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), P, dtype=torch.long)
    valid = torch.zeros(len(rows), P, dtype=torch.bool)
    for b, r in enumerate(rows):
        ids[b, : len(r)] = torch.tensor(r)
        valid[b, : len(r)] = True
    return model.encode_prefix(ids, valid)


def _one_pass(model: MDLM, prefix: list[int], target: list[int]) -> torch.Tensor:
    """A reference: the whole [prefix | target] sequence in one forward through every layer
    with the block-diffusion mask (prefix rows see the prefix, target rows see all)."""
    P, L = len(prefix), len(target)
    ids = torch.tensor([prefix + target])  # (1, P + L)
    cos, sin = model._rope(torch.arange(P + L)[None])
    mask = torch.ones(P + L, P + L, dtype=torch.bool)
    mask[:P, P:] = False  # the prefix does not see the target
    x = model.embed(ids)
    for layer in model.layers:
        x, _ = layer(x, cos, sin, mask[None, None], None)
    h = model.norm(x)  # (1, P + L, D)
    logits = h @ model.embed.weight[:V].T  # (1, P + L, V)
    if not model.cfg.copy_dim:
        return logits[0, P:]  # (L, V)
    # the copy head: each target position copies from the prefix tokens
    allowed = torch.ones(1, L, P, dtype=torch.bool)
    query, gate = model.copy_q(h[:, P:]), model.copy_gate(h[:, P:])
    keys = model.copy_k(h[:, :P])
    return mixture_logprobs(logits[:, P:], query, keys, gate, ids[:, :P], allowed)[0]


# ---------------------------------------------------------------------------- loss


def test_loss_by_hand() -> None:
    """Uniform logits over 2 tokens: CE = ln 2 everywhere. One of two positions masked at
    t = 0.5: weighted, (ln 2 / 0.5) / 2 positions = ln 2; unweighted, the mean CE = ln 2.
    Both positions masked at t = 0.25 in a batch of one: (2 ln 2 / 0.25) / 2 = 4 ln 2."""
    logits = torch.zeros(1, 2, 2)
    target = torch.tensor([[0, 1]])
    one = torch.tensor([[True, False]])
    assert mdlm_loss(logits, target, one, torch.tensor([0.5])).item() == pytest.approx(math.log(2))
    assert mdlm_loss(logits, target, one, torch.tensor([0.5]), weighted=False).item() == (
        pytest.approx(math.log(2))
    )
    both = torch.ones(1, 2, dtype=torch.bool)
    got = mdlm_loss(logits, target, both, torch.tensor([0.25])).item()
    assert got == pytest.approx(4 * math.log(2))


def test_one_masked_token_loss_is_its_cross_entropy_given_everything_else() -> None:
    model = _model()
    prefix, target = [5, 9, 7, 3, 11], [12, 13, 14, EOS, PAD, PAD]
    j = 2
    noisy = torch.tensor([target])
    noisy[0, j] = model.mask_id
    masked = noisy == model.mask_id
    logits = model.denoise(noisy, _prefix(model, [prefix]))
    loss = mdlm_loss(logits, torch.tensor([target]), masked, torch.tensor([0.3]), weighted=False)
    # the reference sees every other token, the mask in place of token j, in one pass
    reference = _one_pass(model, prefix, noisy[0].tolist())
    expected = F.cross_entropy(reference[j : j + 1], torch.tensor([target[j]]))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("copy_dim", [0, 16])
def test_cached_prefix_path_equals_one_block_diffusion_forward(copy_dim: int) -> None:
    """With and without the copy head (its pointer keys cached with the prefix)."""
    model = _model(copy_dim=copy_dim)
    prefix, target = [5, 9, 7, 3], [model.mask_id, 13, model.mask_id, EOS, PAD, PAD]
    cached = model.denoise(torch.tensor([target]), _prefix(model, [prefix]))[0]
    assert torch.allclose(cached, _one_pass(model, prefix, target), atol=1e-5)


def test_prefix_never_depends_on_the_target_and_padding_changes_nothing() -> None:
    model = _model()
    short, long = [5, 9, 7], [4, 8, 6, 10, 20, 21, 22]
    alone = _prefix(model, [short])
    batched = _prefix(model, [short, long])  # `short` right-padded to 7
    for a, b in zip(alone.k + alone.v, batched.k + batched.v, strict=True):
        assert torch.allclose(a[0, :, :3], b[0, :, :3], atol=1e-5)
    target = torch.tensor([[model.mask_id] * 6, [12, model.mask_id, 3, 4, 5, 6]])
    logits = model.denoise(target, batched)
    assert torch.allclose(logits[0], model.denoise(target[:1], alone)[0], atol=1e-5)


# ---------------------------------------------------------------------------- sampler


@pytest.mark.parametrize("steps", [1, 2, 3, 5, 6])
def test_confidence_schedule_commits_everything_in_k_steps(steps: int) -> None:
    L, gen = 6, [torch.Generator().manual_seed(0)]
    masked = torch.ones(1, L, dtype=torch.bool)
    for step in range(steps):
        commit = _choose(masked, torch.rand(1, L), step, steps, "confidence", gen)
        assert not (commit & ~masked).any()  # only masked positions are committed
        left = int(masked.sum())
        masked = masked & ~commit
        assert int(commit.sum()) == math.ceil(left / (steps - step))  # spread evenly
    assert not masked.any()


@pytest.mark.parametrize("order", ["confidence", "ancestral"])
@pytest.mark.parametrize("sample", [False, True])
@pytest.mark.parametrize("steps", [1, 2, 4, 16])
@pytest.mark.parametrize("trim", [False, True])
def test_sampler_never_leaves_a_mask(order: str, sample: bool, steps: int, trim: bool) -> None:
    model = _model(target_len=12)
    seen: list[torch.Tensor] = []
    original = model.denoise

    def spy(target: torch.Tensor, prefix: PrefixKV, keys: torch.Tensor | None) -> torch.Tensor:
        seen.append(target.clone())
        return original(target, prefix, keys)

    model.denoise = spy  # type: ignore[method-assign]
    cfg = GenerationConfig(max_new_tokens=12, do_sample=sample, seed=3)
    got = sample_tokens(model, [[5, 6, 7], [8, 9]], cfg, steps, EOS, PAD, order, trim)  # type: ignore[arg-type]
    assert all(0 <= t < V and t not in (EOS, PAD) for row in got.tokens for t in row)
    assert got.passes == 1 + len(seen) and len(seen) <= steps
    # before the last pass masks remained; the last pass committed every one of them
    assert all(len(r) <= 12 for r in got.tokens)


def test_prefix_is_encoded_once_per_observation_and_never_altered() -> None:
    model = _model(target_len=8)
    encodes: list[tuple[torch.Tensor, torch.Tensor]] = []
    kvs: list[PrefixKV] = []
    encode, denoise = model.encode_prefix, model.denoise

    def encode_spy(ids: torch.Tensor, valid: torch.Tensor) -> PrefixKV:
        encodes.append((ids.clone(), valid.clone()))
        return encode(ids, valid)

    def denoise_spy(
        target: torch.Tensor, prefix: PrefixKV, keys: torch.Tensor | None
    ) -> torch.Tensor:
        kvs.append(prefix)
        snapshot = [t.clone() for t in prefix.k + prefix.v]
        out = denoise(target, prefix, keys)
        assert all(torch.equal(a, b) for a, b in zip(snapshot, prefix.k + prefix.v, strict=True))
        return out

    model.encode_prefix = encode_spy  # type: ignore[method-assign]
    model.denoise = denoise_spy  # type: ignore[method-assign]
    rows = [[5, 6, 7, 8], [9, 10]]
    got = sample_tokens(model, rows, GenerationConfig(max_new_tokens=8), 4, EOS, PAD)
    assert len(encodes) == 1  # one encoding for the batch: once per observation
    ids, valid = encodes[0]
    assert [ids[b][valid[b]].tolist() for b in range(2)] == rows  # the prefix as given
    assert all(kv is kvs[0] for kv in kvs) and got.passes == 1 + len(kvs)


def test_greedy_is_deterministic_and_batched_equals_alone() -> None:
    model = _model(target_len=10)
    cfg = GenerationConfig(max_new_tokens=10)
    rows = [[5, 6, 7], [8, 9, 10, 11, 12]]
    first = sample_tokens(model, rows, cfg, 4, EOS, PAD).tokens
    assert sample_tokens(model, rows, cfg, 4, EOS, PAD).tokens == first
    assert sample_tokens(model, rows[1:], cfg, 4, EOS, PAD).tokens == first[1:]


def test_seeded_sampling_repeats_and_the_seed_matters() -> None:
    model = _model(target_len=10)
    rows = [[5, 6, 7]] * 3

    def draw(seed: int) -> list[list[int]]:
        cfg = GenerationConfig(max_new_tokens=10, do_sample=True, seed=seed)
        return sample_tokens(model, rows, cfg, 3, EOS, PAD).tokens

    assert draw(1) == draw(1)
    assert draw(1) != draw(2)


def test_after_an_eos_only_pads_follow() -> None:
    """A model that always prefers <eos> at position 2: the output stops there, and the
    positions after it become <pad> at once, so fewer steps than K run."""
    model = _model(target_len=8)
    original = model.denoise

    def biased(target: torch.Tensor, prefix: PrefixKV, keys: torch.Tensor | None) -> torch.Tensor:
        logits = original(target, prefix, keys)
        logits[:, 2, EOS] = 1e4
        logits[:, :, PAD] = -1e4
        return logits

    model.denoise = biased  # type: ignore[method-assign]
    got = sample_tokens(model, [[5, 6]], GenerationConfig(max_new_tokens=8), 8, EOS, PAD)
    assert len(got.tokens[0]) == 2
    assert got.passes < 1 + 8  # the forced pads ended the loop early


def _ends_by_length(model: MDLM, ends: dict[int, int]) -> list[int]:
    """Make `model` prefer <eos> at position ends[prefix length] and never <pad>; returns
    the list it appends each step's window width to."""
    original, widths = model.denoise, []

    def biased(target: torch.Tensor, prefix: PrefixKV, keys: torch.Tensor | None) -> torch.Tensor:
        widths.append(target.shape[1])
        logits = original(target, prefix, keys)
        for b, n in enumerate(prefix.lengths.tolist()):
            if ends[n] < target.shape[1]:
                logits[b, ends[n], EOS] = 1e4
        logits[:, :, PAD] = -1e4
        return logits

    model.denoise = biased  # type: ignore[method-assign]
    return widths


@pytest.mark.parametrize("sample", [False, True])
def test_a_trimmed_window_ends_at_the_last_eos_and_rows_stay_independent(sample: bool) -> None:
    model = _model(target_len=12)
    widths = _ends_by_length(model, {2: 2, 4: 6})
    rows, cfg = [[5, 6], [8, 9, 10, 11]], GenerationConfig(12, do_sample=sample, seed=2)
    both = sample_tokens(model, rows, cfg, 6, EOS, PAD, trim=True)
    assert [len(t) for t in both.tokens] == [2, 6]
    assert widths[0] == 12 and widths[1:] and set(widths[1:]) == {7}  # up to the last <eos>
    widths.clear()
    alone = sample_tokens(model, rows[:1], cfg, 6, EOS, PAD, trim=True)
    assert alone.tokens == both.tokens[:1] and set(widths[1:]) == {3}
    widths.clear()
    sample_tokens(model, rows, cfg, 6, EOS, PAD)  # untrimmed: every step computes all L
    assert set(widths) == {12}


def test_the_engine_passes_trim_to_the_sampler() -> None:
    tok = train_tokenizer(["abc def ghi", "jkl mno"] * 10, 300)
    model = MDLM(MDLMConfig.preset("tiny", target_len=8), len(tok))
    widths = []
    original = model.denoise

    def spy(target: torch.Tensor, prefix: PrefixKV, keys: torch.Tensor | None) -> torch.Tensor:
        widths.append(None if keys is None else keys.shape[1])
        return original(target, prefix, keys)

    model.denoise = spy  # type: ignore[method-assign]
    MDLMEngine(model, tok, steps=2, trim=True).generate(["abc"], GenerationConfig(8))
    assert widths and all(w is not None for w in widths)


# ---------------------------------------------------------------------------- checkpoint


def _trained(tmp: Path, **args: object) -> tuple[MDLM, object]:
    """A random tiny MDLM over a byte-level BPE, saved to `tmp`."""
    tok = train_tokenizer(["abc def ghi", "jkl mno"] * 10, 300)
    torch.manual_seed(0)
    model = MDLM(MDLMConfig.preset("tiny", target_len=8), len(tok))
    meta = CheckpointMeta("1", kind="mdlm", training_args=dict(args))
    save_mdlm(tmp, model, tok, meta)
    return model, tok


def test_checkpoint_round_trip_and_load_world_model(tmp_path: Path) -> None:
    model, _ = _trained(tmp_path, sample_steps=3, max_new_tokens=8)
    loaded, _, got_meta = load_mdlm(tmp_path)
    assert got_meta.kind == "mdlm"
    target = torch.tensor([[loaded.mask_id] * 8])
    prefix = [5, 6, 7]
    assert torch.equal(
        model.denoise(target, _prefix(model, [prefix])),
        loaded.denoise(target, _prefix(loaded, [prefix])),
    )
    wm = load_world_model(tmp_path)
    assert isinstance(wm, TextWorldModel) and isinstance(wm.engine, MDLMEngine)
    assert wm.engine.steps == 3 and wm.generation.max_new_tokens == 8
    texts = wm.engine.generate(["abc", "defg"], wm.generation)
    assert len(texts) == 2 and wm.engine.last_passes and max(wm.engine.last_passes) <= 4


def test_load_checkpoint_refuses_an_mdlm_with_its_kind(tmp_path: Path) -> None:
    _trained(tmp_path)
    (tmp_path / "config.json").write_text("{}")  # even with the AR files present
    with pytest.raises(ValueError, match="'mdlm' checkpoint, not an AR one"):
        load_checkpoint(tmp_path)


def test_bad_config_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="target_len"):
        MDLMConfig(target_len=2000)
    with pytest.raises(ValueError, match="unknown MDLM preset"):
        MDLMConfig.preset("huge")

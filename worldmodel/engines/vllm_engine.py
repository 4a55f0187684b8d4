"""vLLM as an optional engine for GPUs (`pip install 'simworld[vllm]'`, in its own env).

UNTESTED HERE: this project's machines have no GPU and vLLM cannot be installed on them, so
this module has never been run; it is written against vLLM's offline API as documented for
the 0.2x releases (`vllm.LLM(model=..., seed=..., dtype=...)`, `LLM.generate(prompts,
SamplingParams)`, `LLM.chat(conversations, SamplingParams)`, per-request `SamplingParams.seed`,
`temperature=0` for greedy). Those are the versions in `WRITTEN_FOR`.

vLLM wheels pin the torch they were compiled against and bound transformers. Before
importing vllm, `check_versions()` compares the installed vllm with `WRITTEN_FOR` and the
installed torch and transformers with the requirements the installed vllm declares, and
raises `RuntimeError` naming each mismatch (pass `check=False` to try anyway).

    engine = VLLMEngine("path/to/checkpoint", dtype="bfloat16")
    engine.generate(prompts, GenerationConfig(max_new_tokens=64))
"""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Sequence
from typing import Any

from packaging.requirements import Requirement
from packaging.version import Version

from simworld.worldmodel.engines.base import (
    ChatMessages,
    GenerationConfig,
    RetryReport,
    Validator,
    generate_validated,
)

WRITTEN_FOR = {"vllm": ("0.20", "0.21", "0.22", "0.23")}  # release series (major.minor)
INSTALL_HINT = "pip install 'simworld[vllm]' (in an environment with the torch it pins)"


def _installed(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def check_versions() -> None:
    """Raise `ImportError` without vllm, `RuntimeError` on versions it was not written for."""
    vllm_version = _installed("vllm")
    if vllm_version is None:
        raise ImportError(f"the 'vllm' engine needs vLLM, which is not installed: {INSTALL_HINT}")
    problems = []
    series = ".".join(Version(vllm_version).base_version.split(".")[:2])
    if series not in WRITTEN_FOR["vllm"]:
        problems.append(f"vllm {vllm_version} (written for {', '.join(WRITTEN_FOR['vllm'])})")
    for raw in md.requires("vllm") or []:
        req = Requirement(raw)
        if req.name not in ("torch", "transformers") or req.marker is not None:
            continue
        have = _installed(req.name)
        if have is None or not req.specifier.contains(Version(have), prereleases=True):
            problems.append(f"{req.name} {have} (vllm {vllm_version} requires {req})")
    if problems:
        raise RuntimeError(
            "the vLLM engine cannot run with: " + "; ".join(problems) + f". {INSTALL_HINT}, "
            "or pass check=False to try anyway"
        )


class VLLMEngine:
    """Offline vLLM generation on GPUs; same `GenerationConfig` and seeds as the others."""

    independent_rows = True  # per-request SamplingParams seeds

    def __init__(
        self,
        model: str,
        *,
        dtype: str = "auto",
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.9,
        max_retries: int = 2,
        seed: int = 0,
        check: bool = True,
    ) -> None:
        if check:
            check_versions()
        import vllm  # only here: the extra is optional and pins its own torch

        self._vllm = vllm
        self.llm = vllm.LLM(
            model=model,
            dtype=dtype,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
        )
        self.max_retries = max_retries
        self.last_report = RetryReport()

    def _params(self, cfg: GenerationConfig, rows: Sequence[int]) -> list[Any]:
        return [
            self._vllm.SamplingParams(
                max_tokens=cfg.max_new_tokens,
                temperature=cfg.temperature if cfg.do_sample else 0.0,
                top_p=cfg.top_p,
                seed=cfg.row_seed(row),
                stop=list(cfg.stop) or None,
            )
            for row in rows
        ]

    def generate(self, prompts: Sequence[str], cfg: GenerationConfig) -> list[str]:
        outputs = self.llm.generate(list(prompts), self._params(cfg, range(len(prompts))))
        return [o.outputs[0].text for o in outputs]

    def generate_chat(
        self,
        messages: Sequence[ChatMessages],
        cfg: GenerationConfig,
        validate: Validator | None = None,
    ) -> list[str]:
        def run(rows: list[int], run_cfg: GenerationConfig) -> list[str]:
            conversations = [messages[r] for r in rows]
            outputs = self.llm.chat(conversations, self._params(run_cfg, rows))
            return [o.outputs[0].text for o in outputs]

        outputs, self.last_report = generate_validated(
            run, len(messages), cfg, validate, self.max_retries
        )
        return outputs

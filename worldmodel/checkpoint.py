"""World-model checkpoints: one directory per model.

    ckpt/
      model.safetensors      weights (Hugging Face layout)
      config.json            the transformers model config
      tokenizer.json, tokenizer_config.json, ...
      simworld.json          CheckpointMeta: kind ("ar", or "mdlm": see mdlm.py for its
                             layout), serialization version, training
                             arguments, val metrics reached, schema version
      memory.jsonl.gz        the recorded steps its example blocks are retrieved from
                             (only when trained with examples; see retrieval.py)

Use:

    save_checkpoint("ckpt", model, tok, CheckpointMeta(serialization_version="1", ...))
    model, tok, meta = load_checkpoint("ckpt")

Loading checks the directory is complete first and names what is missing.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from simworld.worldmodel.copy_head import register
from simworld.worldmodel.tokenizer import load_tokenizer

SCHEMA_VERSION = 1
META_FILE = "simworld.json"
REQUIRED_FILES = ("model.safetensors", "config.json", "tokenizer_config.json", META_FILE)


@dataclass
class CheckpointMeta:
    """What a checkpoint records beside its weights (simworld.json)."""

    serialization_version: str
    kind: str = "ar"
    training_args: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: Path) -> CheckpointMeta:
        version = raw.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"{where}: schema_version {version!r}, this simworld reads {SCHEMA_VERSION}: "
                "retrain the checkpoint or use the simworld version that wrote it"
            )
        missing = [k for k in ("kind", "serialization_version") if k not in raw]
        if missing:
            raise ValueError(f"{where}: missing field(s) {missing}")
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in raw.items() if k in known})


def save_checkpoint(
    directory: str | Path,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    meta: CheckpointMeta,
) -> Path:
    """Write model, tokenizer and meta into `directory` (created; existing files replaced)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))  # safetensors is the only format transformers 5 writes
    tokenizer.save_pretrained(str(out))
    # the meta goes last: a directory with simworld.json was written completely
    (out / META_FILE).write_text(json.dumps(asdict(meta), indent=2, sort_keys=True) + "\n")
    return out


def read_meta(directory: str | Path) -> CheckpointMeta:
    """The meta (simworld.json) of the checkpoint in `directory`: its kind says how to load it
    ("ar" here, "mdlm" by `simworld.worldmodel.mdlm.load_mdlm`)."""
    path = Path(directory)
    if not path.is_dir():
        raise FileNotFoundError(f"no checkpoint directory at {path}")
    if not (path / META_FILE).is_file():
        raise FileNotFoundError(
            f"{path} is not a complete simworld checkpoint: missing {META_FILE} "
            "(was training interrupted before the final save? resume it, or re-save)"
        )
    return CheckpointMeta.from_dict(json.loads((path / META_FILE).read_text()), path)


def load_checkpoint(
    directory: str | Path,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, CheckpointMeta]:
    """Model (eval mode), tokenizer and meta of the AR checkpoint in `directory`."""
    path = Path(directory)
    if not path.is_dir():
        raise FileNotFoundError(f"no checkpoint directory at {path}")
    missing = [name for name in REQUIRED_FILES if not (path / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{path} is not a complete simworld checkpoint: missing {', '.join(missing)} "
            "(was training interrupted before the final save? resume it, or re-save)"
        )
    meta = CheckpointMeta.from_dict(json.loads((path / META_FILE).read_text()), path)
    if meta.kind != "ar":
        raise ValueError(
            f"{path} holds a {meta.kind!r} checkpoint, not an AR one: load it with "
            "simworld.worldmodel.load_world_model"
        )
    register()  # AR checkpoints may hold a copy-head model (copy_head.py)
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True)
    model.train(False)  # eval mode
    return model, load_tokenizer(path), meta

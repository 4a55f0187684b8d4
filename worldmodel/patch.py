"""State changes as RFC 6902 JSON patches: a thin wrapper over the `jsonpatch` library.

    from simworld.worldmodel.patch import diff, apply
    ops = diff(step.state, step.next_state)     # [{"op": "replace", "path": "/position", ...}]
    assert apply(step.state, ops) == step.next_state

`diff` is deterministic (the same two states always give the same ops, in document order)
and compact: jsonpatch's minimal ops are kept, except that a run of ops under one container
that would take more text than replacing the container outright is replaced by that one
`replace`. `apply` never mutates its input and raises `PatchError` naming the op that failed.
`check` validates a patch's shape without applying it (what the target parser uses).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import jsonpointer
from jsonpointer import JsonPointer

from simworld.data.records import JSON

Patch = list[dict[str, JSON]]

_OPS = {
    "add": ("path", "value"),
    "remove": ("path",),
    "replace": ("path", "value"),
    "move": ("from", "path"),
    "copy": ("from", "path"),
    "test": ("path", "value"),
}


class PatchError(ValueError):
    """A patch that is malformed or does not apply; `index` is the op at fault (or None)."""

    def __init__(self, reason: str, index: int | None = None) -> None:
        self.index = index
        self.reason = reason
        super().__init__(reason if index is None else f"op {index}: {reason}")


def _text(value: JSON) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _same(a: JSON, b: JSON) -> bool:
    """Equality that tells 1, 1.0 and True apart (JSON text equality, key order aside)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


class _OrderedDiff(jsonpatch.DiffBuilder):  # type: ignore[misc]
    """jsonpatch's diff, visiting an object's keys in document order. jsonpatch 1.33 visits
    them through sets, whose order follows PYTHONHASHSEED: the same two states gave patches
    with their ops in another order from one process to the next, so training pairs and
    served targets were not reproducible. (Pinned: this overrides a private method.)"""

    def _compare_dicts(self, path: str, src: dict[str, JSON], dst: dict[str, JSON]) -> None:
        for key in [k for k in src if k not in dst]:
            self._item_removed(path, str(key), src[key])
        for key in [k for k in dst if k not in src]:
            self._item_added(path, str(key), dst[key])
        for key in [k for k in src if k in dst]:
            self._compare_values(path, key, src[key], dst[key])


def diff(before: JSON, after: JSON) -> Patch:
    """The ops that turn `before` into `after` (an empty list when they are equal)."""
    if _same(before, after):
        return []
    builder = _OrderedDiff(before, after, jsonpatch.JsonPatch.json_dumper, JsonPointer)
    builder._compare_values("", None, before, after)
    ops: Patch = [dict(op) for op in builder.execute()]
    for candidate in (_coarsen(before, after, ops), ops):
        if _same(apply(before, candidate), after):  # never ship a wrong patch
            return candidate
    return [{"op": "replace", "path": "", "value": copy.deepcopy(after)}]


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if path else path


def _coarsen(before: JSON, after: JSON, ops: Patch) -> Patch:
    """Replace each container whose ops out-weigh its new value by one `replace` op.

    Walks parents from the deepest up: when the ops inside a container (no op elsewhere
    moving or copying from it) take more text than `replace` of the whole container, they
    collapse into that op. Keeps patches short on list shuffles.
    """
    changed = True
    while changed:
        changed = False
        parents = sorted({_parent(op["path"]) for op in ops if op["path"]}, key=len, reverse=True)
        for parent in parents:
            inside = [op for op in ops if _under(op, parent)]
            if len(inside) < 2 or any(_reads(op, parent) for op in ops if op not in inside):
                continue
            try:
                value = jsonpointer.resolve_pointer(after, parent)
                jsonpointer.resolve_pointer(before, parent)
            except jsonpointer.JsonPointerException:
                continue
            single = {"op": "replace", "path": parent, "value": copy.deepcopy(value)}
            if len(_text(single)) < len(_text(inside)):
                first = ops.index(inside[0])
                rest = [op for op in ops if not _under(op, parent)]
                rest.insert(min(first, len(rest)), single)
                ops, changed = rest, True
                break
    return ops


def _under(op: dict[str, JSON], parent: str) -> bool:
    path = op["path"]
    assert isinstance(path, str)
    inside = path.startswith(parent + "/") or (parent == "" and path != "")
    source = op.get("from")
    return inside and (source is None or _reads(op, parent))


def _reads(op: dict[str, JSON], parent: str) -> bool:
    source = op.get("from")
    return isinstance(source, str) and (source == parent or source.startswith(parent + "/"))


def check(patch: Any) -> list[str]:
    """What is wrong with the shape of `patch` (a list of RFC 6902 ops); [] when nothing."""
    if not isinstance(patch, list):
        return [f"a patch is a JSON array of ops, got {type(patch).__name__}"]
    problems = []
    for i, op in enumerate(patch):
        if not isinstance(op, dict):
            problems.append(f"op {i}: expected an object, got {type(op).__name__}")
            continue
        name = op.get("op")
        if name not in _OPS:
            problems.append(f"op {i}: unknown op {name!r}; expected one of {', '.join(_OPS)}")
            continue
        for member in _OPS[name]:
            if member not in op:
                problems.append(f"op {i}: {name} needs {member!r}")
            elif member in ("path", "from") and not _pointer(op[member]):
                problems.append(f"op {i}: {member} {op[member]!r} is not a JSON pointer")
    return problems


def _pointer(value: JSON) -> bool:
    return isinstance(value, str) and (value == "" or value.startswith("/"))


def apply(state: JSON, patch: Patch) -> JSON:
    """`state` with `patch` applied, as a new value; PatchError says which op failed and why."""
    problems = check(patch)
    if problems:
        raise PatchError("; ".join(problems))
    result = copy.deepcopy(state)
    for i, op in enumerate(patch):
        try:
            result = jsonpatch.JsonPatch([op]).apply(result, in_place=True)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
            raise PatchError(f"{op['op']} {op['path']!r}: {exc}", i) from None
        except (KeyError, IndexError, TypeError) as exc:  # jsonpatch lets some of these out
            raise PatchError(f"{op['op']} {op['path']!r}: {exc!r}", i) from None
    return result


__all__ = ["Patch", "PatchError", "apply", "check", "diff"]

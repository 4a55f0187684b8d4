"""The state of BFCL backend instances as plain JSON.

A class's state is `vars(instance)` without the `_`-prefixed attributes, which is exactly
what BFCL's own state checker compares, made JSON-ready:

- the file system's `Directory` / `File` objects become the shape BFCL's scenario configs
  use, `{"workspace": {"type": "directory", "contents": {"a.txt": {"type": "file",
  "content": "..."}}}}`, without the parent back-pointers;
- GorillaFileSystem's private current directory is added as `_cwd` ("/workspace/document",
  the path `pwd()` reports): BFCL's checker ignores it, but a world model needs it;
- integer dict keys become strings (as `json.dumps` writes them) and sets become sorted
  lists (MessageAPI's `generated_ids`), so the same state always serialises the same way.

    state = capture_state({"GorillaFileSystem": fs_instance})
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bfcl_eval.eval_checker.multi_turn_eval.func_source_code.gorilla_file_system import (
    Directory,
    File,
)

from simworld.data.records import JSON


def capture_state(instances: Mapping[str, object]) -> dict[str, JSON]:
    """{ClassName: {attribute: value}} for every instance, in the given order."""
    return {name: class_state(instance) for name, instance in instances.items()}


def class_state(instance: object) -> dict[str, JSON]:
    attributes = vars(instance)
    state = {key: plain(value) for key, value in attributes.items() if not key.startswith("_")}
    current = attributes.get("_current_dir")
    if isinstance(current, Directory):
        state["_cwd"] = directory_path(current)
    return state


def directory_path(directory: Directory) -> str:
    """The absolute path of `directory`, root name included, as `pwd()` reports it."""
    names: list[str] = []
    node: Directory | None = directory
    while node is not None:
        names.append(node.name)
        node = node.parent
    return "/" + "/".join(reversed(names))


def plain(value: Any) -> JSON:
    """`value` as JSON-ready Python; TypeError for anything without a faithful JSON form."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} has no JSON form")
        return value
    if isinstance(value, Directory):
        return {value.name: _node(value)}
    if isinstance(value, File):
        return _node(value)
    if isinstance(value, dict):
        return _plain_dict(value)
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted((plain(item) for item in value), key=_order)
    raise TypeError(f"cannot record a {type(value).__name__} in a BFCL state")


def _node(item: Directory | File) -> dict[str, JSON]:
    if isinstance(item, File):
        return {"type": "file", "content": item.content}
    contents = {name: _node(child) for name, child in item.contents.items()}
    return {"type": "directory", "contents": contents}


def _plain_dict(value: dict[Any, Any]) -> dict[str, JSON]:
    out: dict[str, JSON] = {}
    for key, item in value.items():
        if isinstance(key, bool) or not isinstance(key, str | int):
            raise TypeError(f"cannot record the dict key {key!r} in a BFCL state")
        name = str(key)
        if name in out:
            raise ValueError(f"dict keys {key!r} and {name!r} collide once written as JSON")
        out[name] = plain(item)
    return out


def _order(value: JSON) -> tuple[int, Any]:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, value)
    return (1, repr(value))


__all__ = ["capture_state", "class_state", "directory_path", "plain"]

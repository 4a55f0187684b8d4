"""The datascience domain's data layer: tables and profiles, the operation vocabulary and its
executor against hand-checked cases, schema checks, cost estimates, and the recorder."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pandas as pd
import pytest

from simworld.data import datascience_ops
from simworld.data.datascience_costs import estimate
from simworld.data.datascience_ops import (
    MODELS,
    OPS,
    TOOLS,
    OpError,
    check_args,
    make_model,
    run_op,
)
from simworld.data.datascience_tables import (
    SourceError,
    build_table,
    profile,
    rounded,
    source_for,
    task_id_for,
)
from simworld.data.envs import load_env
from simworld.data.envs.datascience import apply_call, initial_state, replay
from simworld.data.records import to_json

IRIS = {"name": "iris"}
DIABETES = {"name": "diabetes"}


@pytest.fixture(scope="module")
def iris() -> pd.DataFrame:
    return build_table(IRIS)


# ---------------------------------------------------------------------------- tables


def test_sources_and_task_ids_round_trip() -> None:
    assert source_for("iris") == IRIS
    big = source_for("make_classification-50000x20-s3")
    assert big == {"name": "make_classification", "n_rows": 50000, "n_features": 20, "seed": 3}
    assert task_id_for(big) == "make_classification-50000x20-s3"
    for bad in ("titanic", "make_classification-10x20-s0", "make_regression-1000x2-s0"):
        with pytest.raises(SourceError):
            source_for(bad)


def test_iris_with_its_injected_defects(iris: pd.DataFrame) -> None:
    assert list(iris.columns) == [
        "sepal_length", "sepal_width", "petal_length", "petal_width", "band", "site", "target",
    ]  # fmt: skip
    assert iris.shape == (150, 7)
    assert int(iris.isna().sum().sum()) > 0 and (iris.isna().sum() > 0).sum() == 2
    assert iris["band"].value_counts().to_dict() == {"low": 50, "mid": 50, "high": 50}
    assert set(iris["site"]) <= {"north", "south", "east", "west"}
    # the same source builds the same table
    pd.testing.assert_frame_equal(iris, build_table(IRIS))


def test_profile_is_hand_checkable(iris: pd.DataFrame) -> None:
    p = profile(iris, IRIS)
    assert p["shape"] == [150, 7] and p["task"] == "classification" and p["target"] == "target"
    # target: classes 0, 1, 2 fifty each -> mean 1, population std sqrt(2/3)
    assert p["columns"]["target"] == ["int", 0, 1, 0.8165, 0, 2]
    assert p["columns"]["band"] == ["category", 0, 3, {"low": 50, "mid": 50, "high": 50}]
    for name in ("sepal_length", "sepal_width", "petal_length", "petal_width"):
        column = iris[name].dropna()
        dtype, missing, mean, _, _, high = p["columns"][name]
        assert (dtype, missing) == ("float", int(iris[name].isna().sum()))
        assert mean == rounded(float(column.mean())) and high == rounded(float(column.max()))
    assert len(p["sample"]) == 3 and len(p["sample"][0]) == 7


def test_rounding() -> None:
    assert rounded(123456.0) == 123500
    assert rounded(0.000123456) == 0.0001235
    assert rounded(2.0) == 2 and isinstance(rounded(2.0), int)
    assert rounded(-2.5e-17) == 0  # a centred column's mean is noise
    assert rounded(float("nan")) is None


# ---------------------------------------------------------------------------- table ops


def test_impute_fills_with_the_hand_computed_mean(iris: pd.DataFrame) -> None:
    holes = [c for c in iris.columns if iris[c].isna().any()]
    after, result = run_op(iris, IRIS, "impute", {"strategy": "mean"})
    assert result == {"ok": True, "shape": [150, 7], "changed": 2}
    for column in holes:
        mean = float(np.nanmean(iris[column].to_numpy(dtype=float)))
        filled = after.loc[iris[column].isna(), column]
        assert np.allclose(filled, mean)
    assert not after.isna().any().any()
    assert iris.isna().any().any()  # the input is never modified


def test_encode_onehot_and_ordinal(iris: pd.DataFrame) -> None:
    onehot, result = run_op(iris, IRIS, "encode", {"method": "onehot", "columns": ["band"]})
    assert result == {"ok": True, "shape": [150, 9], "changed": 3, "dropped": 1}
    assert [c for c in onehot.columns if c.startswith("band_")] == [
        "band_high",
        "band_low",
        "band_mid",
    ]
    assert (onehot[["band_high", "band_low", "band_mid"]].sum(axis=1) == 1).all()
    assert onehot["band_low"].tolist() == (iris["band"] == "low").astype(int).tolist()
    ordinal, _ = run_op(iris, IRIS, "encode", {"method": "ordinal", "columns": ["band"]})
    assert ordinal["band"].tolist() == iris["band"].map({"high": 0, "low": 1, "mid": 2}).tolist()


def test_scale_filter_select_drop(iris: pd.DataFrame) -> None:
    ready, _ = run_op(iris, IRIS, "impute", {"strategy": "median"})
    scaled, _ = run_op(ready, IRIS, "scale", {"method": "standard"})
    for column in ("sepal_length", "petal_width"):
        assert abs(scaled[column].mean()) < 1e-9 and abs(scaled[column].std(ddof=0) - 1) < 1e-9
    assert scaled["target"].tolist() == ready["target"].tolist()  # the target is left alone
    minmax, _ = run_op(ready, IRIS, "scale", {"method": "minmax", "columns": ["sepal_width"]})
    assert minmax["sepal_width"].min() == 0 and minmax["sepal_width"].max() == 1
    kept, result = run_op(ready, IRIS, "filter_rows", {"column": "target", "op": "!=", "value": 2})
    assert result["rows_removed"] == 50 and sorted(set(kept["target"])) == [0, 1]
    picked, result = run_op(ready, IRIS, "select_features", {"k": 1, "method": "variance"})
    variances = ready[["sepal_length", "sepal_width", "petal_length", "petal_width"]].var(ddof=0)
    assert variances.idxmax() in picked.columns and result["dropped"] == 3
    assert list(picked.columns) == [variances.idxmax(), "band", "site", "target"]
    _, result = run_op(ready, IRIS, "drop_columns", {"columns": ["band", "site"]})
    assert result == {"ok": True, "shape": [150, 5], "changed": 0, "dropped": 2}


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("drop_columns", {"columns": ["price"]}, "unknown columns ['price']"),
        ("drop_columns", {"columns": ["target"]}, "target column 'target' cannot be changed"),
        ("impute", {"strategy": "mean", "columns": ["band"]}, "needs number columns"),
        ("scale", {"method": "standard", "columns": ["site"]}, "encode them first"),
        ("filter_rows", {"column": "target", "op": ">", "value": 5}, "only 0 rows"),
        ("filter_rows", {"column": "band", "op": "<", "value": "low"}, "== or != only"),
        ("train_cv", {"model": "logistic"}, "must be encoded or dropped first"),
        ("train_cv", {"model": "ridge"}, "ridge is a regression model"),
        ("select_features", {"k": 2, "method": "f_test"}, "f_test needs complete columns"),
    ],
)
def test_errors_name_what_is_wrong(iris: pd.DataFrame, name: str, args: dict, message: str) -> None:
    with pytest.raises(OpError, match=message.replace("[", r"\[").replace("]", r"\]")):
        run_op(iris, IRIS, name, args)


# ---------------------------------------------------------------------------- train_cv


def test_train_cv_hand_checked_cases() -> None:
    # classification: the label is x >= 20, a single split -> every fold perfect
    x = np.arange(40, dtype=float)
    separable = pd.DataFrame({"x": x, "target": (x >= 20).astype(int)})
    _, result = run_op(separable, IRIS, "train_cv", {"model": "tree_clf", "folds": 4})
    assert result == {"cv_mean": 1.0, "cv_std": 0.0, "folds": 4, "metric": "accuracy"}
    # regression: target = 2x + 1 exactly -> an unpenalised ridge has R² = 1 on every fold
    line = pd.DataFrame({"x": x, "target": 2 * x + 1})
    _, result = run_op(line, DIABETES, "train_cv", {"model": "ridge", "params": {"alpha": 0}})
    assert result == {"cv_mean": 1.0, "cv_std": 0.0, "folds": 5, "metric": "r2"}
    # a constant predictor-free guess: 1-nearest neighbour on pure noise is near chance
    rng = np.random.default_rng(0)
    noise = pd.DataFrame({"x": rng.normal(size=400), "target": rng.integers(0, 2, 400)})
    _, result = run_op(noise, IRIS, "train_cv", {"model": "knn_clf", "params": {"n_neighbors": 1}})
    assert 0.35 < result["cv_mean"] < 0.65


def test_train_cv_matches_scikit_learn_itself(iris: pd.DataFrame) -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    ready, _ = run_op(iris, IRIS, "impute", {"strategy": "mean"})
    ready, _ = run_op(ready, IRIS, "drop_columns", {"columns": ["band", "site"]})
    _, result = run_op(ready, IRIS, "train_cv", {"model": "logistic", "params": {"C": 0.5}})
    features = ready.drop(columns=["target"]).to_numpy()
    scores = cross_val_score(
        LogisticRegression(C=0.5, max_iter=1000), features, ready["target"].to_numpy(),
        cv=StratifiedKFold(5, shuffle=True, random_state=0),
    )  # fmt: skip
    assert result["cv_mean"] == round(float(scores.mean()), 4)


def test_train_cv_fits_on_one_thread(iris: pd.DataFrame, monkeypatch) -> None:
    # HistGradientBoosting and BLAS start a thread per core unless limited; train_cv must
    # not (two recordings side by side on 2 cores crawled). Read the limits inside the fit.
    from sklearn import model_selection
    from threadpoolctl import threadpool_info

    seen: list[list[int]] = []
    real = model_selection.cross_val_score

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append([pool["num_threads"] for pool in threadpool_info()])
        return real(*args, **kwargs)

    monkeypatch.setattr(model_selection, "cross_val_score", spy)
    ready, _ = run_op(iris, IRIS, "impute", {"strategy": "mean"})
    ready, _ = run_op(ready, IRIS, "drop_columns", {"columns": ["band", "site"]})
    _, result = run_op(ready, IRIS, "train_cv", {"model": "boost_clf"})
    assert result["metric"] == "accuracy" and len(seen) == 1
    assert seen[0] and set(seen[0]) == {1}, f"thread pools during the fit: {seen[0]}"


# ---------------------------------------------------------------------------- schemas, no code


def test_every_operation_has_a_strict_schema() -> None:
    assert set(OPS) == {t.name for t in TOOLS} and len(OPS) == 7
    valid = {
        "impute": {"strategy": "median"},
        "drop_columns": {"columns": ["band"]},
        "encode": {"method": "onehot"},
        "scale": {"method": "robust", "columns": ["x0"]},
        "filter_rows": {"column": "x0", "op": ">=", "value": 1.5},
        "select_features": {"k": 3, "method": "f_test"},
        "train_cv": {"model": "forest_clf", "folds": 3, "params": {"n_estimators": 10}},
    }
    for tool in TOOLS:
        assert tool.input_schema["additionalProperties"] is False
        check_args(tool.name, valid[tool.name])
        with pytest.raises(OpError, match="Additional properties"):
            check_args(tool.name, {**valid[tool.name], "extra": 1})
        for required in tool.input_schema["required"]:
            broken = {k: v for k, v in valid[tool.name].items() if k != required}
            with pytest.raises(OpError, match=f"'{required}' is a required property"):
                check_args(tool.name, broken)
    with pytest.raises(OpError, match="is not one of"):
        check_args("encode", {"method": "target_mean"})
    with pytest.raises(OpError, match="is not of type 'integer'"):
        check_args("select_features", {"k": "3", "method": "variance"})
    with pytest.raises(OpError, match=r"params/n_estimators must lie in \[1, 500\]"):
        make_model("forest_clf", {"n_estimators": 5000})


def test_no_operation_can_run_user_code(iris: pd.DataFrame, tmp_path) -> None:
    marker = tmp_path / "pwned"
    code = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    attempts = [
        ("exec", {"code": code}),
        ("train_cv", {"model": code}),
        ("train_cv", {"model": "logistic", "params": {"C": code}}),
        ("train_cv", {"model": "logistic", "params": {"__class__": code}}),
        ("impute", {"strategy": "constant", "fill_value": {"__reduce__": code}}),
        ("filter_rows", {"column": "target", "op": f"; {code}", "value": 1}),
    ]
    for name, args in attempts:
        with pytest.raises(OpError):
            run_op(iris, IRIS, name, args)
    with pytest.raises(OpError, match="unknown model"):
        make_model("os.system", {})
    assert not marker.exists()
    # and the executor's code (its docstring aside) holds no dynamic evaluation at all
    source = inspect.getsource(datascience_ops).split('"""', 2)[2]
    for word in ("eval(", "exec(", "pickle", "getattr(", "__import__", "importlib"):
        assert word not in source
    assert set(MODELS) == set(datascience_ops.MODEL_CLASSES)


# ---------------------------------------------------------------------------- costs


def test_cost_estimates_follow_the_table_size() -> None:
    small = {"shape": [150, 7]}
    big = {"shape": [50000, 28]}
    forest = {"model": "forest_clf"}
    assert estimate(big, "train_cv", forest) > 10 * estimate(small, "train_cv", forest)
    assert estimate(big, "train_cv", forest) > 5.0  # an ensemble on 50k rows: seconds
    assert estimate(big, "scale", {"method": "standard"}) < 0.5  # a table op: cheap
    ten = {"model": "forest_clf", "params": {"n_estimators": 10}}
    assert estimate(big, "train_cv", ten) < estimate(big, "train_cv", forest) / 5
    assert estimate(big, "train_cv", {"model": "nope"}) < 0.01


# ---------------------------------------------------------------------------- recorder


def test_recorder_is_reproducible_and_replays() -> None:
    env = load_env("datascience", tables="iris,wine", steps=(3, 5))
    first = [to_json(e) for e in env.record(episodes=3, seed=4)]
    again = [
        to_json(e) for e in load_env("datascience", tables="iris,wine", steps=(3, 5)).record(3, 4)
    ]
    assert json.dumps(first) == json.dumps(again)
    for episode in first:
        for step in episode["steps"]:
            result = step["observation"]["results"][0]
            assert json.loads(result["text"]) == result["structured"]
            assert "seconds" not in result["text"]
            if result["is_error"] or step["action"]["calls"][0]["name"] == "train_cv":
                assert step["next_state"] == step["state"]
        last = episode["steps"][-1]["next_state"]
        frame = replay(last["source"], last["pipeline"])
        assert profile(frame, last["source"]) == last["profile"]


def test_apply_call_turns_errors_into_results(iris: pd.DataFrame) -> None:
    state = initial_state(IRIS, iris)
    applied = apply_call(iris, state, "drop_columns", {"columns": ["target"]})
    assert applied.is_error and "cannot be changed" in applied.result["error"]
    assert applied.state is state and applied.frame is iris
    applied = apply_call(iris, state, "impute", {"strategy": "median"})
    assert not applied.is_error
    assert applied.state["pipeline"] == [{"op": "impute", "args": {"strategy": "median"}}]

"""The bundled dataset: it matches its manifest, splits by scenario without leaks, covers
every API in every split, and rebuilds byte for byte from its one command."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import pytest

from simworld.data.bundle import (
    SPLITS,
    BundleConfig,
    assign_splits,
    build_bundle,
    bundled_dir,
    exclude_apis,
    load_bundled,
    manifest,
)
from simworld.data.records import Episode, Step, Task, TextAction, TextObservation


@pytest.fixture(scope="module")
def bundle() -> dict[str, list[Episode]]:
    return {split: load_bundled(split) for split in SPLITS}


def test_counts_match_the_manifest(bundle: dict[str, list[Episode]]) -> None:
    counts = manifest()["counts"]
    for split, episodes in bundle.items():
        for env in ("bfcl", "frozenlake"):
            mine = [ep for ep in episodes if ep.env == env]
            assert counts[env][split]["episodes"] == len(mine) > 0
            assert counts[env][split]["steps"] == sum(len(ep.steps) for ep in mine)
            assert counts[env][split]["scenarios"] == len({ep.task.id for ep in mine})


def test_files_match_manifest_hashes() -> None:
    for name, digest in manifest()["files"].items():
        assert hashlib.sha256((bundled_dir() / name).read_bytes()).hexdigest() == digest


def test_no_scenario_in_two_splits(bundle: dict[str, list[Episode]]) -> None:
    seen: dict[str, str] = {}
    for split, episodes in bundle.items():
        for ep in episodes:
            assert seen.setdefault(ep.task.id, split) == split, f"{ep.task.id} leaks"


def test_bfcl_categories_share_scenarios_within_one_split(
    bundle: dict[str, list[Episode]],
) -> None:
    """base_12, long_context_12 and their off-policy variants are one scenario."""
    by_scenario = Counter(ep.task.id for ep in bundle["train"] if ep.env == "bfcl")
    assert set(by_scenario.values()) == {4}  # 2 categories x (ground truth + 1 variant)


def test_every_bfcl_api_is_in_every_split(bundle: dict[str, list[Episode]]) -> None:
    apis = {api for ep in bundle["train"] for api in ep.task.apis}
    assert len(apis) == 8
    for split in ("val", "test"):
        assert apis == {api for ep in bundle[split] for api in ep.task.apis}


def test_the_bundle_holds_error_observations_and_states(
    bundle: dict[str, list[Episode]],
) -> None:
    bfcl = [ep for ep in bundle["train"] if ep.env == "bfcl"]
    assert manifest()["counts"]["bfcl"]["train"]["error_observations"] > 300
    assert all(s.state is not None and s.next_state is not None for ep in bfcl for s in ep.steps)
    assert {ep.provenance.origin.rsplit("_", 1)[0] for ep in bfcl} == {
        "multi_turn_base",
        "multi_turn_long_context",
    }


def test_exclude_apis_drops_every_episode_touching_the_api(
    bundle: dict[str, list[Episode]],
) -> None:
    kept = exclude_apis(bundle["train"], ["TravelAPI"])
    assert 0 < len(kept) < len(bundle["train"])
    assert not any("TravelAPI" in ep.task.apis for ep in kept)
    tools = {spec.name for ep in kept for spec in ep.tools}
    assert "book_flight" not in tools
    assert "frozenlake" in {ep.env for ep in kept}


def test_assign_splits_is_stratified_and_keeps_scenarios_whole() -> None:
    def ep(scenario: str, api: str) -> Episode:
        step = Step(action=TextAction(text="x"), observation=TextObservation(text="y"))
        return Episode(
            episode_id=scenario, env="e", task=Task(id=scenario, apis=[api]), steps=[step]
        )

    episodes = [ep(f"{api}-{i}", api) for api in ("A", "B") for i in range(20)]
    splits = assign_splits([*episodes, ep("A-0", "A")], (80, 10, 10), seed=0)
    assert len(splits) == 40
    for api in ("A", "B"):
        mine = Counter(split for s, split in splits.items() if s.startswith(api))
        assert mine == {"train": 16, "val": 2, "test": 2}


def test_load_bundled_rejects_unknown_split() -> None:
    with pytest.raises(ValueError, match="unknown split 'dev'; choose from train, val, test"):
        load_bundled("dev")


@pytest.mark.slow
def test_rebuild_is_byte_identical(tmp_path: Path) -> None:
    built = build_bundle(tmp_path, BundleConfig())
    assert built == manifest()
    for name in built["files"]:
        assert (tmp_path / name).read_bytes() == (bundled_dir() / name).read_bytes()

"""Where a world model and nearest-neighbour retrieval are right on the bundled BFCL test
steps, and how far a perfect choice between them per step would go (README, "The default
model on the bundled test split"). Both predict every BFCL test step as `simworld eval`
does (JSON-canonical match, the same output schemas); the script prints each one's score,
the share of steps that at least one of them gets right (the ceiling of any router
between the two), and the split by whether the retrieved train call is the same call
(name and arguments) as the test step's.

    .venv/bin/python scripts/model_vs_retrieval.py [--model default|DIR]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from simworld.data.bundle import load_bundled
from simworld.eval.baselines import NearestNeighbour
from simworld.eval.predictors import ModelPredictor, StepRef
from simworld.eval.run import output_schemas
from simworld.eval.scoring import score
from simworld.worldmodel import load_world_model
from simworld.worldmodel.retrieval import queries, recorded_step


def same_call(nn: NearestNeighbour, ref: StepRef) -> bool:
    """Whether every call of the step retrieves a train call with its name and arguments."""
    episode, index = ref
    query = recorded_step(episode, index)
    found = nn.retriever.nearest_calls(episode.env, query.action, query.previous)
    wanted = queries(query.action)
    return len(found) == len(wanted) and all(
        hit is not None and queries(hit[0].action)[hit[1]] == want
        for hit, want in zip(found, wanted, strict=True)
    )


def line(name: str, model: Sequence[float], retrieval: Sequence[float]) -> str:
    n = len(model)
    either = sum(max(a, b) for a, b in zip(model, retrieval, strict=True))
    return (
        f"{name:<22} {n:>5} {sum(model) / n:>7.3f} {sum(retrieval) / n:>10.3f} {either / n:>7.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help="a checkpoint dir or 'default'")
    args = parser.parse_args()
    test = load_bundled("test", env="bfcl")
    train = load_bundled("train")
    refs: list[StepRef] = [(ep, i) for ep in test for i in range(len(ep.steps))]
    schemas, _ = output_schemas(train, test)
    nn = NearestNeighbour(train)
    model_rows = score(
        refs, ModelPredictor(load_world_model(args.model)).predict_steps(refs), schemas=schemas
    )
    nn_rows = score(refs, nn.predict_steps(refs), schemas=schemas)
    model = [float(r.metrics["json_canonical"] or 0.0) for r in model_rows]
    retrieval = [float(r.metrics["json_canonical"] or 0.0) for r in nn_rows]
    same = [same_call(nn, ref) for ref in refs]
    print(f"{'BFCL test steps':<22} {'steps':>5} {'model':>7} {'retrieval':>10} {'either':>7}")
    print(line("all", model, retrieval))
    for flag, name in ((True, "same call retrieved"), (False, "other call retrieved")):
        keep = [i for i, s in enumerate(same) if s is flag]
        print(line(name, [model[i] for i in keep], [retrieval[i] for i in keep]))


if __name__ == "__main__":
    main()

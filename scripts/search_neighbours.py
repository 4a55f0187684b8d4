"""How often the real top passage is among the answers of the k recorded searches nearest
to a held-out query (README, "Search"): the ceiling of a search simulator that is shown
k recorded searches as examples and picks the right one among their answers. For each
search of the first N test episodes, asked alone as the bench asks it (no previous
observation), the train searches are ranked by the example block's TF-IDF similarity
(`Retriever.neighbours`), and the script counts the searches whose real top
passage is the top passage of one of the k nearest, for k = 1, 3, 5 and 10.

    .venv/bin/python scripts/search_neighbours.py out/search/search_train.jsonl.gz \\
        out/search/search_test.jsonl.gz [--episodes 400]

k = 1 is what a lookup of the nearest recorded search returns.
"""

from __future__ import annotations

import argparse
import json

from simworld.data.formats import read_episodes
from simworld.data.records import Observation, ToolResultsObservation
from simworld.worldmodel.retrieval import Retriever, recorded_steps

KS = (1, 3, 5, 10)


def top_id(observation: Observation) -> str:
    assert isinstance(observation, ToolResultsObservation)
    hits = json.loads(observation.results[0].text)
    return str(hits[0]["id"]) if hits else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("train")
    parser.add_argument("test")
    parser.add_argument("--episodes", type=int, default=400, help="first N test episodes")
    args = parser.parse_args()
    train = read_episodes(args.train).episodes
    test = read_episodes(args.test).episodes[: args.episodes]
    memory = Retriever([r for ep in train for r in recorded_steps(ep)])
    found = dict.fromkeys(KS, 0)
    searches = 0
    for episode in test:
        for step in recorded_steps(episode):
            real = top_id(step.observation)
            found_steps = memory.neighbours(step.env, step.action, "", max(KS))
            near = [top_id(r.observation) for r in found_steps]
            searches += 1
            for k in KS:
                found[k] += real in near[:k]
    print(f"{searches} test searches ({len(test)} episodes), {len(memory.entries)} recorded")
    for k in KS:
        share = found[k] / searches
        print(f"real top passage among the {k:>2} nearest recorded answers: {share:.3f}")


if __name__ == "__main__":
    main()

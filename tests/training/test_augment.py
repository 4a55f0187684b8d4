"""Copy augmentation: which words count as names, how they are renamed, and that renamed
variants of real BFCL pairs stay true to their tool."""

from __future__ import annotations

import json
import random
import re

from simworld.data.bundle import load_bundled
from simworld.training.augment import (
    CopyAugment,
    Pair,
    copy_variants,
    fresh,
    names,
    rename,
    vocabulary,
    words,
)
from simworld.training.batching import Example
from simworld.training.data import to_examples
from simworld.worldmodel.context import Budget

CD_PROMPT = (
    '## ENVIRONMENT STATE\n{"root":{"alex":{"contents":{"documents":{}}}},"_cwd":"/alex"}\n\n'
    '## TOOL SCHEMAS\n{"tools":[{"name":"cd","input_schema":{"properties":{"folder":{}}}}]}\n\n'
    '## ACTION\n{"id":"call_0_1","name":"cd","arguments":{"folder":"documents"}}\n\n'
    "## PREDICTION\n"
)
CD_TARGET = (
    'call_0_1 ok {"current_working_directory": "documents"}\n'
    'patch [{"op":"replace","path":"/_cwd","value":"/alex/documents"}]'
)
CD_TOOLS = '## TOOL SCHEMAS\n{"tools":[{"name":"cd","input_schema":{"properties":{"folder":{}}}}]}'


def cd_pair(folder: str = "documents") -> Pair:
    ex = Example(CD_PROMPT.replace("documents", folder), CD_TARGET.replace("documents", folder))
    return Pair(ex, CD_TOOLS, "bfcl:cd", json.dumps([folder]))


def test_words_are_name_shaped() -> None:
    text = 'See "report.txt", then tail. ab x1 42 true USR_002-b. a.b'
    assert words(text, 3) == {"See", "report.txt", "then", "tail", "USR_002-b", "a.b"}
    assert words(text, 1) >= {"ab", "x1"} and "42" not in words(text, 1)  # a letter is needed


def test_names_are_what_the_target_copies_from_the_prompt() -> None:
    cfg = CopyAugment()
    # "documents", "alex", "_cwd" and the call id are copied, longest first; "cd",
    # "folder", "name" are the schema's words; "current_working_directory", "patch",
    # "replace" never occur in the prompt
    assert names(cd_pair(), set(), cfg) == ["documents", "call_0_1", "_cwd", "alex"]
    # the tool's vocabulary is never renamed
    assert names(cd_pair(), {"alex", "call_0_1", "_cwd"}, cfg) == ["documents"]


def test_vocabulary_is_what_most_of_a_tools_targets_say() -> None:
    pairs = [cd_pair(f"folder{i}x") for i in range(10)]
    vocab = vocabulary(pairs, CopyAugment(max_share=0.2))["bfcl:cd"]
    assert {"alex", "call_0_1", "current_working_directory", "patch"} <= vocab
    assert not any(w.startswith("folder") for w in vocab)  # each folder is one target in 10


def test_a_name_spelled_into_an_argument_is_kept() -> None:
    # find(name="report") answers with "report.txt" because of its spelling
    prompt = (
        '## ENVIRONMENT STATE\n{"report.txt":{},"notes.md":{}}\n\n'
        '## ACTION\n{"id":"c1","name":"find","arguments":{"name":"report"}}\n\n'
    )
    ex = Example(prompt, 'c1 ok {"matches": ["./report.txt", "./notes.md"]}')
    pair = Pair(ex, "", "bfcl:find", json.dumps(["report"]))
    assert names(pair, set(), CopyAugment()) == ["notes.md"]


def test_fresh_names_keep_their_shape() -> None:
    rng = random.Random(0)
    for name in ("documents", "report.txt", "USR002", "tech_guru", "Ab-9z.csv"):
        new = fresh(name, rng, {name})
        assert new != name and len(new) == len(name) and new[0] == name[0]
        for old, c in zip(name, new, strict=True):
            assert (old.islower(), old.isupper(), old.isdigit()) == (
                c.islower(),
                c.isupper(),
                c.isdigit(),
            )
            assert old.isalnum() or c == old
    assert fresh("report.txt", rng, set()).endswith(".txt")


def test_rename_replaces_whole_words_everywhere_and_nothing_else() -> None:
    pair = cd_pair()
    out = rename(pair, ["documents"], random.Random(1))
    new = re.search(r'"folder":"(\w+)"', out.prompt)
    assert new is not None and new.group(1) != "documents"
    folder = new.group(1)
    assert out.target == CD_TARGET.replace("documents", folder)
    assert out.prompt == CD_PROMPT.replace("documents", folder)
    # whole words only: "docs" is not a part of "documents" to be renamed
    ex = Example('{"docs": 1, "documents": 2}', '"documents"')
    out = rename(Pair(ex, "", "k"), ["documents"], random.Random(1))
    assert out.prompt.startswith('{"docs": 1, "d') and "documents" not in out.prompt


def test_variants_are_seeded_counted_and_skip_text_actions() -> None:
    pairs = [cd_pair(f"folder{i}x") for i in range(10)]
    pairs.append(Pair(Example("SFFF\n## ACTION\nDown", "SFFF"), "", ""))  # a text action
    cfg = CopyAugment(copies=2, seed=3)
    first, report = copy_variants(pairs, cfg)
    again, _ = copy_variants(pairs, cfg)
    assert first == again and len(first) == 20  # two per renamable pair, the same each run
    assert report.as_dict() == {"pairs": 10, "renamable": 10, "variants": 20, "over_budget": 0}
    assert len({v.target for v in first}) == 20
    tight, report = copy_variants(pairs, cfg, fits=lambda ex: False)
    assert tight == [] and report.over_budget == 20


def test_renamed_bfcl_pairs_read_back_and_keep_their_copies() -> None:
    episodes = load_bundled("val", env="bfcl")[:12]
    budget = Budget(total=384)
    plain, _ = to_examples(episodes, budget, 112)
    both, report = to_examples(episodes, budget, 112, augment=CopyAugment(copies=1))
    assert both[: len(plain)] == plain  # the originals first, unchanged
    variants = both[len(plain) :]
    assert report.augment is not None and report.augment.variants == len(variants) > 20
    for ex in variants:
        assert ex.prompt.endswith("## PREDICTION\n")
        lines = ex.target.split("\n")
        assert lines[-1].startswith("patch ")
        json.loads(lines[-1].removeprefix("patch "))  # the patch is still JSON
        call_id = lines[0].split(" ", 1)[0]
        assert f'"id":"{call_id}"' in ex.prompt  # the renamed id is the action's
        for line in lines[:-1]:  # every result line still reads
            assert re.match(r"\S+ (ok|error)( |\Z)", line), line

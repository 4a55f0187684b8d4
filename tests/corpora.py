"""A small passage corpus for search tests: 60 passages whose words are chosen so that
BM25 scores can be reasoned about by hand (alpha<i> is in passage i only, beta<j> in every
fifth, gamma<k> in every third, oak in all)."""

from __future__ import annotations

import json
from pathlib import Path


def corpus_file(tmp_path: Path) -> Path:
    rows = [
        {"id": f"d{i}", "title": f"Topic {i}", "text": f"alpha{i} beta{i % 5} gamma{i % 3} oak"}
        for i in range(60)
    ]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path

"""A searchable passage corpus: loading (the pydoc demo corpus or a user's JSONL), cutting
documents into short passages, a BM25 index, and a seeded query set split by query.

    from simworld.data.search_corpus import load_corpus, BM25Index, make_needs
    corpus = load_corpus(None)                   # the demo: Python's own pydoc_data.topics
    corpus = load_corpus("docs.jsonl")           # one {"id"?, "title"?, "contents"|"text"} a line
    index = BM25Index(corpus.passages)
    hits = index.search("for loop else clause", top_k=3)   # [Hit(passage, score), ...]
    needs = make_needs(corpus, index, split="test")        # the held-out information needs

Decisions:
- Demo corpus: the topics of the Python language reference that every CPython ships in
  `pydoc_data.topics` (the text `help("for")` shows); the title is a topic's first line.
  The text differs between Python versions, so `Corpus.version` names the one it came from.
- User corpus: JSONL, one document a line: `contents` (or `text`), optional `id` (default
  the line number) and `title`. A `contents` without a title whose first line is a quoted
  title (Search-R1's `"Title"\\ntext` convention) gives that line as the title. A bad line
  raises `CorpusError` naming the file and line; duplicate ids are refused.
- Passages: a document's whitespace collapsed, then sentences packed greedily into passages
  of at most `words` words (default 32, so that three passages fit the default world-model
  recipe's 112-token target); a sentence longer than that is cut at word boundaries. A
  passage keeps its document's title; its id is `<document id>-<n>`, n counting from 0.
- BM25: Okapi BM25 (k1 1.2, b 0.75, idf log(1 + (N - df + 0.5) / (df + 0.5))) over lower-
  case word tokens of the title and the text, a short English stopword list left out.
  Equal scores keep corpus order, so results are deterministic. Scores are rounded to 2
  decimals.
- Query set: each passage is one information need; its candidate queries come from
  templates over the title words and the passage's most salient terms (highest tf-idf,
  ties by first occurrence). A query's split (train 80 %, val 10 %, test 10 %) is a hash of
  its normalized text alone, so splits are disjoint by query whatever the seed; a need
  keeps the candidates of the asked split (needs without any are left out of that split).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from simworld.data.envs.seeding import derive_seed

DEFAULT_WORDS = 40
SPLITS = ("train", "val", "test")
_SPLIT_SHARES = (80, 10, 10)  # percent of queries per split
K1, B = 1.2, 0.75
_WORD = re.compile(r"[a-z0-9_]+")
_SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+")
_UNDERLINE = re.compile(r"^\s*([*=\-~^\"#+])\1{2,}\s*$")
_STOP = """a an and are as at be by can do does for from has have how if in into is it its of
on or that the their then there these this to was what when where which while who why will
with"""
STOPWORDS = frozenset(_STOP.split())


class CorpusError(ValueError):
    """A corpus file that cannot be read: `where` is "file:line"."""

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """The passage as Search-R1 corpora store it: the quoted title line, then the text."""
        return f'"{self.title}"\n{self.text}'


@dataclass(frozen=True)
class Corpus:
    """Passages in corpus order; `name` and `version` say where they came from."""

    name: str
    version: str
    passages: tuple[Passage, ...]

    def __post_init__(self) -> None:
        if not self.passages:
            raise ValueError(f"corpus {self.name!r} has no passages")


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float


# ---------------------------------------------------------------------------- loading


def load_corpus(path: str | Path | None = None, words: int = DEFAULT_WORDS) -> Corpus:
    """The corpus in JSONL file `path`, or the pydoc demo corpus when `path` is None."""
    if words < 8:
        raise ValueError(f"words is a passage's length limit, at least 8; got {words}")
    if path is None:
        return pydoc_corpus(words)
    path = Path(path)
    passages: list[Passage] = []
    seen: set[str] = set()
    for doc_id, title, text in _jsonl_documents(path):
        if doc_id in seen:
            raise CorpusError(f"{path}", f"document id {doc_id!r} occurs twice")
        seen.add(doc_id)
        passages.extend(_passages(doc_id, title, text, words))
    if not passages:
        raise CorpusError(f"{path}", "no document with any text")
    return Corpus(name=path.name, version=f"{path.name} ({words} words)", passages=tuple(passages))


def pydoc_corpus(words: int = DEFAULT_WORDS) -> Corpus:
    """Python's pydoc topics cut into passages (see the module docstring)."""
    from pydoc_data.topics import topics

    passages: list[Passage] = []
    for key in sorted(topics):
        lines = topics[key].strip().splitlines()
        title = lines[0].strip() if lines else key
        passages.extend(_passages(key, title, "\n".join(lines[1:]), words))
    python = ".".join(str(n) for n in sys.version_info[:3])
    return Corpus("pydoc", f"pydoc_data.topics (Python {python}, {words} words)", tuple(passages))


def _jsonl_documents(path: Path) -> Iterator[tuple[str, str, str]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise CorpusError(str(path), f"cannot be read: {exc}") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(where, f"not JSON ({exc.msg} at column {exc.colno})") from exc
        if not isinstance(row, dict):
            raise CorpusError(where, "expected a JSON object with contents or text")
        text = row.get("contents", row.get("text"))
        if not isinstance(text, str) or not text.strip():
            raise CorpusError(where, 'expected a non-empty string "contents" (or "text")')
        doc_id, title = row.get("id", str(number)), row.get("title")
        if not isinstance(doc_id, str | int) or isinstance(doc_id, bool):
            raise CorpusError(where, f'"id" must be a string or an integer, got {doc_id!r}')
        if title is None and "contents" in row:
            title, text = _title_line(text)
        if not isinstance(title, str | None):
            raise CorpusError(where, f'"title" must be a string, got {title!r}')
        yield str(doc_id), (title or "").strip(), text


def _title_line(contents: str) -> tuple[str, str]:
    """Search-R1's `"Title"\\ntext` split into (title, text); ("", contents) otherwise."""
    head, sep, rest = contents.partition("\n")
    head = head.strip()
    if sep and len(head) >= 2 and head[0] == head[-1] == '"':
        return head[1:-1], rest
    return "", contents


def _passages(doc_id: str, title: str, text: str, words: int) -> list[Passage]:
    lines = [line for line in text.splitlines() if not _UNDERLINE.match(line)]
    flat = " ".join(" ".join(lines).split())
    chunks = cut_words(flat, words)
    return [Passage(f"{doc_id}-{n}", title, chunk) for n, chunk in enumerate(chunks)]


def cut_words(text: str, words: int) -> list[str]:
    """`text` as chunks of at most `words` words: whole sentences packed greedily, a longer
    sentence cut at word boundaries."""
    pieces: list[list[str]] = []
    for sentence in _SENTENCE_END.split(text):
        tokens = sentence.split()
        while len(tokens) > words:
            pieces.append(tokens[:words])
            tokens = tokens[words:]
        if tokens:
            pieces.append(tokens)
    chunks: list[list[str]] = []
    for piece in pieces:
        if chunks and len(chunks[-1]) + len(piece) <= words:
            chunks[-1].extend(piece)
        else:
            chunks.append(list(piece))
    return [" ".join(chunk) for chunk in chunks]


# ---------------------------------------------------------------------------- BM25


def terms(text: str) -> list[str]:
    """Lower-case word tokens without stopwords: what the index and the queries match on."""
    return [t for t in _WORD.findall(text.lower()) if t not in STOPWORDS]


class BM25Index:
    """Okapi BM25 over `passages` (see the module docstring); immutable once built."""

    def __init__(self, passages: Sequence[Passage], k1: float = K1, b: float = B) -> None:
        if not passages:
            raise ValueError("a BM25 index needs at least one passage")
        self.passages = tuple(passages)
        self.k1, self.b = k1, b
        self._postings: dict[str, list[tuple[int, int]]] = {}  # term -> [(passage, tf)]
        self._lengths: list[int] = []
        for i, passage in enumerate(self.passages):
            counts = Counter(terms(f"{passage.title} {passage.text}"))
            self._lengths.append(sum(counts.values()))
            for term, tf in counts.items():
                self._postings.setdefault(term, []).append((i, tf))
        self._average = max(sum(self._lengths) / len(self._lengths), 1e-9)
        n = len(self.passages)
        self._idf = {
            term: math.log(1.0 + (n - len(p) + 0.5) / (len(p) + 0.5))
            for term, p in self._postings.items()
        }

    def idf(self, term: str) -> float:
        """The term's idf (0.0 for a term no passage has)."""
        return self._idf.get(term, 0.0)

    def postings(self, query: str) -> int:
        """How many (passage, term) postings a search for `query` reads: its cost in work."""
        return sum(len(self._postings.get(t, ())) for t in set(terms(query)))

    def score(self, query: str, passage: int) -> float:
        """BM25 of the passage at index `passage` alone for `query` (rounded as `search`
        rounds): one passage scored, nothing ranked."""
        counts = Counter(terms(f"{self.passages[passage].title} {self.passages[passage].text}"))
        total = 0.0
        for term, qtf in Counter(terms(query)).items():
            tf = counts.get(term, 0)
            if tf:
                total += self._term_score(term, qtf, passage, tf)
        return round(total, 2)

    def _term_score(self, term: str, qtf: int, passage: int, tf: int) -> float:
        """One query term's BM25 contribution to the passage at index `passage`."""
        norm = self.k1 * (1.0 - self.b + self.b * self._lengths[passage] / self._average)
        return qtf * self._idf[term] * tf * (self.k1 + 1.0) / (tf + norm)

    def search(self, query: str, top_k: int) -> list[Hit]:
        """The `top_k` best passages for `query` with a positive score, best first (equal
        scores in corpus order)."""
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        scores: dict[int, float] = {}
        for term, qtf in Counter(terms(query)).items():
            idf = self._idf.get(term)
            if idf is None:
                continue
            for i, tf in self._postings[term]:
                scores[i] = scores.get(i, 0.0) + self._term_score(term, qtf, i, tf)
        best = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:top_k]
        return [Hit(self.passages[i], round(score, 2)) for i, score in best if score > 0]


# ---------------------------------------------------------------------------- queries


@dataclass(frozen=True)
class Need:
    """One information need: the passage it is about and its queries (one split's)."""

    passage: Passage
    queries: tuple[str, ...]


def split_of(query: str) -> str:
    """The split a query belongs to: a stable hash of its normalized text."""
    bucket = derive_seed("search-split", normalize(query)) % 100
    if bucket < _SPLIT_SHARES[0]:
        return SPLITS[0]
    return SPLITS[1] if bucket < _SPLIT_SHARES[0] + _SPLIT_SHARES[1] else SPLITS[2]


def normalize(query: str) -> str:
    return " ".join(_WORD.findall(query.lower()))


def salient_terms(passage: Passage, index: BM25Index, count: int = 4) -> list[str]:
    """The passage's `count` terms of highest tf-idf (ties: first occurrence)."""
    found = terms(passage.text)
    tf = Counter(found)
    first = {t: i for i, t in reversed(list(enumerate(found)))}
    title = set(terms(passage.title))
    ranked = sorted(
        (t for t in tf if t not in title and len(t) > 2 and not t.isdigit()),
        key=lambda t: (-tf[t] * index.idf(t), first[t]),
    )
    return ranked[:count]


def candidate_queries(passage: Passage, index: BM25Index) -> list[str]:
    """The templated queries for one need, deduplicated by normalized text, in order."""
    title = " ".join(terms(passage.title)[:4]) or passage.title.lower()
    s = salient_terms(passage, index)
    forms = [title]
    if len(s) >= 2:
        forms += [f"{title} {s[0]} {s[1]}", f"what is {s[0]} in {title}", f"{s[0]} {s[1]}"]
    if len(s) >= 4:
        forms += [f"how does {s[2]} {s[3]} work", f"{title} {s[2]} {s[3]}"]
    kept: dict[str, str] = {}
    for form in forms:
        kept.setdefault(normalize(form), form)
    return [q for q in kept.values() if terms(q)]


def make_needs(corpus: Corpus, index: BM25Index, split: str) -> list[Need]:
    """Every need of `split` in corpus order, each with that split's candidate queries."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
    needs = []
    for passage in corpus.passages:
        mine = tuple(q for q in candidate_queries(passage, index) if split_of(q) == split)
        if mine:
            needs.append(Need(passage, mine))
    return needs


def query_set(needs: Iterable[Need]) -> list[str]:
    """The distinct queries of `needs`, in order."""
    return list(dict.fromkeys(q for need in needs for q in need.queries))


__all__ = [
    "DEFAULT_WORDS",
    "SPLITS",
    "STOPWORDS",
    "BM25Index",
    "Corpus",
    "CorpusError",
    "Hit",
    "Need",
    "Passage",
    "candidate_queries",
    "cut_words",
    "load_corpus",
    "make_needs",
    "normalize",
    "pydoc_corpus",
    "query_set",
    "salient_terms",
    "split_of",
    "terms",
]

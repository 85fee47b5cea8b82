"""Write federated StackOverflow look-alike files in TFF's layouts, from explicit examples or a synthetic spec.

Layouts as in :mod:`fedpub.data.stackoverflow` (TFF ``simulation/datasets/stackoverflow.py`` and
``sql_client_data_utils.save_to_sql_client_data``; ``shared/reference/datasets.md`` §2 and §7):

- HDF5: ``/examples/<client_id>/{creation_date,score,tags,title,tokens,type}``, strings as variable-length
  strings marked ASCII (``h5py.string_dtype('ascii')``, read back as bytes), ``score`` int64. Written with h5py's
  low-level API and compact storage (small datasets inside their object headers): TFF's file has 342,477 client
  groups of six datasets each, so the per-object overhead of h5py's high-level API would dominate.
- SQLite: the tables of TFF's writer, one ``tf.train.Example`` per row
  (:func:`fedpub.data.tf_example.encode_example`), one ``client_metadata`` row per (client, split), and the indexes
  TFF's tests add unless ``index=False``; a name ending in ``.lzma`` is compressed (LZMA_Alone container).
- ``stackoverflow.word_count`` (``word count`` lines, in the given order) and ``stackoverflow.tag_count`` (one JSON
  object, in the given order: deliberately not sorted, so a reader must sort).

Strings are written as the bytes :func:`~fedpub.data.stackoverflow.encode_text` gives (UTF-8, and a lone surrogate
U+DC80..U+DCFF as the byte it stands for), so text that is not valid UTF-8 can be written, and reads back as the
same strings.

:func:`edge_case_dataset` gives explicit clients with the cases a reader and the task views must handle;
:class:`SyntheticStackOverflowSpec` describes deterministic synthetic data, generated in chunks with numpy
(:func:`synthetic_columns`) and written by :func:`write_synthetic_stackoverflow` (hundreds of thousands of clients
in minutes; see ``simulations/benchmarks/stackoverflow_scale.py``). Every file is written under a temporary name and
renamed into place when complete.
"""

from __future__ import annotations

import json
import lzma
import os
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import h5py
import numpy as np
from scipy.stats import spearmanr

from fedpub.atomic import atomic_path, write_text_atomic
from fedpub.data.download import CHUNK
from fedpub.data.emnist_writers import SQLITE_DDL, SQLITE_INDEXES
from fedpub.data.generated import generation_lock, refuse_other_spec
from fedpub.data.stackoverflow import (
    FIELDS,
    H5_FILES,
    SPLITS,
    SQLITE_FILE,
    TAG_COUNT_FILE,
    WORD_COUNT_FILE,
    Columns,
    StackOverflowExample,
    columns_to_examples,
    encode_text,
)
from fedpub.data.tf_example import single_value_encoder
from fedpub.seeding import numpy_generator

Clients = Mapping[str, Sequence[StackOverflowExample]]
"""``{client_id: [example, ...]}``; clients are written in mapping order."""

_STRING_DTYPE = h5py.string_dtype("ascii")
_COMPACT_LIMIT = 48 * 1024  # HDF5 compact datasets must stay under 64 KiB (a vlen string takes 16 bytes)
_CHUNK_CLIENTS = 20_000  # synthetic clients generated at once (part of the seeding: changing it changes the data)


def examples_to_columns(client_id: str, examples: Sequence[StackOverflowExample]) -> Columns:
    """``{field: values}`` of one client's examples, checked: six fields, ``score`` int, the rest ``str`` that
    :func:`~fedpub.data.stackoverflow.encode_text` can store."""
    columns: Columns = {name: [] for name in FIELDS}
    for i, example in enumerate(examples):
        if set(example) != set(FIELDS):
            raise ValueError(f"client {client_id!r}, example {i}: fields {sorted(example)}, expected {list(FIELDS)}")
        for name in FIELDS:
            value = example[name]  # type: ignore[literal-required]
            if name == "score" and (not isinstance(value, int) or isinstance(value, bool)):
                raise ValueError(f"client {client_id!r}, example {i}: score {value!r} is not an int")
            if name != "score":
                if not isinstance(value, str):
                    raise ValueError(f"client {client_id!r}, example {i}: {name} {value!r} is not a str")
                try:
                    encode_text(value)
                except UnicodeEncodeError as exc:
                    where = f"client {client_id!r}, example {i}"
                    raise ValueError(f"{where}: {name} {value!r} has no bytes: {exc}") from None
            columns[name].append(value)
    return columns


def _check_client_id(client_id: object) -> None:
    if not isinstance(client_id, str) or not client_id or "/" in client_id or not client_id.isascii():
        raise ValueError(f"client ids must be non-empty ASCII strings without '/', got {client_id!r}")


def _write_h5(path: Path, clients: Iterable[tuple[str, Columns]]) -> Path:
    string_type = h5py.h5t.py_create(_STRING_DTYPE, logical=True)
    compact = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    compact.set_layout(h5py.h5d.COMPACT)
    contiguous = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        examples = f.create_group("examples")
        for client_id, columns in clients:
            _check_client_id(client_id)
            group = h5py.h5g.create(examples.id, client_id.encode())
            n = len(columns["tokens"])
            space = h5py.h5s.create_simple((n,))
            layout = compact if 0 < n * 16 <= _COMPACT_LIMIT else contiguous
            for name in FIELDS:
                if name == "score":
                    data, kind = np.asarray(columns[name], dtype=np.int64), h5py.h5t.STD_I64LE
                else:
                    data = np.array([encode_text(s) for s in columns[name]], dtype=_STRING_DTYPE)
                    kind = string_type
                dataset = h5py.h5d.create(group, name.encode(), kind, space, dcpl=layout)
                if n:
                    dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, data)
    return path


def _checked(clients: Clients) -> Iterator[tuple[str, Columns]]:
    for client_id, examples in clients.items():
        yield client_id, examples_to_columns(client_id, examples)


def write_stackoverflow_h5(path: str | os.PathLike[str], clients: Clients) -> Path:
    """Write one split as a TFF StackOverflow HDF5 file (e.g. ``stackoverflow_train.h5``)."""
    return _write_h5(Path(path), list(_checked(clients)))


_encode_example = single_value_encoder({name: "int64" if name == "score" else "bytes" for name in FIELDS})
_SCORE = FIELDS.index("score")


def _example_proto(row: Sequence[str | int]) -> bytes:
    """One example (values in ``FIELDS`` order) as TFF's proto: one bytes value per string, one int64 score."""
    return _encode_example([value if i == _SCORE else encode_text(value) for i, value in enumerate(row)])


_ROWS_AT_ONCE = 50_000
"""Example rows inserted by one ``executemany``."""


def _write_sqlite(path: Path, splits: Mapping[str, Iterable[tuple[str, Columns]]], index: bool) -> None:
    """The tables, then the rows in batches, then the indexes (one sort each, not a B-tree insert per row). ``path``
    is a temporary file renamed into place when complete, so SQLite keeps no journal and never syncs."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA journal_mode = OFF")
        connection.execute("PRAGMA synchronous = OFF")
        with connection:
            for statement in SQLITE_DDL:
                connection.execute(statement)
            examples: list[tuple[str, str, bytes]] = []
            metadata: list[tuple[str, str, int]] = []
            for split, clients in splits.items():
                for client_id, columns in clients:
                    _check_client_id(client_id)
                    examples += ((split, client_id, _example_proto(row)) for row in zip(*(columns[f] for f in FIELDS)))
                    metadata.append((client_id, split, len(columns["tokens"])))
                    if len(examples) >= _ROWS_AT_ONCE:
                        _insert(connection, examples, metadata)
            _insert(connection, examples, metadata)
            for statement in SQLITE_INDEXES if index else ():
                connection.execute(statement)
    finally:
        connection.close()


def _insert(connection: sqlite3.Connection, examples: list[tuple[str, str, bytes]],
            metadata: list[tuple[str, str, int]]) -> None:
    """Insert the rows gathered and empty both lists."""
    connection.executemany(
        "INSERT INTO examples (split_name, client_id, serialized_example_proto) VALUES (?, ?, ?)", examples
    )
    connection.executemany(
        "INSERT INTO client_metadata (client_id, split_name, num_examples) VALUES (?, ?, ?)", metadata
    )
    examples.clear()
    metadata.clear()


def _compress(source: Path, target: Path) -> None:
    compressor = lzma.LZMACompressor(format=lzma.FORMAT_ALONE)
    with open(source, "rb") as src, atomic_path(target) as tmp, open(tmp, "wb") as dst:
        while chunk := src.read(CHUNK):
            dst.write(compressor.compress(chunk))
        dst.write(compressor.flush())


def _write_sqlite_file(path: Path, splits: Mapping[str, Iterable[tuple[str, Columns]]], index: bool) -> Path:
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise ValueError(f"unknown StackOverflow split(s) {unknown}; allowed: {', '.join(SPLITS)}")
    if not path.name.endswith(".lzma"):
        with atomic_path(path) as tmp:
            _write_sqlite(tmp, splits, index)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        plain = Path(scratch) / path.name.removesuffix(".lzma")
        _write_sqlite(plain, splits, index)
        _compress(plain, path)
    return path


def write_stackoverflow_sqlite(
    path: str | os.PathLike[str], splits: Mapping[str, Clients], *, index: bool = True
) -> Path:
    """Write ``{split: clients}`` as TFF's ``stackoverflow.sqlite``; a name ending in ``.lzma`` is compressed.

    Split names must be TFF's (``train``, ``heldout``, ``test``). ``index=False`` leaves out the indexes TFF's
    tests add: the tables of TFF's writer alone, as published.
    """
    return _write_sqlite_file(Path(path), {split: _checked(clients) for split, clients in splits.items()}, index)


def write_word_count(path: str | os.PathLike[str], counts: Mapping[str, int]) -> Path:
    """Write ``stackoverflow.word_count``: one ``word count`` line per entry, in mapping order."""
    for word, count in counts.items():
        if not word or any(c.isspace() for c in word) or not isinstance(count, int):
            raise ValueError(f"word_count entries are (word without whitespace, int), got ({word!r}, {count!r})")
    with atomic_path(path) as tmp:
        tmp.write_text("".join(f"{word} {count}\n" for word, count in counts.items()), encoding="utf-8")
    return Path(path)


def write_tag_count(path: str | os.PathLike[str], counts: Mapping[str, int]) -> Path:
    """Write ``stackoverflow.tag_count``: one JSON object ``{tag: count}`` in mapping order (not sorted)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(dict(counts)), encoding="utf-8")
    return Path(path)


def _example(
    tokens: str, *, title: str = "", tags: str = "", score: int = 0, kind: str = "question"
) -> StackOverflowExample:
    return StackOverflowExample(
        creation_date="2010-01-08 09:34:05 UTC", score=score, tags=tags, title=title, tokens=tokens, type=kind
    )


@dataclass(frozen=True)
class EdgeCaseData:
    """Explicit clients with the cases readers and task views must handle, and matching vocabulary files."""

    clients: dict[str, list[StackOverflowExample]]
    word_counts: dict[str, int]
    tag_counts: dict[str, int]
    max_elements: int
    """A cap below the size of client ``00000042`` (and above every other client's)."""


def edge_case_dataset() -> EdgeCaseData:
    """A small dataset covering the edge cases of datasets.md §7.

    Client ids are inserted unsorted. ``00000007``: a question with a negative score, tags with spaces
    (``vb . net``), ``<URL>``, a fractional-second date; an answer carrying its question's title and tags.
    ``00000003``: an empty sentence and title (no tag), an all-OOV sentence (only an OOV tag), a sentence of 25
    tokens, and tokens with a doubled space (an empty piece for next-word prediction). ``00000042``: 7 examples,
    above ``max_elements`` = 5. Tag counts are deliberately unsorted and have a tie (``vb . net``, ``c#``).
    """
    long_sentence = " ".join(["the", "list", "is", "a", "python", "list"] * 4 + ["."])
    clients: dict[str, list[StackOverflowExample]] = {
        "00000007": [
            StackOverflowExample(
                creation_date="2008-08-10 08:28:52.1 UTC",
                score=-3,
                tags="vb . net|c#",
                title="how to use a list in vb . net",
                tokens="see <URL> for the list .",
                type="question",
            ),
            _example(
                "use a dictionary , not a list .", title="how to use a list in vb . net", tags="vb . net|c#",
                score=12, kind="answer",
            ),
        ],
        "00000003": [
            _example("", title="", tags=""),
            _example("zzyzx qwertyuiop", title="", tags="fortran-77"),
            _example(long_sentence, title="python list", tags="python|java|python-2.7", score=1),
            _example("a  list", title="list", tags="python"),
        ],
        "00000042": [
            _example(" ".join(["python", "error", str(i)] + ["list"] * i), title="error", tags="python|java", score=i)
            for i in range(7)
        ],
    }
    word_counts = {
        ".": 90, "the": 80, "a": 70, "list": 60, "python": 50, "to": 40, "use": 30, "in": 20, "how": 15,
        "vb": 12, "net": 11, "<URL>": 10, "error": 9, "is": 8, "for": 7, "see": 6, ",": 5, "not": 4, "java": 3,
    }
    tag_counts = {"java": 5, "vb . net": 7, "fortran-77": 1, "python": 9, "c#": 7, "python-2.7": 2}
    return EdgeCaseData(clients=clients, word_counts=word_counts, tag_counts=tag_counts, max_elements=5)


SIDE_INFORMATION = ("anti_aligned", "aligned")
"""Where :class:`SyntheticStackOverflowSpec` puts the tags' topic words among the words."""
BACKGROUNDS = ("zipf", "wordfreq")
"""The background words' frequency profile: a Zipf law, or English's (the ``wordfreq`` package)."""
WORDFREQ_EXTRA = "pip install 'fedpub[reproductions]' (or pip install wordfreq)"


@dataclass(frozen=True)
class SyntheticStackOverflowSpec:
    """Deterministic synthetic StackOverflow data: the same spec always gives the same files.

    Client ids are distinct 8-digit strings. Every client has a favourite tag; each of an example's two tag draws
    is that tag with probability ``favourite_share`` and otherwise another one (Zipf-distributed ranks over
    ``num_tags``, as the favourite; more than the 500 of the task makes some OOV).
    Each token or title word is, with probability ``topic_share``, one of the ``topic_words`` topic words of the
    example's first tag (uniformly), and otherwise a background word. Word ``r`` is ``w<r>``, tag ``t`` is
    ``tag<t>``. The background draws word ranks from a Zipf law over its words (``background: zipf``) or from
    the frequencies of the as many most frequent English words (``wordfreq``: a real profile, the frequent words
    stop-word-like; needs the ``wordfreq`` package).

    ``side_information`` says whether a word's frequency tells whether it carries the label, the assumption of
    AdaDPS's token-frequency side information (rare words are the informative ones):

    - ``anti_aligned`` (the default, and the only construction before fedpub issue 36): tag ``t``'s topic words
      are the background's words of ranks ``topic_rank_offset + topic_words * t`` onwards (modulo ``num_words``):
      at 0 the popular tags' topic words are frequent background words too; a large offset makes them words the
      background seldom gives, but the topic draw still makes the popular tags' topic words frequent. The words
      that carry the label are the frequent ones (:func:`count_share_spearman` is positive).
    - ``aligned``: the topic words are ``num_tags * topic_words`` words of their own, the last ranks, that the
      background never gives (it draws from the ``num_words - num_tags * topic_words`` first ranks): the frequent
      words are label-free background and the label is carried by words that are each rarer the more topic words
      a tag has (as on StackOverflow, where stop-words are frequent and ``django`` is rarer and carries the tag).
      ``background_size`` (0: all of them) keeps the background to English's that many most frequent words, the
      ranks between them and the topic words never drawn: few topic words a tag that are still rarer than the
      background's stop-word-like words.

    ``stackoverflow.word_count`` lists the counts actually drawn (:func:`synthetic_counts`).
    """

    num_clients: int = 1_000
    min_examples: int = 1
    max_examples: int = 3
    num_words: int = 12_000
    num_tags: int = 600
    max_tokens: int = 30
    max_title_words: int = 8
    topic_rank_offset: int = 0
    seed: int = 0
    side_information: str = "anti_aligned"
    background: str = "zipf"
    topic_words: int = 7
    topic_share: float = 0.3
    background_size: int = 0
    favourite_share: float = 0.7

    def __post_init__(self) -> None:
        if not 1 <= self.num_clients <= 10_000_000:
            raise ValueError(f"num_clients must be in [1, 10000000], got {self.num_clients}")
        if not 0 <= self.min_examples <= self.max_examples:
            raise ValueError(f"need 0 <= min_examples <= max_examples, got {self.min_examples}, {self.max_examples}")
        for name in ("num_words", "num_tags", "max_tokens", "topic_words"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_title_words", "topic_rank_offset"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("topic_share", "favourite_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.side_information not in SIDE_INFORMATION:
            raise ValueError(f"side_information must be one of {', '.join(SIDE_INFORMATION)}, "
                             f"got {self.side_information!r}")
        if self.background not in BACKGROUNDS:
            raise ValueError(f"background must be one of {', '.join(BACKGROUNDS)}, got {self.background!r}")
        if self.side_information == "aligned":
            if self.topic_rank_offset:
                raise ValueError(f"topic_rank_offset {self.topic_rank_offset} places anti_aligned topic words; "
                                 "aligned topic words are words of their own: leave it 0")
            if self.num_tags * self.topic_words >= self.num_words:
                raise ValueError(f"aligned: num_tags * topic_words ({self.num_tags} * {self.topic_words}) topic "
                                 f"words leave no background words of num_words {self.num_words}; raise num_words")
            if not 0 <= self.background_size <= self.first_topic_word:
                raise ValueError(f"aligned: background_size must be in [0, {self.first_topic_word}] (the words the "
                                 f"topic words leave), got {self.background_size}")
        elif self.background_size:
            raise ValueError(f"background_size {self.background_size} sizes the aligned background; anti_aligned "
                             "draws from every word: leave it 0")
        if self.background == "wordfreq":
            _wordfreq()

    def identity(self) -> dict[str, Any]:
        """The fields that name this spec's data in the generated folder's marker: every field, less those added by
        fedpub issue 36 while they keep their defaults (the data they give is the data before them, so a folder
        generated then is that spec's data still)."""
        defaults = {f.name: f.default for f in fields(self)}
        return {name: value for name, value in asdict(self).items()
                if name not in _ADDED_IN_ISSUE_36 or value != defaults[name]}

    @property
    def background_words(self) -> int:
        """How many words the background draws from (the first ranks)."""
        return (self.background_size or self.first_topic_word) if self.side_information == "aligned" else self.num_words

    @property
    def first_topic_word(self) -> int:
        """The rank of tag 0's first topic word (aligned: the last ``num_tags * topic_words`` ranks are topic
        words; anti_aligned: ``topic_rank_offset``)."""
        return self.num_words - self.num_tags * self.topic_words if self.side_information == "aligned" \
            else self.topic_rank_offset


_ADDED_IN_ISSUE_36 = ("side_information", "background", "topic_words", "topic_share", "background_size",
                      "favourite_share")
"""The spec fields fedpub issue 36 added (:meth:`SyntheticStackOverflowSpec.identity`)."""


def _wordfreq() -> Any:
    """The ``wordfreq`` module, or a refusal naming the extra that installs it."""
    try:
        import wordfreq
    except ImportError:
        raise ValueError(f"background 'wordfreq' (English word frequencies) needs the wordfreq package: "
                         f"{WORDFREQ_EXTRA}; or set background: zipf") from None
    return wordfreq


def _wordfreq_version() -> str:
    """The installed ``wordfreq``'s version (its frequencies are part of the generated data)."""
    _wordfreq()
    return metadata.version("wordfreq")


def _wordfreq_cdf(n: int) -> np.ndarray:
    """The cumulative frequencies of the ``n`` most frequent English words (``wordfreq``), normalised to end at 1."""
    wordfreq = _wordfreq()
    words = wordfreq.top_n_list("en", n)
    if len(words) < n:
        raise ValueError(f"background 'wordfreq' has {len(words)} English words, fewer than the {n} background "
                         "words asked for; lower num_words or use background: zipf")
    cdf = np.cumsum([wordfreq.word_frequency(word, "en") for word in words])
    return cdf / cdf[-1]


def _zipf_ranks(rng: np.random.Generator, size: int | tuple[int, ...], n: int) -> np.ndarray:
    """Ranks in [0, n) with probability about proportional to 1/(rank + 1) (inverse CDF of a log-uniform)."""
    return np.minimum(np.exp(rng.random(size) * np.log(n + 1)).astype(np.int64) - 1, n - 1)


def _join(words: np.ndarray, lengths: np.ndarray) -> list[str]:
    ends = np.cumsum(lengths)
    flat = words.tolist()
    return [" ".join(flat[end - length : end]) for end, length in zip(ends.tolist(), lengths.tolist())]


@dataclass(frozen=True)
class _Chunk:
    """The draws of a chunk of clients: their ids and example counts, each example's two tags, each text's
    length (token sentence then title, per example), each word's rank and whether the topic draw gave it."""

    ids: np.ndarray
    sizes: np.ndarray
    tag_ids: np.ndarray
    lengths: np.ndarray
    ranks: np.ndarray
    topical: np.ndarray
    rng: np.random.Generator
    """Where the chunk's remaining fields (tags' count, dates, scores, types) are drawn from, in that order."""


def _chunks(spec: SyntheticStackOverflowSpec) -> Iterator[_Chunk]:
    rng = numpy_generator(spec.seed, "synthetic_stackoverflow", "ids")
    gap = max(1, 10**8 // spec.num_clients)
    ids = np.cumsum(rng.integers(1, gap + 1, size=spec.num_clients)) - 1
    cdf = _wordfreq_cdf(spec.background_words) if spec.background == "wordfreq" else None
    for start in range(0, spec.num_clients, _CHUNK_CLIENTS):
        rng = numpy_generator(spec.seed, "synthetic_stackoverflow", start)
        chunk = ids[start : start + _CHUNK_CLIENTS]
        sizes = rng.integers(spec.min_examples, spec.max_examples + 1, size=chunk.size)
        n = int(sizes.sum())
        favourite = np.repeat(_zipf_ranks(rng, chunk.size, spec.num_tags), sizes)
        kept = rng.random((n, 2)) < spec.favourite_share  # drawn before the other tags (the seeding's order)
        tag_ids = np.where(kept, favourite[:, None], _zipf_ranks(rng, (n, 2), spec.num_tags))
        second = rng.random(n) < 0.5
        token_lengths = rng.integers(0, spec.max_tokens + 1, size=n)
        title_lengths = rng.integers(0, spec.max_title_words + 1, size=n)
        total = int(token_lengths.sum() + title_lengths.sum())
        topic = spec.first_topic_word + np.repeat(tag_ids[:, 0], token_lengths + title_lengths) * spec.topic_words
        topic += rng.integers(0, spec.topic_words, size=total)
        topical = rng.random(total) < spec.topic_share
        background = _zipf_ranks(rng, total, spec.background_words) if cdf is None else \
            np.minimum(np.searchsorted(cdf, rng.random(total), side="right"), spec.background_words - 1)
        ranks = np.where(topical, topic % spec.num_words, background)
        lengths = np.stack([token_lengths, title_lengths], axis=1).reshape(-1)
        yield _Chunk(chunk, sizes, np.where(second[:, None], tag_ids, tag_ids[:, :1]), lengths, ranks, topical, rng)


def synthetic_columns(spec: SyntheticStackOverflowSpec) -> Iterator[tuple[str, Columns]]:
    """The clients of ``spec`` in id order, as ``(client_id, columns)``, generated a chunk of clients at a time."""
    words = np.array([f"w{r}" for r in range(spec.num_words)], dtype=object)
    tags = np.array([f"tag{t}" for t in range(spec.num_tags)], dtype=object)
    for chunk in _chunks(spec):
        rng, n = chunk.rng, chunk.tag_ids.shape[0]
        tag_text = [
            f"{tags[a]}|{tags[b]}" if a != b else str(tags[a])
            for a, b in zip(chunk.tag_ids[:, 0].tolist(), chunk.tag_ids[:, 1].tolist())
        ]
        texts = _join(words[chunk.ranks], chunk.lengths)
        seconds = rng.integers(0, 8 * 365 * 86_400, size=n)
        dates = np.datetime_as_string(np.datetime64("2010-01-01T00:00:00") + seconds.astype("timedelta64[s]"))
        is_answer = rng.random(n) < 0.6
        columns: Columns = {
            "creation_date": [d.replace("T", " ") + " UTC" for d in dates.tolist()],
            "score": rng.integers(-5, 50, size=n).tolist(),
            "tags": tag_text,
            "title": texts[1::2],
            "tokens": texts[0::2],
            "type": ["answer" if a else "question" for a in is_answer.tolist()],
        }
        offsets = np.concatenate([[0], np.cumsum(chunk.sizes)]).tolist()
        for i, client in enumerate(chunk.ids.tolist()):
            lo, hi = offsets[i], offsets[i + 1]
            yield f"{client:08d}", {name: values[lo:hi] for name, values in columns.items()}


def count_share_spearman(spec: SyntheticStackOverflowSpec) -> float:
    """Spearman's rank correlation, over the words ``spec`` draws at least once, between a word's count and the
    share of its occurrences that the topic draw gave (the label-carrying ones): positive when the frequent words
    carry the label (``anti_aligned``), negative when the rare ones do (``aligned``), as AdaDPS's token-frequency
    side information assumes (fedpub issue 36)."""
    counts = np.zeros(spec.num_words, dtype=np.int64)
    topical = np.zeros(spec.num_words, dtype=np.int64)
    for chunk in _chunks(spec):
        counts += np.bincount(chunk.ranks, minlength=spec.num_words)
        topical += np.bincount(chunk.ranks[chunk.topical], minlength=spec.num_words)
    drawn = counts > 0
    return float(spearmanr(counts[drawn], topical[drawn] / counts[drawn]).statistic)


def synthetic_examples(spec: SyntheticStackOverflowSpec) -> dict[str, list[StackOverflowExample]]:
    """The clients of ``spec`` as ``{client_id: [example, ...]}`` (materialised: meant for small specs)."""
    return {client_id: columns_to_examples(columns) for client_id, columns in synthetic_columns(spec)}


def synthetic_counts(spec: SyntheticStackOverflowSpec) -> tuple[dict[str, int], dict[str, int]]:
    """(word counts, tag counts) of ``spec``'s files, both counted in the generated data (:func:`counted`), so
    that the files tell the truth about the data they describe (AdaDPS's token-frequency side information is read
    from the word counts, the task's tag vocabulary from the tag counts; fedpub issue 21). Words in descending
    count (ties by rank; words never drawn last, with count 0); tags in a seeded shuffled order, as TFF's file is
    not sorted (the loader sorts)."""
    word_counts, drawn_tags = counted(spec, synthetic_columns(spec))
    return word_counts, _shuffled_tags(spec, drawn_tags)


def _shuffled_tags(spec: SyntheticStackOverflowSpec, tags: Counter[str]) -> dict[str, int]:
    """The count of each of ``spec``'s tags, in the seeded order of its tag file."""
    order = numpy_generator(spec.seed, "synthetic_stackoverflow", "tag_order").permutation(spec.num_tags)
    return {f"tag{t}": tags[f"tag{t}"] for t in order.tolist()}


def counting(
    clients: Iterable[tuple[str, Columns]], words: Counter[str], tags: Counter[str]
) -> Iterator[tuple[str, Columns]]:
    """``clients`` passed on, each counted as it passes: the words of its tokens and titles into ``words``, its
    examples' tags into ``tags`` (a writer's one pass over them counts them too)."""
    for client_id, columns in clients:
        words.update(word for text in (*columns["tokens"], *columns["title"]) for word in text.split())
        tags.update(tag for text in columns["tags"] for tag in text.split("|"))
        yield client_id, columns


def _ranked(spec: SyntheticStackOverflowSpec, words: Counter[str]) -> dict[str, int]:
    ranked = sorted(range(spec.num_words), key=lambda r: -words[f"w{r}"])  # stable: ties keep rank order
    return {f"w{r}": words[f"w{r}"] for r in ranked}


def counted(spec: SyntheticStackOverflowSpec, clients: Iterable[tuple[str, Columns]]
            ) -> tuple[dict[str, int], Counter[str]]:
    """The occurrences of each of ``spec``'s words in the tokens and titles of ``clients``, most frequent first
    (ties in rank order), and of each tag in their examples' tags."""
    words: Counter[str] = Counter()
    tags: Counter[str] = Counter()
    for _ in counting(clients, words, tags):
        pass
    return _ranked(spec, words), tags


@dataclass(frozen=True)
class StackOverflowFiles:
    """Where :func:`write_synthetic_stackoverflow` put the data and the two count files."""

    data: Path
    word_count: Path
    tag_count: Path


def write_synthetic_stackoverflow(
    directory: str | os.PathLike[str],
    spec: SyntheticStackOverflowSpec,
    *,
    split: str = "train",
    layout: Literal["h5", "sqlite"] = "h5",
    index: bool = True,
) -> StackOverflowFiles:
    """Write ``spec`` as one split, plus ``stackoverflow.word_count`` and ``stackoverflow.tag_count``, in
    ``directory``: ``layout="h5"`` writes ``stackoverflow_<split>.h5`` (TFF's HDF5 name for the split),
    ``"sqlite"`` writes ``stackoverflow.sqlite`` holding that split (with ``index=False``, without the indexes
    TFF's tests add, as TFF's writer). Clients are streamed, never all in memory."""
    if split not in SPLITS:
        raise ValueError(f"unknown StackOverflow split {split!r}; allowed: {', '.join(SPLITS)}")
    if layout not in ("h5", "sqlite"):
        raise ValueError(f"layout must be 'h5' or 'sqlite', got {layout!r}")
    root = Path(directory)
    words: Counter[str] = Counter()
    tags: Counter[str] = Counter()
    clients = counting(synthetic_columns(spec), words, tags)  # counted as they are written: one pass
    if layout == "h5":
        data = _write_h5(root / H5_FILES[split], clients)
    else:
        data = _write_sqlite_file(root / SQLITE_FILE, {split: clients}, index)
    word_counts, tag_counts = _ranked(spec, words), _shuffled_tags(spec, tags)
    return StackOverflowFiles(
        data=data,
        word_count=write_word_count(root / WORD_COUNT_FILE, word_counts),
        tag_count=write_tag_count(root / TAG_COUNT_FILE, tag_counts),
    )


def ensure_synthetic_stackoverflow(
    directory: str | os.PathLike[str],
    train: SyntheticStackOverflowSpec,
    test: SyntheticStackOverflowSpec,
    heldout: SyntheticStackOverflowSpec,
) -> Path:
    """The offline StackOverflow look-alike in ``directory``: ``stackoverflow_train.h5`` from ``train`` (and the
    count files, from ``train``), ``stackoverflow_test.h5`` and ``stackoverflow_held_out.h5`` from the other two
    specs. Files made from the same specs are reused; a marker written last records the specs, so an interrupted
    generation of the same specs is redone. Files generated from other specs, or not by fedpub, are refused
    (DatasetError, :mod:`fedpub.data.generated`), never overwritten."""
    root = Path(directory)
    backgrounds = {spec.background for spec in (train, test, heldout)}  # wordfreq's version: part of the data
    marker, pending = root / "fedpub_synthetic_stackoverflow.json", root / "fedpub_synthetic_stackoverflow.partial"
    wanted = json.dumps({"train": train.identity(), "test": test.identity(), "heldout": heldout.identity(),
                         "word_count": "counted in the generated training tokens",
                         "tag_count": "counted in the generated training tags",
                         **({"wordfreq": _wordfreq_version()} if "wordfreq" in backgrounds else {})},
                        sort_keys=True)
    with generation_lock(root):
        if marker.is_file():
            refuse_other_spec(root, "synthetic StackOverflow", marker.read_text(), wanted)
            return root
        if pending.is_file():
            refuse_other_spec(root, "a partly generated synthetic StackOverflow", pending.read_text(), wanted)
        elif any((root / name).exists() for name in (*H5_FILES.values(), WORD_COUNT_FILE, TAG_COUNT_FILE)):
            refuse_other_spec(root, "StackOverflow", None, wanted)
        write_text_atomic(pending, wanted)
        write_synthetic_stackoverflow(root, train, split="train")
        _write_h5(root / H5_FILES["test"], synthetic_columns(test))
        _write_h5(root / H5_FILES["heldout"], synthetic_columns(heldout))
        write_text_atomic(marker, wanted)
        pending.unlink()
    return root


__all__ = [
    "BACKGROUNDS",
    "Clients",
    "count_share_spearman",
    "counted",
    "counting",
    "EdgeCaseData",
    "StackOverflowFiles",
    "SyntheticStackOverflowSpec",
    "SIDE_INFORMATION",
    "edge_case_dataset",
    "examples_to_columns",
    "synthetic_columns",
    "synthetic_counts",
    "synthetic_examples",
    "write_stackoverflow_h5",
    "write_stackoverflow_sqlite",
    "ensure_synthetic_stackoverflow",
    "write_synthetic_stackoverflow",
    "write_tag_count",
    "write_word_count",
]

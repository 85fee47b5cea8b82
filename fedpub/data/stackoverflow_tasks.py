"""The standard federated StackOverflow tasks as :class:`~fedpub.data.base.FederatedDataset` views over a reader.

Preprocessing as TFF defines it (google-parfait/tensorflow-federated, ``tensorflow_federated/python/simulation/
baselines/stackoverflow/{constants,tag_prediction_preprocessing,tag_prediction_tasks,word_prediction_preprocessing,
word_prediction_tasks}.py``; see ``shared/reference/datasets.md`` §2.4-2.5 and §5):

Text is handled as TFF handles it, as bytes (``tag_prediction_preprocessing.build_to_ids_fn`` and
``word_prediction_preprocessing.build_to_ids_fn``): the readers' strings are turned back into the stored bytes
(:func:`~fedpub.data.stackoverflow.encode_text`), split as ``tf.strings.split`` splits, and looked up in a table
whose keys are the vocabulary's UTF-8 bytes (TFF reads the count files as Python ``str`` and
``tf.lookup.KeyValueTensorInitializer`` stores them as ``tf.string``, UTF-8). A token that is not valid UTF-8 never
equals a key, so it is out of vocabulary; a vocabulary entry that has no UTF-8 form (a lone surrogate, possible
through a JSON escape in ``stackoverflow.tag_count``) is refused, as TensorFlow refuses to build such a table.

- **Tag prediction** (SO-LR). ``sentence = tokens + b' ' + title`` split by ``tf.strings.split(sentence)``: on runs
  of ASCII whitespace (space, tab, newline, vertical tab, form feed, carriage return: ``absl::ascii_isspace``, the
  same bytes Python's ``bytes.split()`` splits on), empty pieces dropped. Non-breaking spaces, ``\x1c``-``\x1f``
  and ``\x85``, which Python's ``str.split()`` would also split on, stay inside their word. Words index the first
  ``len(word_vocab)`` (10,000) words of ``stackoverflow.word_count``, other words are OOV. Features, normalisation
  ``"in_vocab"`` (TFF since commit 43169e422, the default): in-vocabulary word counts divided by their sum (all
  zeros when no word is in the vocabulary); ``"all_tokens"`` (older TFF, GRF, FedML, AdaDPS): counts divided by the
  number of *all* tokens, OOV included (all zeros for an empty sentence, where TensorFlow's ``reduce_mean`` would
  give NaN). Targets: ``tf.strings.split(tags, sep='|')`` (empty pieces kept) over the top ``len(tag_vocab)``
  (500) tags sorted by count, OOV tags dropped, as TFF's ``reduce_sum`` of one-hot vectors: a tag listed twice in
  a post (``python|python``) counts 2.0.
- **AdaDPS single-label variant** (Li et al., ICML'22, repo litian96/AdaDPS ``federated/data/stackoverflow/
  create_dataset.py``): ``"all_tokens"`` features and ``y = argmax(multi_hot)``, a 500-way label (the top tag the
  post lists most often, ties to the most frequent tag; 0 when it has none), for the first 400 sorted train
  clients, each split 80/20 within the client after a shuffle (:func:`adadps_tag_prediction`).
- **Next-word prediction** (SO-NWP). Per example only ``tokens``: ``tf.strings.split(tokens, sep=' ')``, on the
  space byte alone (empty pieces kept; a tab or non-breaking space stays inside its word), the first
  ``sequence_length`` (20) words, ids pad 0, word ``i`` -> ``i + 1``, OOV ``V + 1``, BOS ``V + 2``, EOS ``V + 3``
  (one OOV bucket; 10,004 ids for V = 10,000); EOS appended only when fewer than ``sequence_length`` words remain;
  BOS prepended; padded with 0 to ``sequence_length + 1``; ``x = seq[:-1]``, ``y = seq[1:]``.

``max_elements`` caps the examples per client. TFF takes the first ``max_elements`` after a shuffle; here
``client_data(cid)`` takes the first ``max_elements`` in stored order (deterministic), and
``client_data(cid, generator=g)`` a uniformly random subset drawn from ``g`` (kept in stored order).

Features are built per client with one dictionary lookup per token and numpy for the rest. The metric helpers
return ``(numerator, denominator)`` tensors, summed over batches and clients for micro averages (Keras
``Recall(top_k=5)``, ``Precision()`` at 0.5, and TFF's ``MaskedCategoricalAccuracy`` variants).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from typing import Literal, NamedTuple, TypeVar

import numpy as np
import torch

from fedpub.data.base import ClientData, FederatedDataset
from fedpub.data.stackoverflow import StackOverflowReader, encode_text, load_tag_counts, load_word_counts
from fedpub.seeding import numpy_generator

WORD_VOCAB_SIZE = 10_000
TAG_VOCAB_SIZE = 500
SEQUENCE_LENGTH = 20
Normalization = Literal["in_vocab", "all_tokens"]
NORMALIZATIONS: tuple[str, ...] = ("in_vocab", "all_tokens")
T = TypeVar("T")
Ratio = tuple[torch.Tensor, torch.Tensor]
"""A metric as (numerator, denominator); sum them over batches, then divide (0 when the denominator is 0)."""


class SpecialTokens(NamedTuple):
    """TFF's next-word-prediction ids around a word vocabulary of size V (one OOV bucket)."""

    pad: int
    oov: int
    bos: int
    eos: int


def special_tokens(vocab_size: int = WORD_VOCAB_SIZE) -> SpecialTokens:
    """pad 0, words 1..V, OOV V+1, BOS V+2, EOS V+3 (TFF ``get_special_tokens`` with ``num_oov_buckets=1``)."""
    return SpecialTokens(pad=0, oov=vocab_size + 1, bos=vocab_size + 2, eos=vocab_size + 3)


def load_vocabularies(
    word_count: str | os.PathLike[str],
    tag_count: str | os.PathLike[str],
    *,
    word_vocab_size: int = WORD_VOCAB_SIZE,
    tag_vocab_size: int = TAG_VOCAB_SIZE,
) -> tuple[list[str], list[str]]:
    """The tasks' (word vocabulary, tag vocabulary): the first ``word_vocab_size`` words of
    ``stackoverflow.word_count`` and the ``tag_vocab_size`` most frequent tags of ``stackoverflow.tag_count``."""
    return list(load_word_counts(word_count, word_vocab_size)), list(load_tag_counts(tag_count, tag_vocab_size))


def vocab_index(vocab: Sequence[str]) -> dict[bytes, int]:
    """``{UTF-8 bytes of word: position}``, TFF's lookup table; raises ValueError on a repeated entry (positions
    would be ambiguous) or, as UnicodeEncodeError, on one with no UTF-8 form (a lone surrogate: TensorFlow cannot
    make it a ``tf.string``)."""
    index: dict[bytes, int] = {}
    for i, word in enumerate(vocab):
        key = word.encode("utf-8")
        if index.setdefault(key, i) != i:
            raise ValueError(f"the vocabulary lists {word!r} twice (entries {index[key]} and {i})")
    if not index:
        raise ValueError("the vocabulary is empty")
    return index


def _lookup(pieces: list[list[bytes]], index: Mapping[bytes, int], missing: int) -> tuple[np.ndarray, np.ndarray]:
    """(row of every piece, id of every piece): one dictionary lookup per piece."""
    lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
    get = index.get
    total = int(lengths.sum())
    ids = np.fromiter((get(w, missing) for p in pieces for w in p), dtype=np.int64, count=total)
    return np.repeat(np.arange(len(pieces)), lengths), ids


def tag_features(
    tokens: Sequence[str],
    titles: Sequence[str],
    word_index: Mapping[bytes, int],
    normalization: Normalization = "in_vocab",
) -> np.ndarray:
    """Bag-of-words features, float32 ``(n, V)``, of ``tokens[i] + ' ' + titles[i]`` split on ASCII whitespace
    (see the module docstring); ``word_index`` from :func:`vocab_index`."""
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {', '.join(NORMALIZATIONS)}, got {normalization!r}")
    n, size = len(tokens), len(word_index)
    sentences = (encode_text(f"{t} {title}").split() for t, title in zip(tokens, titles, strict=True))
    rows, ids = _lookup(list(sentences), word_index, size)
    known = ids < size
    if normalization == "in_vocab":
        totals = np.bincount(rows[known], minlength=n)
    else:
        totals = np.bincount(rows, minlength=n)
    cells, counts = np.unique(rows[known] * size + ids[known], return_counts=True)
    x = np.zeros((n, size), dtype=np.float32)
    # only the cells of words present are written (a row with one has a total >= 1), not every row's V entries
    x.reshape(-1)[cells] = counts.astype(np.float32) / totals[cells // size].astype(np.float32)
    return x


def tag_targets(tags: Sequence[str], tag_index: Mapping[bytes, int]) -> np.ndarray:
    """Multi-hot targets, float32 ``(n, T)``: for every tag of the vocabulary, how many times ``tags[i]`` split on
    ``|`` lists it (TFF's sum of one-hot vectors: 1.0, or 2.0 for ``python|python``)."""
    n, size = len(tags), len(tag_index)
    rows, ids = _lookup([encode_text(t).split(b"|") for t in tags], tag_index, size)
    known = ids < size
    y = np.zeros((n, size), dtype=np.float32)
    np.add.at(y, (rows[known], ids[known]), np.float32(1.0))
    return y


def next_word_ids(
    tokens: Sequence[str], word_index: Mapping[bytes, int], sequence_length: int = SEQUENCE_LENGTH
) -> np.ndarray:
    """TFF next-word-prediction sequences, int64 ``(n, sequence_length + 1)``: BOS, ids, EOS if short, pads."""
    if sequence_length < 1:
        raise ValueError(f"sequence_length must be >= 1, got {sequence_length}")
    n, size = len(tokens), len(word_index)
    special = special_tokens(size)
    pieces = [encode_text(t).split(b" ")[:sequence_length] for t in tokens]
    rows, ids = _lookup(pieces, word_index, size)  # OOV -> size, so ids + 1 maps it to special.oov
    lengths = np.bincount(rows, minlength=n)
    starts = np.cumsum(lengths) - lengths
    positions = np.arange(rows.size) - starts[rows] + 1
    seq = np.zeros((n, sequence_length + 1), dtype=np.int64)
    seq[:, 0] = special.bos
    seq[rows, positions] = ids + 1
    short = np.flatnonzero(lengths < sequence_length)
    seq[short, lengths[short] + 1] = special.eos
    return seq


def _select(values: list[T], max_elements: int | None, generator: np.random.Generator | None) -> list[T]:
    """All of ``values``, or ``max_elements`` of them: the first, or a uniform subset from ``generator``."""
    if max_elements is None or len(values) <= max_elements:
        return values
    if generator is None:
        return values[:max_elements]
    return [values[i] for i in np.sort(generator.choice(len(values), size=max_elements, replace=False))]


def _check_max_elements(max_elements: int | None) -> None:
    if max_elements is not None and max_elements < 1:
        raise ValueError(f"max_elements must be >= 1 or None, got {max_elements}")


class TagPrediction:
    """Tag prediction over a StackOverflow reader: x float32 ``(n, len(word_vocab))``; y float32 multi-hot
    ``(n, len(tag_vocab))`` (TFF's sum of one-hots: 2.0 for a tag listed twice), or with ``single_label`` int64
    ``(n,)`` = its argmax (AdaDPS).

    ``num_classes`` is the number of tags. ``client_ids`` restricts the view to some of the reader's clients
    (default: all). ``word_vocab`` and ``tag_vocab`` are the ordered vocabularies (:func:`load_vocabularies`).
    Features are dense: a client costs ``n * len(word_vocab) * 4`` bytes (40 MB for 1,000 examples), so cap large
    clients with ``max_elements`` (TFF's standard setting is 1,000).
    """

    def __init__(
        self,
        reader: StackOverflowReader,
        word_vocab: Sequence[str],
        tag_vocab: Sequence[str],
        *,
        normalization: Normalization = "in_vocab",
        single_label: bool = False,
        max_elements: int | None = None,
        client_ids: Sequence[str] | None = None,
    ) -> None:
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {', '.join(NORMALIZATIONS)}, got {normalization!r}")
        _check_max_elements(max_elements)
        self.reader = reader
        self.word_index = vocab_index(word_vocab)
        self.tag_index = vocab_index(tag_vocab)
        self.normalization: Normalization = normalization
        self.single_label = single_label
        self.max_elements = max_elements
        self.client_ids: list[str] = reader.client_ids if client_ids is None else sorted(client_ids)
        self.num_classes = len(self.tag_index)
        self.num_features = len(self.word_index)

    def num_examples(self, client_id: str) -> int:
        """Examples ``client_data`` returns (the reader's count, capped at ``max_elements``); reads no example."""
        n = self.reader.num_examples(client_id)
        return n if self.max_elements is None else min(n, self.max_elements)

    def client_data(self, client_id: str, *, generator: np.random.Generator | None = None) -> ClientData:
        """Features and targets of one client (with ``generator``, a random subset if over ``max_elements``)."""
        columns = self.reader.columns(client_id, ("tags", "title", "tokens"))
        # One draw for the three columns: the same examples are kept in each.
        rows = _select(list(range(len(columns["tokens"]))), self.max_elements, generator)
        tokens, titles, tags = ([columns[f][i] for i in rows] for f in ("tokens", "title", "tags"))
        x = tag_features(tokens, titles, self.word_index, self.normalization)
        y = tag_targets(tags, self.tag_index)
        if self.single_label:
            return ClientData(x=torch.from_numpy(x), y=torch.from_numpy(y.argmax(axis=1).astype(np.int64)))
        return ClientData(x=torch.from_numpy(x), y=torch.from_numpy(y))


class NextWordPrediction:
    """Next-word prediction over a StackOverflow reader: x, y int64 ``(n, sequence_length)`` of TFF ids.

    ``num_classes`` is the number of ids, ``len(word_vocab) + 4`` (10,004): the model's input vocabulary and its
    output size.
    """

    def __init__(
        self,
        reader: StackOverflowReader,
        word_vocab: Sequence[str],
        *,
        sequence_length: int = SEQUENCE_LENGTH,
        max_elements: int | None = None,
        client_ids: Sequence[str] | None = None,
    ) -> None:
        if sequence_length < 1:
            raise ValueError(f"sequence_length must be >= 1, got {sequence_length}")
        _check_max_elements(max_elements)
        self.reader = reader
        self.word_index = vocab_index(word_vocab)
        self.sequence_length = sequence_length
        self.max_elements = max_elements
        self.client_ids: list[str] = reader.client_ids if client_ids is None else sorted(client_ids)
        self.special = special_tokens(len(self.word_index))
        self.num_classes = len(self.word_index) + 4

    def num_examples(self, client_id: str) -> int:
        """Examples ``client_data`` returns (the reader's count, capped at ``max_elements``); reads no example."""
        n = self.reader.num_examples(client_id)
        return n if self.max_elements is None else min(n, self.max_elements)

    def client_data(self, client_id: str, *, generator: np.random.Generator | None = None) -> ClientData:
        """Input and target id sequences of one client (with ``generator``, a random subset if capped)."""
        tokens = _select(self.reader.columns(client_id, ("tokens",))["tokens"], self.max_elements, generator)
        seq = torch.from_numpy(next_word_ids(tokens, self.word_index, self.sequence_length))
        return ClientData(x=seq[:, :-1], y=seq[:, 1:])


class WithinClientSplit:
    """One part (``"train"`` or ``"test"``) of a seeded split of every client's examples (AdaDPS: 80/20).

    A client's examples are permuted by a generator derived from (``seed``, client id); the first
    ``int(fraction * n)`` are train, the rest test, so the two parts never share an example.
    """

    def __init__(
        self, dataset: FederatedDataset, part: Literal["train", "test"], *, fraction: float, seed: int
    ) -> None:
        if part not in ("train", "test"):
            raise ValueError(f"part must be 'train' or 'test', got {part!r}")
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"fraction must be in (0, 1), got {fraction}")
        self.dataset = dataset
        self.part = part
        self.fraction = fraction
        self.seed = seed
        self.client_ids: list[str] = dataset.client_ids
        self.num_classes = dataset.num_classes

    def _bounds(self, n: int) -> slice:
        cut = int(self.fraction * n)
        return slice(0, cut) if self.part == "train" else slice(cut, n)

    def num_examples(self, client_id: str) -> int:
        n = self.dataset.num_examples(client_id)
        bounds = self._bounds(n)
        return bounds.stop - bounds.start

    def client_data(self, client_id: str) -> ClientData:
        data = self.dataset.client_data(client_id)
        order = numpy_generator(self.seed, "within_client_split", client_id).permutation(len(data))
        rows = torch.from_numpy(order[self._bounds(len(data))])
        return ClientData(x=data.x[rows], y=data.y[rows])


def adadps_tag_prediction(
    reader: StackOverflowReader,
    word_vocab: Sequence[str],
    tag_vocab: Sequence[str],
    *,
    num_clients: int = 400,
    train_fraction: float = 0.8,
    seed: int = 0,
) -> tuple[WithinClientSplit, WithinClientSplit]:
    """AdaDPS's StackOverflow task as (train, test) views: the first ``num_clients`` sorted clients of ``reader``
    (AdaDPS reads TFF's train split), ``"all_tokens"`` features, single 500-way labels, and a seeded
    ``train_fraction`` split within each client (AdaDPS shuffles unseeded and keeps only the last 10,000-post batch
    of a client; here every post is kept)."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    base = TagPrediction(
        reader,
        word_vocab,
        tag_vocab,
        normalization="all_tokens",
        single_label=True,
        client_ids=reader.client_ids[:num_clients],
    )
    return (
        WithinClientSplit(base, "train", fraction=train_fraction, seed=seed),
        WithinClientSplit(base, "test", fraction=train_fraction, seed=seed),
    )


def recall_at_k(logits: torch.Tensor, targets: torch.Tensor, k: int = 5) -> Ratio:
    """Micro recall@k (Keras ``Recall(top_k=k)``): true tags among each example's k highest logits, over all
    true tags. ``targets`` is multi-hot ``(n, T)``; a tag is true when its entry is > 0 (Keras casts labels to bool,
    so a tag listed twice counts once)."""
    if not 1 <= k <= logits.shape[-1]:
        raise ValueError(f"k must be in [1, {logits.shape[-1]}], got {k}")
    top = logits.topk(k, dim=-1).indices
    hits = (targets.gather(-1, top) > 0).sum()
    return hits, (targets > 0).sum()


def precision_at_threshold(logits: torch.Tensor, targets: torch.Tensor, threshold: float = 0.5) -> Ratio:
    """Micro precision (Keras ``Precision()``): of the tags with sigmoid(logit) > ``threshold``, the true ones."""
    predicted = torch.sigmoid(logits) > threshold
    return (predicted & (targets > 0)).sum(), predicted.sum()


def masked_accuracy(logits: torch.Tensor, targets: torch.Tensor, masked_tokens: Collection[int]) -> Ratio:
    """Accuracy over the target positions whose id is not in ``masked_tokens`` (TFF ``MaskedCategoricalAccuracy``).

    ``logits`` ``(..., C)``, ``targets`` ``(...)`` int ids."""
    keep = ~torch.isin(targets, torch.tensor(sorted(masked_tokens), dtype=targets.dtype, device=targets.device))
    correct = (logits.argmax(dim=-1) == targets) & keep
    return correct.sum(), keep.sum()


def next_word_metrics(
    logits: torch.Tensor, targets: torch.Tensor, vocab_size: int = WORD_VOCAB_SIZE
) -> dict[str, Ratio]:
    """TFF's next-word-prediction accuracies: ``accuracy`` (pad excluded; its denominator is TFF's
    ``num_tokens``), ``accuracy_without_out_of_vocab`` (pad, OOV) and
    ``accuracy_without_out_of_vocab_or_end_of_sentence`` (pad, OOV, BOS, EOS; BOS is never a target)."""
    special = special_tokens(vocab_size)
    return {
        "accuracy": masked_accuracy(logits, targets, [special.pad]),
        "accuracy_without_out_of_vocab": masked_accuracy(logits, targets, [special.pad, special.oov]),
        "accuracy_without_out_of_vocab_or_end_of_sentence": masked_accuracy(logits, targets, special),
    }


__all__ = [
    "NORMALIZATIONS",
    "SEQUENCE_LENGTH",
    "TAG_VOCAB_SIZE",
    "WORD_VOCAB_SIZE",
    "NextWordPrediction",
    "Normalization",
    "Ratio",
    "SpecialTokens",
    "TagPrediction",
    "WithinClientSplit",
    "adadps_tag_prediction",
    "load_vocabularies",
    "masked_accuracy",
    "next_word_ids",
    "next_word_metrics",
    "precision_at_threshold",
    "recall_at_k",
    "special_tokens",
    "tag_features",
    "tag_targets",
    "vocab_index",
]

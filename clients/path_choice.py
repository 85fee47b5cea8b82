"""Choosing how a cohort's users are trained by timing the candidates on the run's own work, as cuDNN's
benchmark mode times its convolution algorithms on the first call of each shape and keeps the fastest.

The cohort trainer (:mod:`fedpub.clients.cohort_training`) can train a group of users that take the same number
of local steps either at once (``vectorised``: ``vmap`` over the stacked users, pfl-research's resident-model
idea, Granqvist et al. 2024) or one by one (``loop``: each user on the resident model, cut to the input columns
its examples use where that applies). Which is faster depends on the model, the group's size and the machine:
vmap's fixed cost per step against the loop's per-user cost. A fixed rule guessed wrong (issue 23: 50 small
users of a small CNN took 0.100 s a round vectorised and 0.087 s one by one), so :class:`PathChooser` keeps,
per key (the model and the group size, in power-of-two buckets), the seconds each candidate took on the same
groups; after :attr:`PathChooser.trials` such groups (or sooner, when one took :data:`DECISIVE` times the other's
seconds) it keeps the one with the smaller total (vectorised only by a margin, :data:`VECTORISED_MARGIN`), and that
choice is final. A size is not timed when the choices
for other sizes imply its path (:meth:`PathChooser.implied`: the loop kept for a size holds for smaller ones,
vectorised for larger ones), since each timed group costs both candidates' work. The choices (and the seconds
behind them) round-trip through JSON (the run's ``paths.json``: one entry per key, named by the key's text and
holding the key's fields), so a resumed run trains as the first run did.

Both candidates give the same updates to float rounding (``tests/clients/test_cohort_training.py`` pins it), so
a run's model does not depend on which one wins beyond rounding; a seed gives the same model bit for bit with the
same choices (a resumed run reuses them; ``client.path: vectorised`` or ``loop`` fixes them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

CANDIDATES = ("vectorised", "loop")
"""The paths a group of users can take."""

STORED_FIELDS = frozenset({"model", "smallest_group", "path", "seconds", "groups_timed"})
"""The fields of one stored choice (an entry of ``paths.json``)."""

TRIALS = 2
"""Groups of a key timed with both candidates before the choice is made."""

VECTORISED_MARGIN = 0.9
"""Vectorised is kept only when its total is at most this fraction of the loop's. Two timed groups do not show
everything a vectorised group costs on a CPU (its stacked activations grow with the group: 64 users of the small
CNN hold 88 MB per convolution layer per step; its first call traces the model): in issue 23's grid a SmallCNN
bucket kept vectorised on 0.757 s against the loop's 0.782 s trained its later rounds 25 % slower than the loop
did. Where vectorising pays, it pays by far more (the MLP: 0.024 s against 0.041 s)."""

DECISIVE = 2.0
"""A key whose candidates' totals differ by this factor is decided at once, before its :data:`TRIALS` groups:
each timed group costs both candidates' work (a vectorised group of a 5M-parameter model, timed, costs a round)."""


@dataclass(frozen=True, order=True)
class GroupKey:
    """What a choice is kept for: the model (its description, e.g. class and parameter count) and the smallest
    group size of a power-of-two bucket (``smallest`` to ``2·smallest − 1`` users)."""

    model: str
    smallest: int

    @classmethod
    def of(cls, model: str, users: int) -> GroupKey:
        """The key of a group of ``users`` users of ``model``: buckets 1, 2-3, 4-7, 8-15, ..."""
        return cls(model, 1 << (max(users, 1).bit_length() - 1))

    @property
    def sizes(self) -> str:
        """The bucket's group sizes: ``"1"``, ``"2-3"``, ``"4-7"``, ..."""
        largest = 2 * self.smallest - 1
        return str(self.smallest) if largest == self.smallest else f"{self.smallest}-{largest}"

    def __str__(self) -> str:
        return f"{self.model} × {self.sizes} users" if self.model else f"{self.sizes} users"


@dataclass
class Timings:
    """The seconds each candidate took on the same groups of one key, and the choice once made."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CANDIDATES, 0.0))
    groups: int = 0
    chosen: str | None = None

    def to_json(self, key: GroupKey) -> dict[str, Any]:
        return {"model": key.model, "smallest_group": key.smallest, "path": self.chosen,
                "seconds": {k: round(v, 6) for k, v in self.seconds.items()}, "groups_timed": self.groups}


class PathChooser:
    """Per key, the candidate that took the fewer seconds over its first ``trials`` groups (vectorised by
    :data:`VECTORISED_MARGIN`), each group trained with both (fewer groups when one candidate is :data:`DECISIVE`
    times slower); :meth:`choice` is None while a
    key is still being timed. ``log`` receives one line per choice."""

    def __init__(
        self,
        stored: Mapping[str, Any] | None = None,
        *,
        trials: int = TRIALS,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if trials < 1:
            raise ValueError(f"trials must be at least 1, got {trials}")
        self.trials, self.log = trials, log
        self._timings: dict[GroupKey, Timings] = {}
        for name, entry in (stored or {}).items():
            if missing := sorted(STORED_FIELDS - set(entry)):
                raise ValueError(f"stored path choice {name!r}: missing {missing} (the fields are "
                                 f"{sorted(STORED_FIELDS)}); delete the run's paths.json to time the paths again")
            if entry["path"] not in CANDIDATES:
                raise ValueError(f"stored path choice {name!r}: path must be one of {CANDIDATES}, got {entry!r}")
            key = GroupKey(str(entry["model"]), int(entry["smallest_group"]))
            self._timings[key] = Timings(dict(entry["seconds"]), int(entry["groups_timed"]), entry["path"])

    def choice(self, key: GroupKey) -> str | None:
        """The kept candidate for ``key``, or None while it is being timed."""
        timings = self._timings.get(key)
        return None if timings is None else timings.chosen

    def implied(self, model: str, users: int) -> str | None:
        """The candidate a group of ``users`` users of ``model`` takes without being timed, from the choices made
        for other sizes: vmap's gain grows with the group (its fixed cost per step is shared by more users, the
        loop's cost is per user), so the loop kept for a size is kept for every smaller one, and vectorised kept
        for a size is kept for every larger one. None when no choice implies one, or two disagree."""
        low = GroupKey.of(model, users).smallest
        implied = set()
        for key, timings in self._timings.items():
            if key.model != model or timings.chosen is None:
                continue
            if (timings.chosen == "loop" and key.smallest >= low) or (
                    timings.chosen == "vectorised" and key.smallest <= low):
                implied.add(timings.chosen)
        return implied.pop() if len(implied) == 1 else None

    def first(self, key: GroupKey) -> str:
        """The candidate to run first on ``key``'s next timed group: they take turns, so that neither always pays
        what the first run of a group pays (caches, the allocator)."""
        groups = self._timings[key].groups if key in self._timings else 0
        return CANDIDATES[groups % len(CANDIDATES)]

    def record(self, key: GroupKey, seconds: Mapping[str, float]) -> str | None:
        """Add one group's seconds with every candidate; the choice when this group completes the trials."""
        if set(seconds) != set(CANDIDATES):
            raise ValueError(f"a timed group needs seconds for {CANDIDATES}, got {sorted(seconds)}")
        timings = self._timings.setdefault(key, Timings())
        if timings.chosen is not None:
            return timings.chosen
        for candidate, value in seconds.items():
            timings.seconds[candidate] += value
        timings.groups += 1
        slow, fast = max(timings.seconds.values()), min(timings.seconds.values())
        if timings.groups >= self.trials or slow >= DECISIVE * fast:
            vectorised_wins = timings.seconds["vectorised"] <= VECTORISED_MARGIN * timings.seconds["loop"]
            timings.chosen = "vectorised" if vectorised_wins else "loop"
            if self.log is not None:
                times = ", ".join(f"{c} {timings.seconds[c]:.4f} s" for c in CANDIDATES)
                self.log(f"cohort training: {key}: {timings.chosen} kept ({times} over {timings.groups} groups)")
        return timings.chosen

    def to_json(self) -> dict[str, Any]:
        """The choices made so far (keys still being timed are left out: a resumed run times them again)."""
        return {str(key): t.to_json(key) for key, t in sorted(self._timings.items()) if t.chosen is not None}

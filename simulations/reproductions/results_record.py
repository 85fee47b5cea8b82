"""What a reproduction leaves for the results page: ``claims.json``, one record of its claims and their verdicts.

Every reproduction in ``simulations/reproductions/`` (fedpub issue 21, item 8) ends by writing a
:class:`ReproductionRecord` next to its outputs with :func:`write_claims_json`; the results page
(:mod:`fedpub.simulations.reproductions.results_page`) reads them all back with :func:`read_claims_json`. The
schema, one JSON object::

    {"name", "seed_paper": "000".."004", "title", "paper", "command", "quick", "seeds", "wall_time_s",
     "tuning", "rule", "claims": [{"text", "better", "worse", "verdict", "sentence", "paper_figure", "ci", "power",
     "gates"}], "tables": [relative .md paths], "figures": [relative .png paths]}

``rule`` is the judge's rule the verdicts were reached under (:data:`.judge.RULE` when the run was judged: a record
judged under an earlier rule keeps that rule's words). A verdict starts with one of the judge's outcomes
(:data:`VERDICTS`: ``not testable: <gate, with the numbers>``, ``inconclusive (power X % at the paper's effect)``;
:attr:`.judge.ClaimJudgement.verdict`); ``ci`` is
each tested cell's difference and 95 % CI beside the paper's effect, ``power`` the power at the paper's effect
(empty where none), ``gates`` which cells passed and the numbers of each failed gate. Paths are relative to the
folder of the ``claims.json``. A record that breaks the schema is refused, naming the field.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from fedpub.atomic import write_json_atomic
from fedpub.simulations.reproductions.judge import OUTCOMES, ClaimJudgement

CLAIMS_FILE = "claims.json"
REPRODUCTIONS = Path("runs/reproductions")
"""Where the reproductions write by default: full runs in ``<name>/``, quick ones in ``quick/<name>/`` (a quick run
never resumes into, or overwrites, a full one)."""
SEED_PAPERS = ("000", "001", "002", "003", "004")
VERDICTS = OUTCOMES
"""The outcome each verdict starts with (:attr:`ClaimJudgement.verdict`)."""


@dataclass(frozen=True)
class ClaimRecord:
    """One claim, its verdict and its sentence (with the statistics), the paper's own figure beside ours, the
    difference's CI, the power at the paper's effect, and the gates."""

    text: str
    better: str
    worse: str
    verdict: str
    sentence: str
    paper_figure: str
    ci: str
    power: str
    gates: str

    @classmethod
    def of(cls, text: str, better: str, worse: str, judged: ClaimJudgement, paper_figure: str) -> ClaimRecord:
        """The record of a claim judged over its grid."""
        power = judged.power
        return cls(text, better, worse, judged.verdict, judged.sentence(text, better, worse), paper_figure,
                   judged.ci_text(), "" if power is None else f"{power:.0%}", judged.gates_text())

    def __post_init__(self) -> None:
        if not self.verdict.startswith(VERDICTS):
            raise ValueError(f"claims[].verdict must start with one of {VERDICTS}, got {self.verdict!r}")


@dataclass(frozen=True)
class ReproductionRecord:
    """A reproduction's ``claims.json``: what it reproduces, how it was run, the rule it was judged under, its
    claims, tables and figures."""

    name: str
    seed_paper: str
    title: str
    paper: str
    command: str
    quick: bool
    seeds: int
    wall_time_s: float
    tuning: str
    rule: str
    claims: tuple[ClaimRecord, ...]
    tables: tuple[str, ...]
    figures: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.seed_paper not in SEED_PAPERS:
            raise ValueError(f"seed_paper must be one of {SEED_PAPERS}, got {self.seed_paper!r}")
        if not self.name or "/" in self.name:
            raise ValueError(f"name must be a non-empty folder name, got {self.name!r}")
        for key, suffix in (("tables", ".md"), ("figures", ".png")):
            for path in getattr(self, key):
                pure = PurePosixPath(path)
                if pure.is_absolute() or ".." in pure.parts or pure.suffix != suffix:
                    raise ValueError(f"{key} must be relative {suffix} paths inside the output folder, got {path!r}")


def default_out(name: str, quick: bool) -> Path:
    """A reproduction's default output folder (see :data:`REPRODUCTIONS`)."""
    return REPRODUCTIONS / "quick" / name if quick else REPRODUCTIONS / name


def write_claims_json(out_dir: Path, record: ReproductionRecord) -> Path:
    """Write ``record`` as ``out_dir/claims.json`` (atomically) and return its path."""
    path = Path(out_dir) / CLAIMS_FILE
    data = asdict(record)
    data["tables"], data["figures"] = list(record.tables), list(record.figures)
    data["claims"] = [asdict(c) for c in record.claims]
    write_json_atomic(path, data)
    return path


def read_claims_json(path: Path) -> ReproductionRecord:
    """The record in a ``claims.json``; refuses a missing or unknown field, naming it."""
    data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    expected = {f for f in ReproductionRecord.__dataclass_fields__}
    missing, unknown = expected - data.keys(), data.keys() - expected
    if missing or unknown:
        raise ValueError(f"{path}: missing fields {sorted(missing)}, unknown fields {sorted(unknown)}; the fields "
                         f"are {sorted(expected)}")
    claim_fields = set(ClaimRecord.__dataclass_fields__)
    for claim in data["claims"]:
        if set(claim) != claim_fields:
            raise ValueError(f"{path}: each of claims[] has exactly the fields {sorted(claim_fields)}, got "
                             f"{sorted(claim)}")
    return ReproductionRecord(**{
        **data,
        "claims": tuple(ClaimRecord(**c) for c in data["claims"]),
        "tables": tuple(data["tables"]),
        "figures": tuple(data["figures"]),
    })

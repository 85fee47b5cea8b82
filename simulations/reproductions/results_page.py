"""One results page for the seed reproductions (fedpub issue 21, item 8): ``docs/results.md`` from their runs.

``python -m fedpub.simulations.reproductions.results_page [--runs runs/reproductions] [--out docs/results.md]``
reads every ``claims.json`` under the runs folder (:mod:`fedpub.simulations.reproductions.results_record`) and
writes one page: a summary table of every claim's outcome, the difference's CI beside the paper's effect, the
power and the gates, beside the paper's own figure, then per reproduction
its paper, command, seeds, wall time, tuning paragraph, each claim's sentence with its statistics (the judge's,
:mod:`fedpub.simulations.reproductions.judge`), and its tables and figures. Each record, with its tables and
figures, is copied into ``docs/results/<name>/`` beside the page, so the page renders from the repository and
can be regenerated without the runs (runs/ is not kept): a reproduction's committed record stays on the page
until the runs folder has a better one (a full run beats a quick one; of two of one kind, the run's is newer). A
seed paper with no record is listed as missing; nothing on the page is written by hand.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from fedpub.atomic import write_text_atomic
from fedpub.strict_yaml import load_yaml
from fedpub.simulations.reproductions.judge import RULE
from fedpub.simulations.reproductions.results_record import (
    CLAIMS_FILE,
    REPRODUCTIONS,
    SEED_PAPERS,
    ReproductionRecord,
    read_claims_json,
    write_claims_json,
)

RUNS, OUT, READINGS = REPRODUCTIONS, Path("docs/results.md"), Path("docs/results-readings.yaml")
COMMAND = "python -m fedpub.simulations.reproductions.results_page"


EARLIER = "†"
"""Marks, in the summary, an outcome reached under an earlier rule of the judge (the record's own rule)."""


def _outcome(verdict: str, rule: str) -> str:
    """The summary's outcome: a not-testable verdict's gates and numbers are in its gates column beside it; one
    reached under an earlier rule is marked :data:`EARLIER`."""
    outcome = "not testable (gates)" if verdict.startswith("not testable") else verdict
    return outcome if rule == RULE else f"{outcome} {EARLIER}"


def _best_per_reproduction(found: Sequence[tuple[Path, ReproductionRecord]], where: Path
                           ) -> dict[str, tuple[Path, ReproductionRecord]]:
    """Of the records of one reproduction, its full one (else its quick one); two of one kind are refused."""
    chosen: dict[str, tuple[Path, ReproductionRecord]] = {}
    for name in sorted({record.name for _, record in found}):
        candidates = [(folder, record) for folder, record in found if record.name == name]
        full = [(folder, record) for folder, record in candidates if not record.quick]
        if len(kept := full or candidates) > 1:
            folders = ", ".join(str(folder) for folder, _ in kept)
            raise ValueError(f"{where}: more than one {'full' if full else 'quick'} claims.json for the reproduction "
                             f"{name!r} ({folders}); keep one folder each")
        chosen[name] = kept[0]
    return chosen


def find_records(runs: Path, committed: Path | None = None) -> list[tuple[Path, ReproductionRecord]]:
    """The record each reproduction shows, by seed paper then name: from ``runs`` (every ``claims.json`` under it)
    or from ``committed`` (the page's own copies, ``<name>/claims.json``), a full record before a quick one and,
    of two of one kind, the run's."""
    from_runs = _best_per_reproduction(
        [(path.parent, read_claims_json(path)) for path in sorted(Path(runs).rglob(CLAIMS_FILE))], runs)
    kept = {} if committed is None else _best_per_reproduction(
        [(path.parent, read_claims_json(path)) for path in sorted(Path(committed).glob(f"*/{CLAIMS_FILE}"))],
        committed)
    for name, (folder, record) in from_runs.items():
        if name not in kept or not record.quick or kept[name][1].quick:
            kept[name] = (folder, record)
    return sorted(kept.values(), key=lambda item: (item[1].seed_paper, item[1].name))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _copy(source_dir: Path, paths: Sequence[str], target_dir: Path) -> list[tuple[str, bool]]:
    """Copy ``paths`` (relative to ``source_dir``) into ``target_dir``; (its path there, whether it exists)."""
    copied = []
    for relative in paths:
        source, target = source_dir / relative, target_dir / relative
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        copied.append((relative, source.is_file()))
    return copied


def run_key(record: ReproductionRecord) -> str:
    """Which run a reading was written for: its command and seeds (a new run of other sizes needs a new reading)."""
    return f"{record.command} ({record.seeds} seeds{', quick' if record.quick else ''})"


def read_readings(path: Path) -> dict[str, Mapping[str, str]]:
    """The readings file: ``{reproduction: {run: <run_key>, reading: <what the run means for a user choosing a
    strategy>}}``, written by whoever ran the runs; none when the file is absent."""
    if not path.is_file():
        return {}
    found = load_yaml(path.read_text(encoding="utf-8")) or {}
    bad = [name for name, entry in found.items()
           if not isinstance(entry, dict) or set(entry) != {"run", "reading"}]
    if bad:
        raise ValueError(f"{path}: each entry needs exactly the keys run and reading; not so for {bad}")
    return found


def _reading(record: ReproductionRecord, readings: Mapping[str, Mapping[str, str]]) -> str:
    entry = readings.get(record.name)
    if entry is None:
        return "none written for this run yet."
    if entry["run"] != run_key(record):
        return f"none for this run yet (the one written was for `{entry['run']}`)."
    return entry["reading"]


def _section(folder: Path, record: ReproductionRecord, assets: Path, link_base: str,
             readings: Mapping[str, Mapping[str, str]]) -> list[str]:
    kind = "quick mode (tiny sizes: a check that it runs, not a result)" if record.quick else "full mode"
    minutes = record.wall_time_s / 60
    named = record.title.startswith(f"Seed {record.seed_paper}")
    heading = record.title if named else f"Seed {record.seed_paper}: {record.title}"
    lines = [
        f"## {heading}", "",
        f"*Paper:* {record.paper}", "",
        f"*Command:* `{record.command}` — {kind}, {record.seeds} seeds, wall time {record.wall_time_s:.0f} s "
        f"({minutes:.1f} min).", "",
        f"*Tuning:* {record.tuning}", "",
        *([] if record.rule == RULE else
          [f"*Judged under an earlier rule* ({EARLIER}: its outcomes carry that rule's meaning until the run is "
           f"judged again): {record.rule}", ""]),
        "### Claims", "",
    ]
    for claim in record.claims:
        lines += [claim.sentence, f"  - *The paper:* {claim.paper_figure}"]
    lines += ["", f"*For a user choosing a strategy:* {_reading(record, readings)}", ""]
    target = assets / record.name
    tables = _copy(folder, record.tables, target)
    figures = _copy(folder, record.figures, target)
    if tables:
        lines += ["### Tables", ""]
        lines += [f"- [{p}]({link_base}/{record.name}/{p})" if ok else f"- {p} (missing in {folder})"
                  for p, ok in tables]
        lines.append("")
    if figures:
        lines += ["### Figures", ""]
        lines += [f"![{p}]({link_base}/{record.name}/{p})" if ok else f"- {p} (missing in {folder})"
                  for p, ok in figures]
        lines.append("")
    return lines


def results_page(runs: Path, out: Path, note: str = "", readings: Path = READINGS) -> str:
    """Write the page ``out`` (and its assets in ``out``'s folder, ``results/``) from the records under ``runs``;
    ``note``: a paragraph on the state of the runs (what is missing or unfinished, and why); ``readings``: what each
    run means for a user (:func:`read_readings`), shown only beside the run it was written for."""
    assets = out.parent / out.stem
    records = find_records(runs, assets)
    meanings = read_readings(readings)
    staging = assets.with_name(assets.name + ".new")
    if staging.exists():
        shutil.rmtree(staging)  # left by an interrupted regeneration
    lines = [
        "# Seed reproductions: results", "",
        f"Generated by `{COMMAND} --runs {runs} --out {out}` from the `{CLAIMS_FILE}` each reproduction writes "
        f"(the runs' records, else the copies kept in `{assets}/<name>/`); do not edit by hand. Every method is "
        "tuned on validation data where the reproduction says so; tuning is not counted in ε.", "",
        f"**How a claim is judged.** {RULE}", "",
        "## Summary", "",
        "| seed | reproduction | claim | outcome | difference, 95 % CI (paper's effect) | power | gates | the paper |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, record in records:
        mode = " (quick)" if record.quick else ""
        for claim in record.claims:
            lines.append(f"| {record.seed_paper} | {record.name}{mode} | {_cell(claim.text)} | "
                         f"**{_cell(_outcome(claim.verdict, record.rule))}** | {_cell(claim.ci)} | {claim.power or '—'} | "
                         f"{_cell(claim.gates)} | {_cell(claim.paper_figure)} |")
    missing = [s for s in SEED_PAPERS if s not in {r.seed_paper for _, r in records}]
    lines.append("")
    if any(record.rule != RULE for _, record in records):
        lines += [f"{EARLIER} Judged under an earlier rule of the judge, given in its reproduction's section (before "
                  "fedpub issue 45, *contradicts* also meant \"the CI excludes the paper's effect\" and there was no "
                  "*mixed*): that outcome stands until the reproduction is run and judged again.", ""]
    if missing:
        lines += [f"**Missing:** no `{CLAIMS_FILE}` under `{runs}` for seed paper(s) {', '.join(missing)}: their "
                  "reproductions were not run (or not finished) when this page was generated.", ""]
    if note:
        lines += [f"**Note.** {note}", ""]
    for folder, record in records:
        lines += _section(folder, record, staging, assets.name, meanings)
        write_claims_json(staging / record.name, record)
    text = "\n".join(lines)
    _replace_folder(staging, assets)
    write_text_atomic(out, text)
    return text


def _replace_folder(new: Path, old: Path) -> None:
    """Put ``new`` in ``old``'s place; ``old`` is kept until ``new`` is complete (then removed)."""
    retired = old.with_name(old.name + ".old")
    if retired.exists():
        shutil.rmtree(retired)
    if old.exists():
        old.rename(retired)
    new.mkdir(parents=True, exist_ok=True)
    new.rename(old)
    if retired.exists():
        shutil.rmtree(retired)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=RUNS, help=f"folder searched for {CLAIMS_FILE} (default {RUNS})")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the page (default {OUT})")
    parser.add_argument("--note", default="", help="a paragraph on what is missing or unfinished, and why")
    parser.add_argument("--readings", type=Path, default=READINGS,
                        help=f"what each run means for a user choosing a strategy (default {READINGS})")
    args = parser.parse_args(argv)
    results_page(args.runs, args.out, args.note, args.readings)
    print(f"wrote {args.out}")
    return args.out


if __name__ == "__main__":
    main()

"""The documentation's generated blocks (fedpub issue 46: what the code knows is generated, never copied).

A page holds a generated block between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``; its text is
:data:`GENERATORS` [NAME]() made from the code (today: ``transport-matrix``, which part of a recipe each transport
runs, from :mod:`fedpub.recipe_registry`; ``config-reference``, every config field from the pydantic models of
:mod:`fedpub.config`; ``part-card SECTION``, a recipe page's card: what switches the part on, its transports and
its knobs). ``--write`` rewrites every block of the pages under ``docs/`` and of the
README; ``--check`` (and ``tests/test_docs_generated.py``) fails, naming the page and the block, where one is stale.

    python -m fedpub.simulations.tools.docs_reference --write | --check
"""

from __future__ import annotations

import argparse
import re
import typing
from collections.abc import Callable, Collection
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from fedpub.config import ExperimentConfig, StrategyConfig
from fedpub.recipe_registry import BASE_RECIPE, PARTS
from fedpub.recipe_spec import TRANSPORTS

BLOCK = re.compile(r"(<!-- generated: (?P<name>[a-z-]+)(?: (?P<argument>[a-z_]+))? -->\n)(?P<body>.*?)"
                   r"(<!-- end generated -->)", re.DOTALL)
ROOT = Path(__file__).resolve().parents[2]


def transport_matrix() -> str:
    """Every part of the registry (the recipe names that switch it on, or the section that does) against every
    transport: yes where the part declares it, and the cohort rule it needs where it needs one."""
    header = ["part (section)", "switched on by", *(f"`{t}`" for t in TRANSPORTS), "needs sampling"]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for part in PARTS:
        names = ", ".join(f"`{r}`" for r in part.recipes) or "its section only"
        cells = ["yes" if t in part.transports else "**no**" for t in TRANSPORTS]
        needs = f"`{part.sampling_kind}` ({part.sampling_why})" if part.sampling_kind else "any"
        rows.append(f"| `strategy.{part.section}` | {names} | " + " | ".join(cells) + f" | {needs} |")
    legend = "; ".join(f"`{t}`: {what}" for t, what in TRANSPORTS.items())
    return (f"`{BASE_RECIPE}` (DP-FedAvg's private mean) runs on every transport; each part adds to it.\n\n"
            + "\n".join(rows) + f"\n\nTransports: {legend}. A transport refuses, by name, a part it does not run; "
            "a cohort rule a transport cannot draw (SecAgg+ needs fixed-size cohorts) is refused when it starts.\n")


def _models(annotation: object) -> list[type[BaseModel]]:
    """The config sections (pydantic models) an annotation holds, through unions, optionals and annotations."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _type_text(annotation: object) -> str:
    text = str(annotation) if not isinstance(annotation, type) else annotation.__name__
    text = re.sub(r"typing\.Annotated\[(.*?), Tag\(tag='\w+'\)\]", r"\1", text)
    text = re.sub(r"typing\.Annotated\[(\w+), AfterValidator\(func=<function \w+ at 0x[0-9a-f]+>\)\]", r"\1", text)
    text = re.sub(r"<function (\w+) at 0x[0-9a-f]+>", r"\1", text)  # no memory address: the page is stable
    text = re.sub(r"\bfedpub(?:\.\w+)*\.(?=[A-Z])", "", text)  # a config model's module path
    for noise in ("typing.", "pathlib.", "<class '", "'>"):
        text = text.replace(noise, "")
    return text.replace("|", "\\|")


def _bounds(metadata: list[object]) -> str:
    found = []
    for item in metadata:
        for name, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤"), ("min_length", "length ≥")):
            if getattr(item, name, None) is not None:
                found.append(f"{sign} {getattr(item, name)}")
    return ", ".join(found)


def _field_rows(model: type[BaseModel], names: Collection[str] | None = None) -> list[str]:
    """A table of ``model``'s fields (those in ``names``, else all): type (with its allowed values), default, bounds
    and description."""
    rows = ["| field | type | default | bounds | description |", "|---|---|---|---|---|"]
    for name, info in model.model_fields.items():
        if names is not None and name not in names:
            continue
        default = "required" if info.default is PydanticUndefined and info.default_factory is None else (
            "(computed)" if info.default is PydanticUndefined else f"`{info.default!r}`"
            if not isinstance(info.default, BaseModel) else "(its defaults)")
        description = (info.description or "").replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{name}` | `{_type_text(info.annotation)}` | {default.replace('|', '/')} | "
                    f"{_bounds(info.metadata)} | {description} |")
    return rows


def _summary(model: type[BaseModel]) -> str:
    return " ".join((model.__doc__ or "").strip().split("\n\n")[0].split())


def config_reference() -> str:
    """Every field of the config, section by section (``ExperimentConfig`` and the models it holds): its type
    (with its allowed values), default, bounds and description, from the pydantic models of ``fedpub/config.py``."""
    out, seen, queue = [], set(), [("(top level)", ExperimentConfig)]
    while queue:
        where, model = queue.pop(0)
        if model in seen:
            continue
        seen.add(model)
        out += [f"### `{where}`: {model.__name__}", "", _summary(model), "", *_field_rows(model), ""]
        prefix = "" if where == "(top level)" else where + "."
        queue += [(prefix + name, sub) for name, info in model.model_fields.items() for sub in _models(info.annotation)]
    return "\n".join(out)


def part_card(section: str) -> str:
    """A recipe page's card for the registry's part ``section`` (or ``dp_fedavg``, the private mean every recipe
    shares): what switches it on, where it runs, the cohort rule it needs, and its knobs from ``fedpub/config.py``."""
    strategy_fields = StrategyConfig.model_fields
    if section == BASE_RECIPE:
        own = [name for name in strategy_fields if name not in {p.section for p in PARTS}]
        return (f"`strategy.name: {BASE_RECIPE}` (the default). Every recipe is this private mean plus its parts; it "
                f"runs on every transport ({', '.join(f'`{t}`' for t in TRANSPORTS)}).\n\n"
                f"Its knobs, the fields of `strategy` that belong to no part (StrategyConfig):\n\n"
                + "\n".join(_field_rows(StrategyConfig, own)) + "\n")
    part = next((p for p in PARTS if p.section == section), None)
    if part is None:
        raise ValueError(f"part-card {section!r}: no such part; parts: {[p.section for p in PARTS]} or {BASE_RECIPE}")
    (model,) = _models(strategy_fields[section].annotation)
    switched = (" or ".join(f"`strategy.name: {r}`" for r in part.recipes) + " (with its defaults), or "
                if part.recipes else "") + f"setting `strategy.{section}`"
    if part.default_in:
        switched += f"; on by default in {', '.join(f'`{r}`' for r in part.default_in)}"
    where = {None: "each round", "before_rounds": "before the private rounds",
             "after_rounds": "after the private rounds", "across_rounds": "across the rounds (post-processing)"}[
                 part.phase]
    named = ", ".join(f"`{s}`" for s in part.steps)
    slots = f", in the slot{'s' * (len(part.steps) > 1)} {named}" if part.steps else ""
    lines = [f"- **Switched on by** {switched}.",
             f"- **Runs** {where}{slots}" + ("; trains public users" if part.trains_public else "") + ".",
             "- **Transports**: " + ", ".join(f"`{t}` {'yes' if t in part.transports else '**no**'}"
                                              for t in TRANSPORTS) + ".",
             "- **Sampling**: " + (f"`{part.sampling_kind}` ({part.sampling_why})" if part.sampling_kind else "any")
             + "."]
    if part.steers:
        lines.append(f"- **Steers** {', '.join(f'`{s}`' for s in sorted(part.steers))} round by round.")
    return "\n".join(lines) + f"\n\nIts knobs, `strategy.{section}` ({model.__name__}): {_summary(model)}\n\n" + (
        "\n".join(_field_rows(model)) + "\n")


GENERATORS: dict[str, Callable[..., str]] = {"transport-matrix": transport_matrix, "config-reference": config_reference,
                                             "part-card": part_card}
"""Each block's maker; a block written ``<!-- generated: NAME ARGUMENT -->`` calls it with the argument."""


def pages(root: Path = ROOT) -> list[Path]:
    """The README and every page under ``docs/``."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def regenerated(text: str, page: Path) -> str:
    """``text`` with every generated block made again; an unknown block name is refused, naming the page."""
    def fill(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in GENERATORS:
            raise ValueError(f"{page}: unknown generated block {name!r}; known: {sorted(GENERATORS)}")
        made = GENERATORS[name](match["argument"]) if match["argument"] else GENERATORS[name]()
        return match.group(1) + made + match.group(5)

    return BLOCK.sub(fill, text)


def stale(root: Path = ROOT) -> list[str]:
    """The pages (relative to ``root``) whose generated blocks differ from what the code makes now."""
    found = []
    for page in pages(root):
        text = page.read_text(encoding="utf-8")
        if regenerated(text, page) != text:
            found.append(str(page.relative_to(root)))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="rewrite every generated block")
    action.add_argument("--check", action="store_true", help="exit 1 naming the pages whose blocks are stale")
    args = parser.parse_args(argv)
    if args.write:
        for page in pages():
            text = page.read_text(encoding="utf-8")
            if (new := regenerated(text, page)) != text:
                page.write_text(new, encoding="utf-8")
                print(f"wrote {page.relative_to(ROOT)}")
        return 0
    if found := stale():
        print(f"stale generated blocks in {', '.join(found)}: run python -m fedpub.simulations.tools.docs_reference "
              "--write")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

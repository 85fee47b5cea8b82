"""Every code block of the README and the docs runs in the tests (fedpub issue 46): a renamed config field, command,
option or function fails a test here, not a reader.

- ``yaml``: read by fedpub's strict YAML reader. A config fragment is validated by the config loader on top of the
  quick-start config and the fragments above it on its page (a page builds one config, as its reader does); a sweep
  by the sweep loader, its ``base`` read beside the bundled sweeps; the user registry's file by its loader, an
  elided key (``...``) made a real one.
- ``python``: run, in a fresh folder that holds the repository's ``simulations/`` (its runs are a few rounds).
- ``bash``: each command is checked against the program it calls. ``fedpub``: the sub-command and its options
  parsed by the CLI, the config file and ``--set`` keys by the loader, a sweep by the sweep loader, and ``fedpub
  run`` (with ``--dry-run``) and ``fedpub account`` run. ``python -m MODULE``, ``torchrun``, Flower's ``flwr``,
  ``flower-superlink`` and ``flower-supernode`` and ``mkdocs``: every option the line gives is one the program
  takes. A script's file exists. Other programs (:data:`NOT_OURS`) are not run.
- ``toml``: parsed. ``text``: output or a layout, shown not run.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import re
import runpy
import shlex
import sys
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
import typer
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from typer.testing import CliRunner

from fedpub.config import apply_overrides, load_config, parse_config
from fedpub.node_identity import UserRegistry
from fedpub.simulations.configs import quickstart_config_path
from fedpub.simulations.tools import docs_reference
from fedpub.simulations.tools.cli import app as fedpub_app
from fedpub.simulations.tools.compare import load_sweep
from fedpub.strict_yaml import load_yaml

ROOT = docs_reference.ROOT
LANGUAGES = {"bash", "python", "yaml", "toml", "text"}
NOT_OURS = {"pip", "openssl", "ssh-keygen", "printf", "mkdir", "cd", "export", ".", "source", "ray", "tensorboard",
            "wandb", "duplicates"}
"""Programs a block calls that fedpub does not ship: shown for the reader, not run here."""
NOT_OURS_MODULES = {"venv", "pytest"}
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    body: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def _blocks() -> list[Block]:
    found = []
    for page in docs_reference.pages():
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            found.append(Block(str(page.relative_to(ROOT)), text.count("\n", 0, match.start()) + 1, match["lang"],
                               textwrap.dedent(match["body"])))
    return found


BLOCKS = _blocks()


def _of(lang: str) -> list[Block]:
    return [b for b in BLOCKS if b.lang == lang]


def test_every_block_names_a_language_the_tests_know():
    assert len(BLOCKS) > 40
    unknown = [f"{b} ({b.lang or 'none'})" for b in BLOCKS if b.lang not in LANGUAGES]
    assert not unknown, f"give these blocks a language of {sorted(LANGUAGES)}: {unknown}"


# --- yaml ---------------------------------------------------------------------------------------------------------

@pytest.fixture
def user_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``mypackage`` the docs' model and task fragments name, written as a user would."""
    package = tmp_path / "pkg" / "mypackage"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(
        "import torch\n\n\ndef make_model(hidden: int = 64, classes: int = 62) -> torch.nn.Module:\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, hidden), torch.nn.ReLU(),\n"
        "                               torch.nn.Linear(hidden, classes))\n")
    (package / "tasks.py").write_text(
        "import torch\n\n\ndef example_loss(outputs, y):\n"
        "    return torch.nn.functional.cross_entropy(outputs, y, reduction='none')\n\n\n"
        "def accuracy(outputs, y):\n    return (outputs.argmax(dim=1) == y).float()\n")
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))


SELECTORS = {"data": {"source"}, "model": {"name", "factory"}}
"""A section given with one of these keys replaces the base's (another source's or model's keys would not apply)."""


def _merged(base: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    """``fragment`` over ``base``, section by section (but a section that picks its own source or model)."""
    out = copy.deepcopy(base)
    for key, value in fragment.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and not SELECTORS.get(key, set()) & set(value):
            out[key] = _merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _page_config(block: Block) -> dict[str, Any]:
    """The quick-start config with the page's config fragments up to ``block`` applied, in page order."""
    config = load_yaml(quickstart_config_path().read_text())
    for earlier in _of("yaml"):
        if earlier.page == block.page and earlier.line <= block.line:
            fragment = load_yaml(earlier.body)
            if "users" not in fragment and "strategies" not in fragment:
                config = _merged(config, fragment)
    return config


def _ssh_key_line() -> str:
    key = ec.generate_private_key(ec.SECP384R1()).public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


@pytest.mark.parametrize("block", _of("yaml"), ids=str)
def test_a_yaml_block_is_read_by_fedpub(block: Block, user_package: None, tmp_path: Path):
    fragment = load_yaml(block.body)
    assert isinstance(fragment, dict), f"{block}: a YAML block is a mapping"
    if "users" in fragment:  # the user registry (flower.user_registry)
        for entry in fragment["users"].values():
            if "..." in str(entry.get("key")):
                entry["key"] = _ssh_key_line()
        path = tmp_path / "registry.yaml"
        path.write_text(yaml.safe_dump(fragment))
        assert len(UserRegistry.load(path).users) == len(fragment["users"])
        return
    if "strategies" in fragment:  # a sweep file, beside the bundled ones
        path = ROOT / "simulations" / "configs" / "sweeps" / fragment.get("base", "")
        fragment["base"] = str(path) if isinstance(fragment.get("base"), str) else fragment.get("base")
        (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(fragment))
        assert load_sweep(tmp_path / "sweep.yaml").runs
        return
    parse_config(_page_config(block), source=str(block))


# --- python -------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shared_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ``data/`` for the module's folders: the bundled data is generated once."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture
def in_a_fresh_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_data: Path) -> Path:
    """A folder as a user's, holding the repository's ``simulations/`` (the configs a block names) and on
    ``sys.path`` the example Flower app (``quickstart_dp``) a block imports."""
    (tmp_path / "simulations").symlink_to(ROOT / "simulations")
    (tmp_path / "data").symlink_to(shared_data)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "quickstart_dp"))
    return tmp_path


@pytest.mark.parametrize("block", _of("python"), ids=str)
def test_a_python_block_runs(block: Block, in_a_fresh_folder: Path, monkeypatch: pytest.MonkeyPatch):
    """Run as a script of the user's own would be: a module of its own, so what it defines can be imported by
    name (fedpub records a model factory as 'module:name')."""
    (in_a_fresh_folder / "docs_block.py").write_text(block.body)
    monkeypatch.syspath_prepend(str(in_a_fresh_folder))
    monkeypatch.delitem(sys.modules, "docs_block", raising=False)
    importlib.import_module("docs_block")


# --- toml ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("block", _of("toml"), ids=str)
def test_a_toml_block_parses(block: Block):
    assert tomllib.loads(block.body)


# --- bash ---------------------------------------------------------------------------------------------------------

def _commands(body: str) -> list[list[str]]:
    """Each command of a shell block (continuations joined, comments dropped, split at ``&&``, ``;`` and ``|``)."""
    commands = []
    for line in body.replace("\\\n", " ").splitlines():
        tokens = shlex.split(line, comments=True)
        command: list[str] = []
        for token in [*tokens, ";"]:
            if token in ("&&", "||", ";", "|"):
                if command:
                    commands.append(command)
                command = []
            else:
                command.append(token)
    return commands


def _options(args: list[str]) -> list[str]:
    """The long options a command gives (``--name`` of ``--name``, ``--name=value`` or ``[--name``)."""
    return [m.group(0) for arg in args if (m := re.match(r"--[a-z][a-z0-9-]*", arg.lstrip("[")))]


def _assert_takes(program: str, args: list[str], known: str, where: str) -> None:
    """Every long option ``args`` give appears, as a whole word, in ``known`` (the program's help or option list)."""
    missing = [o for o in _options(args) if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", known)]
    assert not missing, f"{where}: `{program}` has no option {missing}"


def _help_of_argparse(entry: Any, program: str) -> str:
    """What ``program --help`` prints, its entry point (reading ``sys.argv``) called in process."""
    out = io.StringIO()
    argv = sys.argv
    sys.argv = [program, "--help"]
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            entry()
    finally:
        sys.argv = argv
    return out.getvalue()


def _click_command(group: click.Command, args: list[str]) -> tuple[click.Command, list[str]]:
    """The (sub-)command ``args`` name in ``group``, and the arguments left for it."""
    while isinstance(group, click.Group) and args and args[0] in group.commands:
        group, args = group.commands[args[0]], args[1:]
    return group, args


def _check_click(program: str, args: list[str], where: str) -> None:
    """Flower's ``flwr`` and MkDocs' ``mkdocs`` (click commands): the sub-command exists and has every option given."""
    if program == "flwr":
        from flwr.cli.app import app as flwr_app

        root = typer.main.get_command(flwr_app)
    else:
        from mkdocs.__main__ import cli as root
    command, _ = _click_command(root, args)
    known = " ".join(opt for param in command.params for opt in (*param.opts, *param.secondary_opts))
    _assert_takes(program, args, known, where)


def _check_flower_server(program: str, args: list[str], where: str) -> None:
    """``flower-superlink`` and ``flower-supernode`` (argparse): every option given is in their ``--help``."""
    from flwr.superlink.cli import flower_superlink
    from flwr.supernode.cli import flower_supernode

    entry = {"flower-superlink": flower_superlink, "flower-supernode": flower_supernode}[program]
    _assert_takes(program, args, _help_of_argparse(entry, program), where)


def _check_module(module: str, args: list[str], where: str) -> None:
    helped = _help_of_argparse(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True), module)
    _assert_takes(f"python -m {module}", args, helped, where)


def _value_of(args: list[str], option: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == option]


def _check_fedpub(args: list[str], where: str) -> None:
    command, rest = _click_command(typer.main.get_command(fedpub_app), args)
    assert command.name != "fedpub" or not args, f"{where}: `fedpub {args[0]}` is not a fedpub command"
    command.make_context(command.name, list(rest), resilient_parsing=False)  # unknown option or bad value: raises
    name = args[0]
    if name not in ("run", "compare", "account"):
        return
    sets, runner = _value_of(rest, "--set"), CliRunner()
    if name == "account":
        result = runner.invoke(fedpub_app, args)
        assert result.exit_code == 0, f"{where}: {result.output}"
        return
    paths = [a for a in rest if a.endswith(".yaml") and not a.startswith("-") and a not in sets]
    if name == "compare":
        sweep = paths[0] if paths else None
        if sweep and (ROOT / sweep).is_file():
            load_sweep(ROOT / sweep, sets)
        return
    config = paths[0] if paths else None
    if config is not None and not (ROOT / config).is_file():  # a placeholder (CONFIG.yaml): the options are checked
        parse_config(apply_overrides(load_yaml(quickstart_config_path().read_text()), sets), source=where)
        return
    load_config(ROOT / config if config else quickstart_config_path(), sets)
    result = runner.invoke(fedpub_app, [*args, *([] if "--dry-run" in args else ["--dry-run"])])
    assert result.exit_code == 0, f"{where}: {result.output}"


def _bash_commands() -> dict[tuple[str, ...], str]:
    """Each distinct command of the shell blocks, and where it is first shown."""
    found: dict[tuple[str, ...], str] = {}
    for block in _of("bash"):
        for command in _commands(block.body):
            found.setdefault(tuple(command), str(block))
    return found


BASH_COMMANDS = _bash_commands()


@pytest.mark.parametrize("command", list(BASH_COMMANDS), ids=lambda c: f"{BASH_COMMANDS[c]} {' '.join(c)[:50]}")
def test_a_shell_command_is_one_its_program_takes(command: tuple[str, ...], in_a_fresh_folder: Path):
    where, (program, *args) = BASH_COMMANDS[command], command
    if program.endswith("/pip") or program.endswith("/python") or program in NOT_OURS:
        return
    if program in ("python", "python3"):
        assert args[0] == "-m", f"{where}: run a module of fedpub with `python -m`"
        if args[1] not in NOT_OURS_MODULES:
            _check_module(args[1], args[2:], where)
        return
    if program == "torchrun":  # torchrun's own options, then the module it starts with the arguments after it
        from torch.distributed.run import get_args_parser

        start = args.index("-m")
        launcher = " ".join(o for action in get_args_parser()._actions for o in action.option_strings)
        _assert_takes("torchrun", args[:start], launcher, where)
        assert args[start + 1] == "fedpub.simulations", f"{where}: torchrun starts fedpub as -m fedpub.simulations"
        _check_fedpub(args[start + 2:], where)
        return
    if program == "bash":
        assert (ROOT / args[0]).is_file(), f"{where}: no script {args[0]}"
        return
    if program in ("flwr", "mkdocs"):
        _check_click(program, args, where)
        return
    if program in ("flower-superlink", "flower-supernode"):
        _check_flower_server(program, args, where)
        return
    assert program == "fedpub", f"{where}: `{program}`: a program the tests do not know; add it to NOT_OURS if it " \
                                "is not fedpub's"
    _check_fedpub(args, where)


def test_a_renamed_option_or_field_fails_the_checks(in_a_fresh_folder: Path):
    """The checks can fail: an option fedpub does not have, a config key it does not have, a module's missing flag."""
    with pytest.raises(click.NoSuchOption):
        _check_fedpub(["run", "--rounds", "3"], "here")
    with pytest.raises(Exception, match="strategy.clip_nrom"):
        _check_fedpub(["run", "CONFIG.yaml", "--set", "strategy.clip_nrom=0.5"], "here")
    with pytest.raises(AssertionError, match="--node"):
        _check_module("fedpub.simulations.flower.deploy.local", ["--node", "3"], "here")
    fragment = load_yaml("strategy:\n  recenter: {centre_clip: 1.0}\n")
    with pytest.raises(Exception, match="centre_clip"):
        parse_config(_merged(load_yaml(quickstart_config_path().read_text()), fragment))

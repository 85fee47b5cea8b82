"""Bad input (issue 8): random and broken YAML through ``load_config``, valid configs with one field changed, and
``fedpub run`` on a bad config or a corrupted data directory. Every failure is a ConfigError or DatasetError that
names the file; ``fedpub run`` prints it as an ``error:`` line without a traceback and writes no run directory
(an existing one is left as it was). The data readers' own corrupted-file tests are in tests/data/."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import h5py
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from fedpub.config import ConfigError, dump_config, load_config
from fedpub.data.stackoverflow import TAG_COUNT_FILE, WORD_COUNT_FILE
from fedpub.data.stackoverflow_writers import SyntheticStackOverflowSpec, write_synthetic_stackoverflow
from fedpub.simulations.tools.cli import app
from fedpub.simulations.configs import quickstart_config_path
from tests.conftest import tiny_config

runner = CliRunner()
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RESOLVED = [yaml.safe_load(dump_config(load_config(p))) for p in sorted(quickstart_config_path().parent.glob("*.yaml"))]
"""The bundled experiment configs with every default filled in: every field of every section that is on."""


def _paths(raw: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The dotted paths of every key of a nested mapping."""
    out = []
    for key, value in raw.items():
        out.append((*prefix, key))
        if isinstance(value, dict):
            out += _paths(value, (*prefix, key))
    return out


KEYS = sorted({path[-1] for raw in RESOLVED for path in _paths(raw)})
keys = st.sampled_from(KEYS) | st.text(max_size=8) | st.integers(-3, 3)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(keys, children, max_size=3),
    max_leaves=12,
)


def _dump(raw: object) -> bytes:
    return yaml.safe_dump(raw, sort_keys=False, allow_unicode=True).encode()


def _broken(text: bytes, cut: float, inserts: list[tuple[float, str]]) -> bytes:
    """``text`` cut short, with YAML punctuation inserted at some places."""
    out = text[: int(cut * len(text))]
    for where, piece in inserts:
        i = int(where * len(out))
        out = out[:i] + piece.encode() + out[i:]
    return out


documents = st.one_of(
    st.dictionaries(st.sampled_from(list(RESOLVED[0])) | keys, values, max_size=5).map(_dump),
    values.map(_dump),
    st.builds(
        _broken,
        st.sampled_from(RESOLVED).map(_dump),
        st.floats(0, 1),
        st.lists(st.tuples(st.floats(0, 1), st.sampled_from(list("[]{}:,&*!|>'\"%@\t-?#\n") + ["\\x"])), max_size=3),
    ),
    st.binary(max_size=80),
    st.text(max_size=80).map(str.encode),
    st.just(b""),
)


def loads_or_names_the_file(content: bytes) -> str | None:
    """Load ``content`` as a config file: None when it loads, else the ConfigError's message (naming the file)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "exp.yaml"
        path.write_bytes(content)
        try:
            load_config(path)
        except ConfigError as error:
            assert str(path) in str(error)
            return str(error)
    return None


@SETTINGS
@given(documents)
def test_random_yaml_either_loads_or_raises_a_config_error_naming_the_file(document: bytes) -> None:
    event("loaded" if loads_or_names_the_file(document) is None else "ConfigError")


@SETTINGS
@given(
    raw=st.sampled_from(RESOLVED),
    data=st.data(),
    change=st.sampled_from(["set", "delete", "add"]),
    value=values,
)
def test_a_valid_config_with_one_field_changed_loads_or_names_the_field(
    raw: dict[str, Any], data: st.DataObject, change: str, value: object
) -> None:
    path = data.draw(st.sampled_from(_paths(raw)))
    changed = yaml.safe_load(_dump(raw))  # a deep copy
    section = changed
    for key in path[:-1]:
        section = section[key]
    named = path[0]
    if change == "set":
        section[path[-1]] = value
    elif change == "delete":
        del section[path[-1]]
    else:
        new_key = data.draw(keys.filter(lambda k: k not in section))
        section[new_key] = value
        named = str(next(iter(yaml.safe_load(_dump({new_key: 0})))))  # as YAML reads it back (NEL folds to a space)
    message = loads_or_names_the_file(_dump(changed))
    event("loaded" if message is None else "ConfigError")
    if message is not None:
        assert named in message


@pytest.mark.parametrize(
    "content",
    [
        b"name: \xff\xfe\n",  # not UTF-8
        b"rounds: " + b"[" * 5000 + b"]" * 5000 + b"\n",  # nested deeper than Python's recursion limit
        b"strategy: {name: [dope], noise_multiplier: 1}\n",  # an unhashable recipe name
        b'output_dir: "runs\\0x"\n',  # a NUL in a path
        b"a: &a [1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b]\n"
        b"rounds: [*c, *c, *c, *c, *c, *c, *c, *c]\n",  # aliases nesting a huge value
    ],
    ids=["not_utf8", "deep", "unhashable_name", "nul_in_path", "alias_bomb"],
)
def test_config_edge_cases_are_config_errors(content: bytes) -> None:
    message = loads_or_names_the_file(content)
    assert message is not None and len(message) < 2000


def test_a_directory_or_an_empty_file_as_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"cannot read config {tmp_path}: Is a directory")):
        load_config(tmp_path)
    empty = tmp_path / "empty.yaml"
    empty.write_bytes(b"")
    with pytest.raises(ConfigError, match=re.escape(f"{empty}: the file is empty")):  # a truncated file, say:
        load_config(empty)  # refused rather than run with every default
    utf16 = tmp_path / "utf16.yaml"
    utf16.write_bytes("rounds: 3\n".encode("utf-16"))  # YAML reads UTF-16 with a byte order mark
    assert load_config(utf16).rounds == 3


# ---------------------------------------------------------------------------------------------------------------
# `fedpub run` end to end.


def run_fails_cleanly(args: list[str], named: Path) -> str:
    """Invoke ``fedpub run``; check it failed with an ``error:`` line naming ``named`` and no traceback."""
    result = runner.invoke(app, ["run", *args])
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert any(line.startswith("error:") and str(named) in line for line in result.output.splitlines()), result.output
    return result.output


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in ``tmp_path``, so that default relative paths (runs/, data/) land there too."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "content",
    [
        b"name: \xff\xfe\n",
        b"rounds: [1, 2\n",
        b"rounds: many\n",
        b"strategy: {noise_multiplier: 1, '[/x]': 2}\n",  # rich markup in the message
        b"rounds: " + b"[" * 5000 + b"\n",
        b'output_dir: "runs\\0x"\n',
        b"strategy: {name: [dope], noise_multiplier: 1}\n",
        None,  # a directory
    ],
    ids=["not_utf8", "broken", "wrong_type", "markup", "deep", "nul_in_path", "unhashable_name", "directory"],
)
def test_run_with_a_bad_config(in_tmp: Path, content: bytes | None) -> None:
    config = in_tmp / "exp.yaml"
    if content is None:
        config.mkdir()
    else:
        config.write_bytes(content)
    run_fails_cleanly([str(config)], config)
    assert not (in_tmp / "runs").exists()


def _corrupt_emnist(directory: Path, how: str) -> Path:
    """Damage one of the tiny EMNIST files in ``directory``; returns the damaged file."""
    split = "test" if how == "test_pixels" else "train"
    path = directory / f"fed_emnist_digitsonly_{split}.h5"
    if how == "truncated":
        path.write_bytes(path.read_bytes()[:5000])
        return path
    with h5py.File(path, "a") as f:
        for client in f["examples"].values():  # every client: whichever are evaluated or sampled fail
            if how == "test_pixels":
                client["pixels"][0, 0, 0] = 2.0
            else:
                client["label"][0] = 99
    return path


@pytest.mark.parametrize("how", ["truncated", "test_pixels", "train_labels"])
def test_run_on_corrupted_emnist_files_writes_no_run_directory(tiny_emnist_dir: Path, in_tmp: Path, how: str) -> None:
    data = Path(shutil.copytree(tiny_emnist_dir, in_tmp / "data"))
    damaged = _corrupt_emnist(data, how)
    cfg = tiny_config(data, in_tmp / "runs", rounds=1, data={"source": "emnist_h5", "path": str(data)})
    config = in_tmp / "exp.yaml"
    config.write_text(dump_config(cfg))
    run_fails_cleanly([str(config)], damaged)
    assert not (in_tmp / "runs").exists()


def test_a_fresh_run_on_corrupted_data_leaves_the_existing_run_directory_as_it_was(
    tiny_emnist_dir: Path, in_tmp: Path
) -> None:
    data = Path(shutil.copytree(tiny_emnist_dir, in_tmp / "data"))
    damaged = _corrupt_emnist(data, "test_pixels")
    cfg = tiny_config(data, in_tmp / "runs", rounds=1, data={"source": "emnist_h5", "path": str(data)})
    config = in_tmp / "exp.yaml"
    config.write_text(dump_config(cfg))
    existing = in_tmp / "runs" / cfg.name
    existing.mkdir(parents=True)
    before = {"config.yaml": "name: an earlier run\n", "metrics.jsonl": '{"round": 0}\n', "notes.txt": "mine\n"}
    for name, text in before.items():
        (existing / name).write_text(text)
    run_fails_cleanly([str(config), "--fresh"], damaged)
    assert {p.name: p.read_text() for p in existing.iterdir()} == before


@pytest.mark.parametrize(
    ("name", "content"),
    [(TAG_COUNT_FILE, b"[" * 100_000), (WORD_COUNT_FILE, "the ²\n".encode())],  # JSON recursion; not int()
)
def test_run_on_corrupted_stackoverflow_count_files(in_tmp: Path, name: str, content: bytes) -> None:
    data = in_tmp / "so"
    spec = SyntheticStackOverflowSpec(num_clients=6, min_examples=1, max_examples=3, seed=0)
    write_synthetic_stackoverflow(data, spec, split="test")
    write_synthetic_stackoverflow(data, spec, split="train")
    (data / name).write_bytes(content)
    config = in_tmp / "exp.yaml"
    config.write_text(
        f"task: so_tag\ndevice: cpu\ndata: {{source: stackoverflow, path: {data}}}\nmodel: {{name: so_tag_logreg}}\n"
        "strategy: {noise_multiplier: 1, sampling: {clients_per_round: 2}}\n"
    )
    run_fails_cleanly([str(config)], data / name)
    assert not (in_tmp / "runs").exists()

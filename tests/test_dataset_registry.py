"""The dataset registry is the one place that knows the datasets (issue 20).

No module of fedpub's four packages names a dataset, except the registry and the dataset's own modules (those named
after it, ``fedpub/data/cifar100_writers.py`` or ``fedpub/models/cifar100.py``); the benchmarks and reproductions
choose their datasets the way a YAML config does, and are left out. A dataset's name here is its registered name,
its ``data.source`` values, its models and the tasks only it serves (neither their name nor their score is
another dataset's; their common prefix too, such as ``so_``),
matched case-insensitively and with an optional hyphen before digits (``CIFAR-100``): every word comes from the
registry, so a new dataset is covered without editing this file.

Every registered dataset is then known to each layer through its declaration alone: the config schema, the
experiment's model and task, ``fedpub data`` and the HDF5 recognition.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fedpub.config import ConfigError, dump_config, parse_config
from fedpub.data import registry
from fedpub.data.device_user import DeviceFormats
from fedpub.data.file_report import FileDescribers
from fedpub.data.spec import Dataset, resolve
from fedpub.models import build_model
from fedpub.simulations.tools.data_cli import data_app
from fedpub.simulations.run.session import run_changes
from fedpub.tasks import Task, get_task

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fedpub", "strategies", "clients", "simulations")
EXPERIMENTS = ("simulations/benchmarks", "simulations/reproductions")
"""Folders of experiments, which pick their datasets as a config does."""


def dataset_words(dataset: Dataset) -> list[str]:
    """The names that identify ``dataset`` in text (registered ones, and its own tasks' common prefix)."""
    others = [t for d in registry.DATASETS if d is not dataset for t in d.tasks]
    shared = {t.name for t in others} | {t.task for t in others}
    own_tasks = [t.name for t in dataset.tasks if t.name not in shared and t.task not in shared]
    prefix = os.path.commonprefix(own_tasks) if len(own_tasks) > 1 else ""
    # a dataset of no models of its own reads any table (its sources, huggingface, table, python, are ordinary words)
    sources = dataset.source_names if dataset.models else ()
    return [dataset.name, *sources, *dataset.model_names, *own_tasks] + (
        [prefix] if prefix.endswith("_") and len(prefix) > 2 else []
    )


def word_pattern(word: str) -> re.Pattern[str]:
    """``word`` case-insensitively, a hyphen allowed between its letters and digits; a prefix ending in ``_`` only
    at the start of a word."""
    body = re.sub(r"(?<=[a-z])(?=\d)", "-?", re.escape(word))
    return re.compile((r"(?<![a-z0-9])" if word.endswith("_") else "") + body, re.IGNORECASE)


def is_dataset_module(path: Path) -> bool:
    return any(d.name in path.stem for d in registry.DATASETS)


def generic_modules(root: Path) -> list[Path]:
    """The modules that must not name a dataset: every module of the packages but the registry, the datasets' own
    modules and the experiments."""
    return [
        path for package in PACKAGES for path in sorted((root / package).rglob("*.py"))
        if path != root / "fedpub" / "data" / "registry.py" and not is_dataset_module(path)
        and not any(path.is_relative_to(root / folder) for folder in EXPERIMENTS)
    ]


def naming_lines(paths: list[Path], root: Path) -> list[str]:
    patterns = [(d.name, word_pattern(w)) for d in registry.DATASETS for w in dataset_words(d)]
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            names = sorted({name for name, pattern in patterns if pattern.search(line)})
            if names:
                found.append(f"{path.relative_to(root)}:{number} names {', '.join(names)}: {line.strip()}")
    return found


def test_no_module_names_a_dataset_outside_the_registry_and_its_own_modules():
    found = naming_lines(generic_modules(ROOT), ROOT)
    assert not found, "dataset names outside the registry and the datasets' own modules:\n" + "\n".join(found)


def test_the_check_catches_names_in_code_strings_and_comments(tmp_path: Path):
    dataset = next(d for d in reversed(registry.DATASETS) if d.models)
    model = dataset.model_names[0]
    files = {
        "fedpub/loop.py": f'if config.model.name == "{model}":\n    pass\n',
        "fedpub/notes.py": f"# tuned on {dataset.name.upper()}\n",
        "clients/ok.py": "x = 1  # nothing dataset-specific\n",
        f"fedpub/data/{dataset.name}_reader.py": f'"""{dataset.name} files."""\n',
        "simulations/benchmarks/bench.py": f'SOURCE = "{dataset.source_names[0]}"\n',
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = naming_lines(generic_modules(tmp_path), tmp_path)
    assert [line.split(" names ")[0] for line in found] == ["fedpub/loop.py:1", "fedpub/notes.py:1"]
    assert word_pattern("cifar100").search("federated CIFAR-100") and word_pattern("so_").search('startswith("so_")')
    assert not word_pattern("so_").search("also_tagged")


def test_every_declared_reference_resolves_to_what_it_declares():
    for dataset in registry.DATASETS:
        assert isinstance(resolve(dataset.describers), FileDescribers)
        assert dataset.device is None or isinstance(resolve(dataset.device), DeviceFormats)
        functions = [s.splits for s in dataset.sources] + [s.generate for s in dataset.sources if s.generate]
        functions += [m.build for m in dataset.models] + [r for r in [dataset.token_frequencies] if r is not None]
        assert all(callable(resolve(ref)) for ref in functions)
        assert all(isinstance(get_task(task.name), Task) for task in dataset.tasks)


@pytest.mark.parametrize("dataset", registry.DATASETS, ids=lambda d: d.name)
def test_every_dataset_is_known_to_the_config_the_models_and_the_files_through_its_declaration(dataset: Dataset):
    for source in dataset.sources:
        for task in dataset.task_names:
            for model in dataset.model_names:
                config = parse_config({"data": {"source": source.name}, "task": task, "model": {"name": model}})
                assert registry.source(config.data.source)[0] is dataset
    other = next(d for d in registry.DATASETS if d is not dataset)
    with pytest.raises(ConfigError, match="does not go with data.source"):
        parse_config({"data": {"source": dataset.sources[0].name}, "model": {"name": other.models[0].name},
                      "task": dataset.tasks[0].name})
    assert {f.name for f in dataset.files} <= set(registry.remote_files())
    assert registry.dataset_of_client_fields(dataset.client_fields) is (dataset if dataset.client_fields else None)
    out = CliRunner().invoke(data_app, ["info", dataset.name]).output
    assert all(name in out for name in (*dataset.source_names, *dataset.task_names, *dataset.model_names))


def test_every_model_builds_deterministically_with_the_normalisation_it_declares():
    for name in registry.MODEL_NAMES:
        first, again = build_model(name, 10), build_model(name, 10)
        assert all(a.equal(b) for a, b in zip(first.parameters(), again.parameters()))


def test_a_registry_with_clashing_declarations_is_refused():
    source = registry.DATASETS[0]
    clone = Dataset(**{**source.__dict__, "name": "clone"})
    with pytest.raises(registry.RegistryError, match="data.source .* is declared twice"):
        registry._check((source, clone))
    with pytest.raises(ValueError, match=f"unknown dataset 'mnist'; allowed: {', '.join(registry.DATASET_NAMES)}"):
        registry.dataset("mnist")


def test_a_run_directory_holding_other_datasets_sections_is_the_same_run():
    """A config.yaml written when the resolved config held every dataset's data sections resumes; a change in the
    run's own dataset section does not."""
    config = parse_config({})
    raw = config.model_dump(mode="json")
    del raw["model"]["factory"], raw["model"]["kwargs"]  # fields newer than such a config.yaml, at their defaults
    every_section = yaml.safe_dump(raw, sort_keys=False)
    assert every_section != dump_config(config) and run_changes(every_section, dump_config(config)) == []
    changed = dump_config(parse_config({"data": {"only_digits": False}}))  # a field of the quick start's dataset
    assert run_changes(every_section, changed) == ["data.only_digits"]

"""The dataset registry: the one list of the datasets fedpub reads, and lookups over their declarations
(:mod:`fedpub.data.spec`).

The config schema takes ``data.source``, ``task`` and ``model.name`` values, the dataset's own ``data`` sections
and the public pools from here; the experiment runner, the ClientApp and ``fedpub data`` open, score, build and
describe a dataset through the code its declaration names. Adding a dataset is writing its modules and one line in
:data:`DATASETS` (docs/contributing.md). Light: importing the registry imports the declarations only (no torch, no
h5py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

from fedpub.data.cifar100_dataset import CIFAR100
from fedpub.data.emnist_dataset import EMNIST
from fedpub.data.remote_files import RemoteFile
from fedpub.data.spec import PUBLIC_POOLS, Dataset, ModelDeclaration, Source, TaskDeclaration
from fedpub.data.stackoverflow_dataset import STACKOVERFLOW
from fedpub.data.user_table_dataset import USER_TABLE

DATASETS: tuple[Dataset, ...] = (EMNIST, STACKOVERFLOW, CIFAR100, USER_TABLE)
"""Every dataset, in the order help texts and allowed-value lists show them."""
DEFAULT_SOURCE = "synthetic_emnist"
"""``data.source`` of a config that names none (the offline quick start); its dataset's first task and model are the
config's defaults, and ``data/<source>`` its default ``data.path``."""


class RegistryError(ValueError):
    """Two declarations disagree (a name declared twice, a task name bound to two scores, an unknown pool)."""


def _unique(kind: str, names: Iterable[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise RegistryError(f"{kind} {name!r} is declared twice")
        seen.add(name)


def _check(datasets: tuple[Dataset, ...]) -> None:
    _unique("dataset", (d.name for d in datasets))
    _unique("data.source", (s.name for d in datasets for s in d.sources))
    _unique("model", (m.name for d in datasets for m in d.models))
    _unique("data section field", (f for d in datasets for f in d.config_fields))
    _unique("file", (f.name for d in datasets for f in d.files))
    tasks: dict[str, TaskDeclaration] = {}
    for d in datasets:
        _unique(f"{d.name}'s task", d.task_names)
        if not d.sources or not d.tasks:
            raise RegistryError(f"dataset {d.name!r} declares no source or task")
        unknown = [p for p in d.public_pools if p not in PUBLIC_POOLS]
        if unknown or "train_fraction" not in d.public_pools:
            raise RegistryError(f"dataset {d.name!r}: public pools {d.public_pools}; allowed: {PUBLIC_POOLS}, "
                                "train_fraction always")
        for t in d.tasks:
            if tasks.setdefault(t.name, t).task != t.task:
                raise RegistryError(f"task {t.name!r} is declared by two datasets with different scores")


_check(DATASETS)

_BY_SOURCE: dict[str, tuple[Dataset, Source]] = {s.name: (d, s) for d in DATASETS for s in d.sources}
_TASKS: dict[str, TaskDeclaration] = {t.name: t for d in DATASETS for t in d.tasks}
_MODELS: dict[str, ModelDeclaration] = {m.name: m for d in DATASETS for m in d.models}

SOURCE_NAMES: tuple[str, ...] = tuple(_BY_SOURCE)
TASK_NAMES: tuple[str, ...] = tuple(_TASKS)
MODEL_NAMES: tuple[str, ...] = tuple(_MODELS)
DATASET_NAMES: tuple[str, ...] = tuple(d.name for d in DATASETS)


def _unknown(kind: str, name: str, allowed: Iterable[str]) -> ValueError:
    return ValueError(f"unknown {kind} {name!r}; allowed: {', '.join(allowed)}")


def dataset(name: str) -> Dataset:
    """The dataset called ``name``; a ValueError lists the registered ones."""
    for d in DATASETS:
        if d.name == name:
            return d
    raise _unknown("dataset", name, DATASET_NAMES)


def source(name: str) -> tuple[Dataset, Source]:
    """The dataset and source a ``data.source`` value names; a ValueError lists the allowed values."""
    try:
        return _BY_SOURCE[name]
    except KeyError:
        raise _unknown("data.source", name, SOURCE_NAMES) from None


def task(name: str) -> TaskDeclaration:
    """The declaration of task ``name``; a ValueError lists the allowed tasks."""
    try:
        return _TASKS[name]
    except KeyError:
        raise _unknown("task", name, TASK_NAMES) from None


def model(name: str) -> ModelDeclaration:
    """The declaration of model ``name``; a ValueError lists the allowed models."""
    try:
        return _MODELS[name]
    except KeyError:
        raise _unknown("model", name, sorted(MODEL_NAMES)) from None


def default_task() -> str:
    return source(DEFAULT_SOURCE)[0].tasks[0].name


def default_model() -> str:
    return source(DEFAULT_SOURCE)[0].models[0].name


def data_fields() -> dict[str, tuple[Any, Any]]:
    """The ``data`` section's dataset fields (name -> pydantic field definition), in registry order."""
    return {name: definition for d in DATASETS for name, definition in d.config_fields.items()}


def sources_where(keep: Callable[[Dataset, Source], bool]) -> list[str]:
    """The ``data.source`` values whose (dataset, source) ``keep`` accepts (for the allowed values of a message)."""
    return [name for name, (d, s) in _BY_SOURCE.items() if keep(d, s)]


def remote_files() -> dict[str, RemoteFile]:
    """Every downloadable file, by name."""
    return {f.name: f for d in DATASETS for f in d.files}


def dataset_of_client_fields(fields: Collection[str]) -> Dataset | None:
    """The dataset whose HDF5 client groups hold ``fields`` (the most specific one, if several match)."""
    matches = [d for d in DATASETS if d.client_fields and d.client_fields <= set(fields)]
    return max(matches, key=lambda d: len(d.client_fields), default=None)


def dataset_of_sqlite_splits(splits: Collection[str]) -> Dataset | None:
    """The dataset whose SQLite database has the split names ``splits`` (none when they are not one dataset's)."""
    return next((d for d in DATASETS if splits and set(splits) <= set(d.sqlite_splits)), None)

"""What a dataset declares to fedpub: its sources (one per file layout, and its look-alike files), tasks, models,
public-user pools, config sections, downloadable files and the describers ``fedpub data info|verify`` uses.

A declaration is plain data: the code it names (readers, writers, models, task scores) is a reference
``"package.module:attribute"`` imported on first use (:func:`resolve`), so the config schema, which reads the
declarations' names, loads neither torch nor h5py (``tests/test_layers.py``). A reference to a module in the current
folder imports as under ``python -m`` (the folder appended to ``sys.path``, after fedpub's own packages).
:mod:`fedpub.data.registry` lists the declared datasets; nothing else in fedpub names one.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import AfterValidator

from fedpub.data.remote_files import RemoteFile

PUBLIC_POOLS: tuple[str, ...] = ("train_fraction", "heldout")
"""Where public users can come from: a seeded fraction of the training users (any dataset), or a dataset's own
held-out split (where it declares one)."""


_REFERENCE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def resolve(ref: str) -> Any:
    """The attribute a reference ``"package.module:attribute"`` names (``attribute`` may be dotted, e.g.
    ``Class.method``), its module imported now."""
    if not _REFERENCE.fullmatch(ref):
        raise ValueError(f"a reference is 'package.module:attribute', got {ref!r}")
    module, _, attribute = ref.partition(":")
    return functools.reduce(getattr, attribute.split("."), _import(module))


CONFIG_FOLDERS: list[str] = []
"""The folders of the config files read in this process (:func:`config_folder`), searched after the current one."""


def config_folder(folder: str) -> None:
    """Let references import modules that lie in ``folder``, a config file's folder (as ``python script.py`` finds
    the modules beside the script), after those of the current folder."""
    if folder not in CONFIG_FOLDERS:
        CONFIG_FOLDERS.append(folder)


def _import(module: str) -> Any:
    """``module`` imported; one whose top-level package is nowhere on ``sys.path`` but in the current folder (a
    ``fedpub`` command run beside the user's ``models.py``, which ``python -m`` would find) or in a config file's
    folder (:func:`config_folder`) is imported from there, that folder appended to ``sys.path`` (never first: a
    user's ``strategies.py`` cannot shadow an installed package) and only when it holds the package."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as missing:
        top = module.partition(".")[0]
        if missing.name != top:
            raise
        holding = [folder for folder in (os.getcwd(), *CONFIG_FOLDERS)
                   if folder not in sys.path and importlib.machinery.PathFinder.find_spec(top, [folder]) is not None]
        if not holding:
            raise
    sys.path.append(holding[0])
    return importlib.import_module(module)


def importable(ref: str) -> str:
    """``ref`` if it names a callable that imports here, else a ValueError saying why (a config field's validator:
    a user's model factory, loss, metric or transform; the code it imports runs now, as it will on every node)."""
    if not _REFERENCE.fullmatch(ref):
        raise ValueError("a reference is 'package.module:attribute' (e.g. mypackage.models:make_model)")
    try:
        target = resolve(ref)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{ref!r} does not import ({type(exc).__name__}: {exc}); it must be importable on this "
                         "Python path (or from the current folder), and on every node that trains") from None
    if not callable(target):
        raise ValueError(f"{ref!r} is a {type(target).__name__}, not a callable")
    return ref


Reference = Annotated[str, AfterValidator(importable)]
"""A config field naming user code: ``"package.module:attribute"``, imported and checked when the config is read."""


@dataclass(frozen=True)
class Source:
    """One value of ``data.source``: a file layout of the dataset (or its look-alike files)."""

    name: str
    reads: str
    """What ``data.path`` holds for this source, in words (help texts and error messages)."""
    splits: str
    """Reference to ``(config: ExperimentConfig) -> Splits``: the source's train, test (and held-out) users."""
    generate: str | None = None
    """Reference to ``(config: ExperimentConfig) -> None`` writing look-alike files into ``data.path`` first
    (generated once, then reused); ``None`` for files fedpub only reads."""

    @property
    def generated(self) -> bool:
        return self.generate is not None


@dataclass(frozen=True)
class TaskDeclaration:
    """A value of ``task``: how the model's outputs are scored (loss and metrics)."""

    name: str
    summary: str
    task: str
    """Reference to the :class:`fedpub.tasks.Task`. Two datasets may declare the same task name only with the
    same reference (a task is shared, e.g. plain classification)."""


@dataclass(frozen=True)
class ModelDeclaration:
    """A value of ``model.name``: ``build(num_classes) -> torch.nn.Module`` and what its initialiser must know."""

    name: str
    summary: str
    build: str
    """Reference to a callable ``(num_classes: int) -> torch.nn.Module``."""
    normalization: tuple[str, ...] = ()
    """The torch normalisation layers the model uses (class names, e.g. ``"GroupNorm"``). The initialiser refuses
    any other: a normalisation layer is a modelling decision under DP (batch statistics mix examples; running
    statistics are state no aggregation averages), so a model states it rather than picking it up silently."""
    bag_of_words_weight: str | None = None
    """The parameter holding a (classes × vocabulary) input weight, which a token-frequency preconditioner
    (AdaDPS) divides; ``None`` for models without one."""


@dataclass(frozen=True)
class Dataset:
    """Everything fedpub knows about one federated dataset."""

    name: str
    title: str
    reference: str
    """Where its layout and preprocessing come from (TFF's loader and baseline files)."""
    sources: tuple[Source, ...]
    tasks: tuple[TaskDeclaration, ...]
    """The tasks its sources serve; the first is a config's default."""
    models: tuple[ModelDeclaration, ...]
    """Its models; the first is a config's default. None: a config names its own (``model.factory``)."""
    files: tuple[RemoteFile, ...]
    """What ``fedpub data download`` fetches."""
    client_fields: frozenset[str]
    """The datasets in each ``/examples/<client_id>/`` group of its TFF HDF5 files: how ``fedpub data info`` and
    ``export-user`` recognise one of its files."""
    describers: str
    """Reference to its :class:`fedpub.data.file_report.FileDescribers` (``fedpub data info|verify``)."""
    config_fields: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    """The ``data`` section's fields it adds: ``name -> (annotation, default)`` (a pydantic field definition)."""
    public_pools: tuple[str, ...] = ("train_fraction",)
    """The ``data.public.pool`` values it supports (of :data:`PUBLIC_POOLS`); ``heldout`` needs a source that
    opens a held-out split."""
    sqlite_splits: tuple[str, ...] = ()
    """The split names of its TFF SQLite database, by which ``fedpub data info`` recognises one."""
    device: str | None = None
    """Reference to its :class:`fedpub.data.device_user.DeviceFormats` (one user's data on a Flower SuperNode,
    ``fedpub data export-user``); ``None`` when a device cannot hold it."""
    token_frequencies: str | None = None
    """Reference to ``(config: ExperimentConfig) -> list[float]``, the counts of the model's input vocabulary in
    order (AdaDPS's ``precondition.source: token_frequency``); ``None`` when it has no vocabulary."""

    @property
    def task_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tasks)

    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.models)

    @property
    def source_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sources)

"""`fedpub data`: the registered datasets, what a dataset file holds, whether it is intact, and downloading TFF's
public files. Every dataset-specific answer comes from the dataset registry (:mod:`fedpub.data.registry`).

    fedpub data info DATASET|PATH       a dataset's declaration (sources, tasks, models, files), or one file's layout,
                                        clients, examples, classes and size
    fedpub data verify PATH_OR_DIR      registry checksums (where published), every example read as a run reads it;
                                        exit 1 on a problem
    fedpub data verify --config CFG     the config's data opened and every user read by `fedpub run`'s readers
    fedpub data download NAME [--dir]   resumable, verified download of a file of the registry, or of a dataset's one
                                        file (fedpub.data.download)
    fedpub data export-user FILE ID OUT one user of a TFF HDF5 file as a device's data: a folder or a one-user file

The commands import what they use when they run (:mod:`fedpub.simulations.tools.data_inspect`, the readers, the download), so
``fedpub --help`` loads neither h5py nor torch (the registry is declarations only).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional, cast

import typer
from rich.console import Console
from rich.markup import escape

from fedpub.data import registry

if TYPE_CHECKING:
    from fedpub.data.file_report import FileReport
    from fedpub.data.spec import Dataset

DATASETS_HELP = ", ".join(registry.DATASET_NAMES)
data_app = typer.Typer(
    name="data", add_completion=False, no_args_is_help=True,
    help=f"Datasets ({DATASETS_HELP}) and their files: describe, inspect, verify, download.",
    pretty_exceptions_enable=False, pretty_exceptions_show_locals=False,  # cli.main() reports errors, with no locals
)
console = Console()


def _fail(error: Exception) -> None:
    from fedpub.simulations.tools.error_report import expected_message

    console.print(f"[bold red]error:[/] {escape(expected_message(error))}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _print_report(report: FileReport) -> None:
    console.print(f"[bold]{escape(str(report.path))}[/]: {report.layout}", highlight=False, soft_wrap=True)
    for label, value in report.facts:
        console.print(f"  {label}: {escape(value)}", highlight=False, soft_wrap=True)
    for problem in report.problems:  # escaped: a value such as [b'1'] is not rich markup
        console.print(f"  [bold red]problem:[/] {escape(problem)}", highlight=False, soft_wrap=True)


def _print_dataset(dataset: Dataset) -> None:
    """What the registry declares about ``dataset``."""
    lines = [f"layout and preprocessing from: {dataset.reference}"]
    lines += [f"data.source {s.name}: data.path holds {s.reads}" for s in dataset.sources]
    lines += [f"task {t.name}: {t.summary}" for t in dataset.tasks]
    lines += [f"model.name {m.name}: {m.summary}" for m in dataset.models]
    lines += [f"data.public.pool: {' | '.join(dataset.public_pools)}"]
    lines += [f"download {f.name}: {' or '.join(f.urls)}; {f.checksum_note()}" for f in dataset.files]
    console.print(f"[bold]{escape(dataset.name)}[/]: {escape(dataset.title)}", highlight=False, soft_wrap=True)
    for line in lines:  # escaped: a file name such as x[_y]_z.h5 is not rich markup
        console.print(f"  {escape(line)}", highlight=False, soft_wrap=True)


@data_app.command()
def info(
    target: Annotated[str, typer.Argument(help=f"a dataset ({DATASETS_HELP}) or a dataset file", show_default=False)],
) -> None:
    """What fedpub knows about a dataset (its sources, tasks, models and files), or what a dataset file holds:
    layout, clients, examples, classes, size (exit 1 if it is malformed).

    TARGET: a registered dataset's name, or a dataset file."""
    from fedpub.data.base import DatasetError
    from fedpub.simulations.tools.data_inspect import inspect_path

    path = Path(target)
    if not path.exists() and target in registry.DATASET_NAMES:
        _print_dataset(registry.dataset(target))
        return
    if not path.is_file():
        _fail(FileNotFoundError(f"{path} is not a file (nor a dataset: {DATASETS_HELP})"))
    with console.status(f"reading {path}"):
        report = inspect_path(path, deep=False)
    if report is None:
        _fail(DatasetError(f"{path} is not a dataset file fedpub recognises (a file of {DATASETS_HELP}, or a TFF "
                           "archive)"))
    _print_report(report)
    if report.problems:
        raise typer.Exit(1)


@data_app.command()
def verify(
    path: Annotated[Optional[Path], typer.Argument(help="a dataset file, or a directory of them")] = None,
    config: Annotated[Optional[Path], typer.Option(
        "--config", help="verify this experiment's data as `fedpub run` reads it (every user read)")] = None,
) -> None:
    """Registry checksums where published, and every example of every dataset file read as a run reads it (TFF's
    largest database takes hours); with --config, the config's data opened and every user read by the readers
    `fedpub run` uses, the model's preflight included (so a config that verifies is one a run accepts). Exit 1 on
    any problem.

    PATH: a dataset file, or a directory of them."""
    if config is not None:
        _verify_config(config, path)
        return
    if path is None:
        _fail(ValueError("give a PATH (a dataset file or a directory of them) or --config CONFIG.yaml"))
    from fedpub.simulations.tools.data_inspect import describe_hf_folder, hf_folder, inspect_path

    if not path.exists():
        _fail(FileNotFoundError(f"{path} does not exist"))
    if path.is_dir() and hf_folder(path):  # one dataset, not a folder of dataset files
        with console.status(f"opening {path}"):
            report = describe_hf_folder(path)
        _print_report(report)
        console.print("  [bold red]FAILED[/]" if report.problems else "  [bold green]ok[/]", highlight=False)
        if report.problems:
            raise typer.Exit(1)
        return
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")) if path.is_dir() else [path]
    checked = failed = 0
    for file in files:
        if file.name.endswith(".part"):
            console.print(
                f"{file}: incomplete download; `fedpub data download {file.name.removesuffix('.part')} "
                f"--dir {file.parent}` resumes it",
                highlight=False,
                soft_wrap=True,
            )
            continue
        with console.status(f"verifying {file}"):
            report = inspect_path(file, deep=True)
        if report is None:
            console.print(f"{file}: skipped (not a dataset file fedpub knows)", highlight=False, soft_wrap=True)
            continue
        checked += 1
        failed += bool(report.problems)
        _print_report(report)
        console.print(
            "  [bold red]FAILED[/]" if report.problems else "  [bold green]ok[/]", highlight=False, soft_wrap=True
        )
    if checked == 0:
        console.print(f"[bold red]no dataset files in {path}[/]", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    console.print(f"{checked - failed} of {checked} file(s) ok", highlight=False)
    if failed:
        raise typer.Exit(1)


def _verify_config(config: Path, path: Optional[Path]) -> None:
    """``verify --config``: the config's data read by the run's readers (:mod:`fedpub.simulations.tools.data_verify`);
    exit 1, with the run's one-line refusal, when a run would refuse it."""
    from fedpub.simulations.tools.data_verify import verify_config
    from fedpub.simulations.tools.error_report import expected_message

    if path is not None:
        _fail(ValueError("give a PATH or --config, not both: the config names its data (data.path)"))
    if not config.is_file():
        _fail(FileNotFoundError(f"--config {config}: no such file"))
    try:
        with console.status(f"reading the data of {config} as a run does") as status:
            facts = verify_config(config, lambda line: status.update(line))
    except (ValueError, FileNotFoundError) as error:
        console.print(f"[bold]{escape(str(config))}[/]: [bold red]FAILED[/]: {escape(expected_message(error))}", highlight=False,
                      soft_wrap=True)
        raise typer.Exit(1) from None
    console.print(f"[bold]{escape(str(config))}[/]: its data as `fedpub run` reads it", highlight=False, soft_wrap=True)
    for label, value in facts:
        console.print(f"  {label}: {escape(value)}", highlight=False, soft_wrap=True)
    console.print("  [bold green]ok[/]", highlight=False, soft_wrap=True)


def _remote_file(name: str) -> str:
    """The registry file ``name`` names: itself, or a dataset's only file; a DatasetError lists the choices."""
    from fedpub.data.base import DatasetError

    if name in registry.DATASET_NAMES:
        files = [f.name for f in registry.dataset(name).files]
        if len(files) != 1:
            raise DatasetError(f"dataset {name} has {len(files)} files: name one of {', '.join(files)}")
        return files[0]
    return name


@data_app.command("download")
def download_command(
    name: Annotated[str, typer.Argument(help="a file of the registry, or a dataset with one file")],
    directory: Annotated[Path, typer.Option("--dir", help="where to put the file(s)")] = Path("data"),
    url: Annotated[Optional[str], typer.Option(help="fetch from this URL instead (a local mirror)")] = None,
) -> None:
    """Download a TFF dataset file (resumable), verify it and extract archives.

    NAME is a file of the registry (`fedpub data info DATASET` lists a dataset's files; an unknown name lists them
    all), or a dataset that has one file. A file already in --dir that verifies is reused, so copying a file there by
    hand and running this extracts it offline.
    """
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from fedpub.data.base import DatasetError
    from fedpub.data.download import download, registry_entry
    from fedpub.data.file_report import size_text

    try:
        entry = registry_entry(_remote_file(name))
    except DatasetError as error:
        _fail(error)
    progress = Progress(
        TextColumn(entry.name), BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=console
    )
    with progress:
        task = progress.add_task("download", total=None)

        def on_progress(done: int, total: int | None) -> None:
            progress.update(task, completed=done, total=total)

        try:
            files = download(entry.name, directory, url=url, progress=on_progress)
        except (DatasetError, OSError) as error:
            progress.stop()
            _fail(error)
    console.print(f"{entry.name}: {entry.checksum_note()}", highlight=False, soft_wrap=True)
    for file in files:
        console.print(f"  {file} ({size_text(os.path.getsize(file))})", highlight=False, soft_wrap=True)


@data_app.command("export-user")
def export_user_command(
    source: Annotated[Path, typer.Argument(help="a TFF HDF5 file of a dataset with device formats")],
    client_id: Annotated[str, typer.Argument(help="the user to export")],
    out: Annotated[Path, typer.Argument(help="a new folder, or with --format tff a new .h5 file")],
    fmt: Annotated[str, typer.Option("--format", help="folder (the dataset's plain folder) or tff (one-user HDF5)")] = (
        "folder"
    ),
) -> None:
    """Write one user of a TFF file as the data a device holds (its SuperNode's ``data-path``): the dataset's plain
    folder (docs/deployment.md lists each dataset's), or a one-user TFF file.

    SOURCE: a TFF HDF5 file; CLIENT_ID: the user to export; OUT: a new folder, or with --format tff a new .h5 file."""
    from fedpub.data.base import DatasetError
    from fedpub.data.device_user import ExportFormat
    from fedpub.data.device_user_writers import export_user

    if fmt not in ("folder", "tff"):
        _fail(ValueError(f"--format must be folder or tff, got {fmt!r}"))
    try:
        written = export_user(source, client_id, out, fmt=cast(ExportFormat, fmt))
    except (DatasetError, KeyError, OSError) as error:
        _fail(error)
    console.print(f"user {client_id} written to {written}", highlight=False, soft_wrap=True)

"""`fedpub data`: what a dataset file holds, whether it is intact, and downloading TFF's public files.

    fedpub data info PATH               layout, clients, examples, classes and size of one file
    fedpub data verify PATH_OR_DIR      registry checksums (where published), every example read as a run reads it;
                                        exit 1 on a problem
    fedpub data download NAME [--dir]   resumable, verified download of a file from the registry (fedpub.data.download)
    fedpub data export-user FILE ID OUT one user of a TFF HDF5 file as a device's data: a folder or a one-user file

The commands import what they use when they run (:mod:`fedpub.simulations.data_inspect`, the readers, the download), so
``fedpub --help`` loads neither h5py nor torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional, cast

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from fedpub.simulations.data_inspect import FileReport

data_app = typer.Typer(
    name="data", add_completion=False, no_args_is_help=True, help="Dataset files: inspect, verify, download."
)
console = Console()

def _fail(error: Exception) -> None:
    console.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _print_report(report: FileReport) -> None:
    console.print(f"[bold]{escape(str(report.path))}[/]: {report.layout}", highlight=False, soft_wrap=True)
    for label, value in report.facts:
        console.print(f"  {label}: {escape(value)}", highlight=False, soft_wrap=True)
    for problem in report.problems:  # escaped: a value such as [b'1'] is not rich markup
        console.print(f"  [bold red]problem:[/] {escape(problem)}", highlight=False, soft_wrap=True)


@data_app.command()
def info(path: Annotated[Path, typer.Argument(help="a dataset file")]) -> None:
    """What a dataset file holds: layout, clients, examples, classes, size (exit 1 if it is malformed).

    PATH: a dataset file."""
    from fedpub.data.base import DatasetError
    from fedpub.simulations.data_inspect import inspect_path

    if not path.is_file():
        _fail(FileNotFoundError(f"{path} is not a file"))
    with console.status(f"reading {path}"):
        report = inspect_path(path, deep=False)
    if report is None:
        _fail(DatasetError(f"{path} is not a dataset file fedpub recognises (EMNIST, StackOverflow or TFF archive)"))
    _print_report(report)
    if report.problems:
        raise typer.Exit(1)


@data_app.command()
def verify(path: Annotated[Path, typer.Argument(help="a dataset file, or a directory of them")]) -> None:
    """Registry checksums where published, and every example of every dataset file read as a run reads it (so a
    file that verifies is one a run accepts; TFF's StackOverflow database takes hours); exit 1 on any problem.

    PATH: a dataset file, or a directory of them."""
    from fedpub.simulations.data_inspect import inspect_path

    if not path.exists():
        _fail(FileNotFoundError(f"{path} does not exist"))
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


@data_app.command("download")
def download_command(
    name: Annotated[str, typer.Argument(help="a file of the registry")],
    directory: Annotated[Path, typer.Option("--dir", help="where to put the file(s)")] = Path("data"),
    url: Annotated[Optional[str], typer.Option(help="fetch from this URL instead (a local mirror)")] = None,
) -> None:
    """Download a TFF dataset file (resumable), verify it and extract archives.

    NAME is a file of the registry, e.g. fed_emnist.tar.bz2, emnist_all.sqlite.lzma or stackoverflow.tar.bz2 (an
    unknown name lists them all). A file already in --dir that verifies is reused, so copying a file there by hand
    and running this extracts it offline.
    """
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from fedpub.data.base import DatasetError
    from fedpub.data.download import download, registry_entry
    from fedpub.simulations.data_inspect import size_text

    try:
        entry = registry_entry(name)
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
            files = download(name, directory, url=url, progress=on_progress)
        except (DatasetError, OSError) as error:
            progress.stop()
            _fail(error)
    console.print(f"{entry.name}: {entry.checksum_note()}", highlight=False, soft_wrap=True)
    for file in files:
        console.print(f"  {file} ({size_text(os.path.getsize(file))})", highlight=False, soft_wrap=True)


@data_app.command("export-user")
def export_user_command(
    source: Annotated[Path, typer.Argument(help="a TFF HDF5 file (EMNIST or StackOverflow)")],
    client_id: Annotated[str, typer.Argument(help="the user to export")],
    out: Annotated[Path, typer.Argument(help="a new folder, or with --format tff a new .h5 file")],
    fmt: Annotated[str, typer.Option("--format", help="folder (PNG images or posts.jsonl) or tff (one-user HDF5)")] = (
        "folder"
    ),
) -> None:
    """Write one user of a TFF file as the data a device holds (its SuperNode's ``data-path``): EMNIST as
    ``OUT/<label>/<n>.png``, StackOverflow as ``OUT/posts.jsonl`` with the count files; or a one-user TFF file.

    SOURCE: a TFF HDF5 file (EMNIST or StackOverflow); CLIENT_ID: the user to export; OUT: a new folder, or with
    --format tff a new .h5 file."""
    from fedpub.data.base import DatasetError
    from fedpub.data.device_user_writers import DeviceFormat, export_user

    if fmt not in ("folder", "tff"):
        _fail(ValueError(f"--format must be folder or tff, got {fmt!r}"))
    try:
        written = export_user(source, client_id, out, fmt=cast(DeviceFormat, fmt))
    except (DatasetError, KeyError, OSError) as error:
        _fail(error)
    console.print(f"user {client_id} written to {written}", highlight=False, soft_wrap=True)

"""How a config's ``data`` section opens a table of examples with a user column, one function per ``data.source`` of
its declaration (:mod:`fedpub.data.user_table_dataset`): a Hugging Face dataset (``datasets.load_from_disk`` of
``data.path``, or ``datasets.load_dataset`` of ``data.table.hub``), Parquet/Arrow/CSV files (``pyarrow.dataset``),
or the users handed to ``fedpub.run(config, data=...)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedpub.config import ExperimentConfig
from fedpub.data.base import DatasetError, Splits
from fedpub.data.file_report import Describer, FileDescribers, FileReport
from fedpub.data.user_table import (
    ColumnRows,
    UserTable,
    arrow_values,
    check_columns,
    check_no_nulls,
    label_classes,
)
from fedpub.data.user_table_dataset import TableConfig

_EXTRA = "install fedpub's `hf` extra (pip install 'fedpub[hf]')"


def _datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise DatasetError(f"data.source huggingface reads with the `datasets` library: {_EXTRA}") from None
    return datasets


def _hf_split(config: ExperimentConfig, split: str, path: Path | None = None) -> Any:
    datasets, table = _datasets(), config.data.table
    if table.hub is not None and path is None:
        try:
            return datasets.load_dataset(table.hub, split=split)
        except (ConnectionError, OSError) as error:  # offline, or the Hub unreachable (requests' errors are OSErrors)
            raise DatasetError(
                f"data.table.hub {table.hub!r}: cannot load it from the Hugging Face Hub ({type(error).__name__}); "
                "offline, save it with save_to_disk where there is a network, then set data.path to that folder and "
                "data.table.hub: null") from None
    path = path or config.data.path
    if not path.is_dir():
        raise DatasetError(f"data.path {path}: no Hugging Face dataset folder there (write one with save_to_disk, "
                           "or set data.table.hub to load one by name)")
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise DatasetError(f"data.table split {split!r} is not a split of {path}; its splits: "
                               f"{', '.join(loaded)}")
        return loaded[split]
    return loaded


def _declared_dtype(feature: Any) -> np.dtype | None:
    """The integer dtype a Hugging Face feature declares for its values (``Array2D(dtype="uint8")``, lists of
    ``Value("uint8")``), which its numpy format widens to int64: 8-bit images must stay 8-bit, so that the auto
    transform scales them to v/255 and gives them a channel axis. None: nothing to restore (floats, images, text)."""
    while not hasattr(feature, "dtype") and hasattr(feature, "feature"):  # Sequence, List: their items' feature
        feature = feature.feature
    dtype = getattr(feature, "dtype", None)
    try:
        declared = np.dtype(dtype) if isinstance(dtype, str) else None
    except TypeError:  # a dtype name numpy does not know (string, timestamp...)
        return None
    return declared if declared is not None and np.issubdtype(declared, np.integer) else None


def hf_users(config: ExperimentConfig, split: str, path: Path | None = None) -> tuple[UserTable, Any]:
    """The users of ``split`` of the config's Hugging Face dataset (of the folder ``path``, when given), and its
    user (and public) columns as a pyarrow table."""
    table = config.data.table
    dataset = _hf_split(config, split, path)
    where = f"{path or table.hub or config.data.path} ({split})"
    check_columns(list(dataset.column_names), table, where)
    label = dataset.features[table.y]
    labels = dataset.with_format("arrow", columns=[table.y])[:][table.y]
    check_no_nulls(labels, "y", table.y, where)
    num_classes = table.num_classes or getattr(label, "num_classes", None) or label_classes(labels, table, where)
    inputs = table.x_columns()
    values = dataset.with_format("numpy", columns=[*inputs, table.y])
    declared = [_declared_dtype(dataset.features[c]) for c in inputs]

    def rows(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        batch = values[indices]
        xs = [np.asarray(batch[c]) for c in inputs]
        xs = [x.astype(d) if d is not None and x.dtype != d else x for x, d in zip(xs, declared, strict=True)]
        return (xs[0] if len(xs) == 1 else np.stack(xs, axis=1)), np.asarray(batch[table.y])

    columns = [table.user] + ([table.public] if table.public is not None else [])
    arrow = dataset.with_format("arrow", columns=columns)[:]
    return UserTable(arrow[table.user], rows, table, num_classes, where), arrow


def open_huggingface(config: ExperimentConfig) -> Splits:
    """The training users of ``data.table.split``, the test users of ``data.table.test_split`` (or the same)."""
    table = config.data.table
    train, columns = hf_users(config, table.split)
    test = train if table.test_split is None else hf_users(config, table.test_split)[0]
    public = None if table.public is None else train.marked(columns[table.public], table.public)
    return Splits(train, test, public_ids=public)


_FORMATS = {".parquet": "parquet", ".arrow": "ipc", ".feather": "ipc", ".ipc": "ipc", ".csv": "csv"}


def _csv_format() -> Any:
    """CSV read with only the words true/false as booleans: pyarrow's default also reads 1 and 0 as booleans in a
    column that mixes them with true (a row of 1 made public through ``data.table.public``)."""
    import pyarrow.csv as pcsv
    import pyarrow.dataset as ds

    words = pcsv.ConvertOptions(true_values=["true", "True", "TRUE"], false_values=["false", "False", "FALSE"])
    return ds.CsvFileFormat(convert_options=words)


def read_table(path: Path) -> Any:
    """The rows of the Parquet, Arrow (IPC file or stream) or CSV file(s) at ``path`` (a folder: its files of one
    format, in name order)."""
    try:
        import pyarrow as pa
        import pyarrow.dataset as ds
    except ImportError:
        raise DatasetError(f"data.source table reads with pyarrow: {_EXTRA}") from None
    files = sorted(p for p in path.iterdir() if p.suffix in _FORMATS) if path.is_dir() else [path]
    if not files or not path.exists():
        raise DatasetError(f"data.path {path}: no {', '.join(_FORMATS)} file there")
    formats = {_FORMATS.get(f.suffix) for f in files}
    if len(formats) != 1 or None in formats:
        raise DatasetError(f"data.path {path}: one format of {', '.join(_FORMATS)} expected, got "
                           f"{', '.join(sorted(f.name for f in files))}")
    fmt = formats.pop()
    if fmt == "ipc":
        return pa.concat_tables([_open_arrow(f) for f in files])
    return ds.dataset([str(f) for f in files], format=_csv_format() if fmt == "csv" else fmt).to_table()


def table_users(path: Path, table: TableConfig) -> tuple[UserTable, Any]:
    """The users of the table file(s) at ``path``, read with the columns of ``table``, and the pyarrow table."""
    arrow = read_table(path)
    check_columns(arrow.column_names, table, str(path))
    for field, name in [*(("x", c) for c in table.x_columns()), ("y", table.y)]:
        check_no_nulls(arrow.column(name), field, name, str(path))
    xs, y = [ColumnRows(arrow.column(c)) for c in table.x_columns()], ColumnRows(arrow.column(table.y))

    def rows(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        inputs = [arrow_values(x.take(indices)) for x in xs]  # a column per feature: stacked, (N, features)
        return (inputs[0] if len(inputs) == 1 else np.stack(inputs, axis=1)), arrow_values(y.take(indices))

    num_classes = label_classes(arrow.column(table.y), table, str(path))
    return UserTable(arrow.column(table.user), rows, table, num_classes, str(path)), arrow


def open_table(config: ExperimentConfig) -> Splits:
    """Every row of the file(s) at ``data.path``; the test users are the same users (evaluation users held out)."""
    table = config.data.table
    users, arrow = table_users(config.data.path, table)
    public = None if table.public is None else users.marked(arrow.column(table.public), table.public)
    return Splits(users, users, public_ids=public)


def open_python(config: ExperimentConfig) -> Splits:
    raise DatasetError("data.source python: the users are given to fedpub.run(config, data=...) from Python; "
                       "a run from the command line or a Flower app reads data.source huggingface or table")


def _not_hdf5(path: Path, report: FileReport, deep: bool) -> None:
    raise DatasetError(f"{path}: a table of examples is a Parquet, Arrow or CSV file, not HDF5")


def _open_arrow(path: Path) -> Any:
    """An Arrow file, in the IPC file format (Feather v2) or the stream format (Hugging Face's save_to_disk shards),
    memory-mapped (the rows are read from the page cache when taken)."""
    import pyarrow as pa

    try:
        return pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    except pa.ArrowInvalid:
        return pa.ipc.open_stream(pa.memory_map(str(path))).read_all()


def _describe_table(path: Path, report: FileReport, deep: bool) -> None:
    """The rows and columns of a table file; ``deep`` (verify): every row read, the columns' nulls counted."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    fmt = _FORMATS[path.suffix]
    report.layout = f"a table of examples ({'Parquet' if fmt == 'parquet' else 'Arrow' if fmt == 'ipc' else 'CSV'})"
    if fmt == "parquet" and not deep:
        schema, rows = pq.read_schema(path), pq.ParquetFile(path).metadata.num_rows
    else:
        table = pq.read_table(path) if fmt == "parquet" else _open_arrow(path) if fmt == "ipc" else \
            pcsv.read_csv(path)
        schema, rows = table.schema, table.num_rows
        if deep:
            nulls = [f"{name} ({table.column(name).null_count})" for name in table.column_names
                     if table.column(name).null_count]
            report.add("nulls", ", ".join(nulls) or "none")
    report.add("rows", rows)
    report.add("columns", ", ".join(f"{f.name}: {f.type}" for f in schema))
    report.add("read as", "data.source table (or huggingface, for a save_to_disk folder) with data.table's user, x "
               "and y columns")


def _table_file(path: Path) -> Describer | None:
    return _describe_table if path.suffix in _FORMATS else None


DESCRIBERS = FileDescribers(label="a table of examples with a user column", hdf5=_not_hdf5, side_file=_table_file)

"""What reading TFF's SQLite layout costs without an index on the client id, and what the index costs.

TFF's writer (``sql_client_data_utils.save_to_sql_client_data``) creates the two tables and no index, and TFF's reader
selects a client's rows with ``WHERE client_id = ... and split_name = ...``: without an index every client read
scans the whole ``examples`` table. Run from the repository root: ``python -m fedpub.simulations.benchmarks.sqlite_index
[--dataset stackoverflow|emnist] [--clients N] [--max-examples M] [--cohort 50]``. It writes one split in TFF's
layout without an index (the project's writers: synthetic StackOverflow posts, or EMNIST-sized random images), then
times, without and with the index: opening the split and listing its clients (``client_metadata`` only; best of 3),
the SQL query of a cohort's rows alone, and the cohort read and decoded by fedpub's reader; and the time and disk
space :func:`~fedpub.data.tff_sqlite.add_client_index` takes. The last line scales the scan to TFF's whole
database by bytes scanned per second. Times are with the file in the page cache (it is read once before timing):
from disk a scan is slower still.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

MIB = 2**20
SPLIT = {"stackoverflow": "train", "emnist": "digits_only_train"}
TFF_EXAMPLES = {
    "stackoverflow": 135_818_730 + 16_491_230 + 16_586_035,  # train, held-out, test (stackoverflow.load_data)
    "emnist": 671_585 + 77_483 + 341_873 + 40_832,  # all_train, all_test, digits_only_train, digits_only_test
}


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def _write(dataset: str, folder: Path, clients: int, max_examples: int, seed: int) -> Path:
    from fedpub.data.emnist_writers import write_emnist_sqlite
    from fedpub.data.stackoverflow_writers import SyntheticStackOverflowSpec, write_synthetic_stackoverflow
    from fedpub.seeding import numpy_generator

    if dataset == "stackoverflow":
        spec = SyntheticStackOverflowSpec(num_clients=clients, min_examples=1, max_examples=max_examples, seed=seed)
        return write_synthetic_stackoverflow(folder, spec, layout="sqlite", index=False).data
    rng = numpy_generator(seed, "sqlite_index")
    sizes = rng.integers(1, max_examples + 1, size=clients)
    images = {
        f"f{i // 100:04d}_{i % 100:02d}": (rng.random((n, 28, 28), dtype=np.float32), rng.integers(0, 10, size=n))
        for i, n in enumerate(sizes.tolist())
    }
    return write_emnist_sqlite(folder / "emnist_all.sqlite", {SPLIT[dataset]: images}, index=False)


def _measure(dataset: str, path: Path, cohort: list[str]) -> dict[str, float]:
    from fedpub.data.emnist_sqlite import EmnistSqlite
    from fedpub.data.stackoverflow import StackOverflowSqlite

    split = SPLIT[dataset]

    def open_reader() -> EmnistSqlite | StackOverflowSqlite:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the missing index is what is measured
            return EmnistSqlite(path, split) if dataset == "emnist" else StackOverflowSqlite(path, split)

    listing = min(_timed(lambda: open_reader().close())[1] for _ in range(3))
    connection = sqlite3.connect(path)
    query = "SELECT serialized_example_proto FROM examples WHERE client_id = ? AND split_name = ? ORDER BY rowid"
    _, sql = _timed(lambda: [connection.execute(query, (c, split)).fetchall() for c in cohort])
    connection.close()
    reader = open_reader()
    read = reader.client_data if isinstance(reader, EmnistSqlite) else reader.columns
    _, decoded = _timed(lambda: [read(c) for c in cohort])
    reader.close()
    return {"list": listing, "sql": sql, "read": decoded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=sorted(SPLIT), default="stackoverflow")
    parser.add_argument("--clients", type=int, default=30_000)
    parser.add_argument("--max-examples", type=int, default=99, help="examples per client: uniform in [1, this]")
    parser.add_argument("--cohort", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary folder)")
    args = parser.parse_args()

    from fedpub.data.tff_sqlite import add_client_index
    from fedpub.seeding import numpy_generator

    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        path, written = _timed(lambda: _write(args.dataset, Path(scratch), args.clients, args.max_examples, args.seed))
        with sqlite3.connect(path) as connection:
            rows = connection.execute("SELECT COUNT(*) FROM examples").fetchone()[0]
            ids = [r[0] for r in connection.execute("SELECT client_id FROM client_metadata ORDER BY client_id")]
        connection.close()
        size = path.stat().st_size
        path.read_bytes()  # into the page cache, so both measurements start warm
        picks = numpy_generator(args.seed, "cohort").choice(len(ids), args.cohort, replace=False)
        cohort = [ids[i] for i in sorted(picks)]
        print(f"{path.name}: {len(ids):,} clients, {rows:,} rows, {size / MIB:,.0f} MiB (written in {written:.0f} s)")
        without = _measure(args.dataset, path, cohort)
        _, indexing = _timed(lambda: add_client_index(path))
        grown = path.stat().st_size - size
        with_index = _measure(args.dataset, path, cohort)
        print(f"{'step':56} {'no index':>10} {'index':>10}")
        print(f"{'open the split, list its clients (s)':56} {without['list']:10.3f} {with_index['list']:10.3f}")
        for key, label in (("sql", "SQL query of the cohort's rows"), ("read", "cohort read and decoded")):
            name = f"{label}, {args.cohort} clients (s per client)"
            print(f"{name:56} {without[key] / args.cohort:10.4f} {with_index[key] / args.cohort:10.4f}")
        print(f"add_client_index: {indexing:.1f} s, file +{grown / MIB:.0f} MiB ({grown / size:.1%})")
        scan = without["sql"] / args.cohort  # one full scan per client without the index
        print(f"scan without the index: {rows / scan / 1e6:.1f} M rows/s, {size / scan / 1e9:.2f} GB/s")
        scale = TFF_EXAMPLES[args.dataset] / rows  # TFF's database, if its rows are the size of these
        print(
            f"TFF's {args.dataset} database ({TFF_EXAMPLES[args.dataset]:,} rows, about {size * scale / 2**30:.0f} GiB "
            f"at these rows' size): {scan * scale:.1f} s per client read without the index, "
            f"{scan * scale * args.cohort / 60:.1f} min for a cohort of {args.cohort}; indexing it about "
            f"{indexing * scale / 60:.1f} min (if linear), +{grown * scale / 2**30:.1f} GiB"
        )


if __name__ == "__main__":
    main()

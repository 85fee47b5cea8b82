"""What opening a table of examples with a user column costs at 100k users, against TFF's HDF5 reader on the same
users (issue 37: ``data.source: table`` and ``huggingface`` index the user column; TFF's layout lists its groups).

Run from the repository root: ``python -m fedpub.simulations.benchmarks.user_table_scale [--users 100000]
[--examples 3] [--cohort 1000]``. It writes the same users (EMNIST-sized 8-bit images, ``--examples`` each, labels
0..61) as a Parquet table (one row per example, a ``writer_id`` column), as a Hugging Face dataset folder
(``save_to_disk``) and as a TFF EMNIST HDF5 file (pixels float32, as TFF stores them), then times, best of 3, opening
each and listing its users, and reading ``--cohort`` users drawn at random (first read, then again). Needs the
``hf`` extra. The files are in the page cache (written just before).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def _best(fn: Callable[[], Any], repeats: int = 3) -> tuple[Any, float]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return result, best


def main() -> None:
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fedpub.config import parse_config
    from fedpub.data.emnist import EmnistH5
    from fedpub.data.emnist_writers import write_emnist_h5
    from fedpub.data.user_table_sources import open_huggingface, open_table

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--examples", type=int, default=3)
    parser.add_argument("--cohort", type=int, default=1000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n = args.users * args.examples
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 62, n)
    ids = np.array([f"f{u:07d}" for u in range(args.users)])
    writer = np.repeat(ids, args.examples)
    order = rng.permutation(n)  # rows of a user are not contiguous, as in a table written in any order
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        flat = pa.FixedSizeListArray.from_arrays(pa.array(images[order].reshape(-1)), 28 * 28)
        pq.write_table(pa.table({"writer_id": writer[order], "pixels": flat, "character": labels[order]}),
                       root / "table.parquet")
        features = datasets.Features({"writer_id": datasets.Value("string"), "image": datasets.Image(),
                                      "character": datasets.ClassLabel(num_classes=62)})
        datasets.Dataset.from_dict({"writer_id": writer[order].tolist(), "image": list(images[order]),
                                    "character": labels[order].tolist()}, features=features).save_to_disk(
            str(root / "hf"))
        write_emnist_h5(root / "fed_emnist_train.h5", {
            u: (images[i * args.examples:(i + 1) * args.examples].astype(np.float32) / 255,
                labels[i * args.examples:(i + 1) * args.examples]) for i, u in enumerate(ids)})
        table = {"user": "writer_id", "y": "character"}
        readers = {
            "parquet (data.source table)": lambda: open_table(parse_config({"data": {
                "source": "table", "path": str(root / "table.parquet"), "table": {**table, "x": "pixels"}},
                "model": {"factory": "fedpub.models.emnist:SmallCNN", "kwargs": {"num_classes": 62}}})).train,
            "hugging face (data.source huggingface)": lambda: open_huggingface(parse_config({"data": {
                "source": "huggingface", "path": str(root / "hf"), "table": {**table, "x": "image"}},
                "model": {"factory": "fedpub.models.emnist:SmallCNN", "kwargs": {"num_classes": 62}}})).train,
            "TFF HDF5 (EmnistH5)": lambda: EmnistH5(root / "fed_emnist_train.h5", num_classes=62),
        }
        cohort = rng.choice(ids, args.cohort, replace=False).tolist()
        print(f"{args.users} users, {n} examples; a cohort of {args.cohort} random users")
        for name, open_users in readers.items():
            users, opened = _best(open_users)
            assert len(users.client_ids) == args.users
            _, first = _best(lambda u=users: [u.client_data(c) for c in cohort], repeats=1)
            _, again = _best(lambda u=users: [u.client_data(c) for c in cohort])
            print(f"{name:40s} open + list {opened:7.3f} s   read cohort {first:6.3f} s "
                  f"({1e3 * first / args.cohort:.2f} ms/user), again {again:6.3f} s")


if __name__ == "__main__":
    main()

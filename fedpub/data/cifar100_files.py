"""What ``fedpub data info|verify`` says about a federated CIFAR-100 HDF5 file: clients, examples and the classes
seen (from the labels only); verify also reads every image and the coarse labels, with the reader's shape, dtype and
range checks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpub.data.cifar100 import NUM_CLASSES, NUM_COARSE_CLASSES, Cifar100H5
from fedpub.data.file_report import FileDescribers, FileReport, spread


def describe_h5(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "federated CIFAR-100, TFF HDF5"
    with Cifar100H5(path) as ds:
        counts = [ds.num_examples(c) for c in ds.client_ids]  # checks every client's shapes and dtypes
        labels = np.concatenate([ds.labels(c) for c in ds.client_ids])
        if deep:
            coarse = np.concatenate([ds.coarse_labels(c) for c in ds.client_ids])
            for client_id in ds.client_ids:
                ds.images(client_id)
    report.add("clients", len(counts))
    report.add("examples", spread(counts))
    report.add("classes", f"{len(np.unique(labels))} distinct labels seen; {NUM_CLASSES} expected")
    if deep:
        seen = len(np.unique(coarse))
        report.add("superclasses", f"{seen} distinct coarse labels seen; {NUM_COARSE_CLASSES} expected")


DESCRIBERS = FileDescribers(label="federated CIFAR-100", hdf5=describe_h5)

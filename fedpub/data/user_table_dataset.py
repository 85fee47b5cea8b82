"""Your own federated data: a table with one row per example and a column of user ids, as a Hugging Face dataset
(``data.source: huggingface``), Parquet/Arrow/CSV files (``table``) or tensors handed to ``fedpub.run(config,
data=...)`` (``python``). Light: names only; the readers (:mod:`fedpub.data.user_table`) import ``pyarrow`` and
``datasets`` (the ``hf`` extra) when a config uses them.

No model is declared: a config names its own (``model.factory``), and the task's loss and metrics are plain
classification's or its own (``task: {loss, metrics}``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from fedpub.config_section import Section
from fedpub.data.spec import Dataset, Reference, Source, TaskDeclaration


class TableConfig(Section):
    """The columns of a table of examples: whose example a row is, its input and its label."""

    user: str = Field("user_id", description="the column of user ids: each distinct value is one user")
    x: str | tuple[str, ...] = Field(
        "x", description="the input column (an image, a number, or a list of numbers), or a list of number columns "
        "that are one feature each (a CSV with a column per feature), stacked in their order: (N, features)",
    )
    y: str = Field("label", description="the integer label column")
    transform: Literal["auto"] | Reference = Field(
        "auto", description="how a user's stacked inputs become the model's: auto (8-bit images -> float32 v/255 "
        "with a channel axis (N, C, H, W); floats -> float32; integers -> int64), or 'package.module:callable' "
        "taking the numpy array",
    )
    public: str | None = Field(
        None, description="a boolean column marking public users (every row of a user true: public; all false: "
        "private), instead of data.public.fraction",
    )
    num_classes: int | None = Field(
        None, ge=2, description="the number of classes; null: the label column's ClassLabel, else its maximum + 1"
    )
    hub: str | None = Field(
        None, description="huggingface: a dataset name loaded with datasets.load_dataset (needs internet, cached "
        "by datasets); null: data.path, a folder written by save_to_disk",
    )
    split: str = Field("train", description="huggingface: the split holding the training users")
    test_split: str | None = Field(
        None, description="huggingface: the split of test examples; null: the training split's (evaluation users "
        "are then held out of the private ones, data.evaluation)",
    )


    @field_validator("x")
    @classmethod
    def _some_columns(cls, x: str | tuple[str, ...]) -> str | tuple[str, ...]:
        if isinstance(x, tuple) and (not x or len(set(x)) != len(x)):
            raise ValueError("give the input column, or a list of distinct feature columns")
        return x

    def x_columns(self) -> tuple[str, ...]:
        """The input's columns: ``x``, or each of its feature columns."""
        return (self.x,) if isinstance(self.x, str) else self.x


_SOURCES = "fedpub.data.user_table_sources"

USER_TABLE = Dataset(
    name="user_table",
    title="your federated data: a table of examples with a user column (Hugging Face, Parquet/Arrow/CSV, Python)",
    reference="Flower Datasets' FederatedDataset with a NaturalIdPartitioner (one partition per user id)",
    sources=(
        Source(
            "huggingface", "a Hugging Face dataset folder written by save_to_disk (unused with data.table.hub)",
            f"{_SOURCES}:open_huggingface",
        ),
        Source("table", "a Parquet, Arrow (IPC/Feather) or CSV file, or a folder of them", f"{_SOURCES}:open_table"),
        Source("python", "nothing: the users are given to fedpub.run(config, data=...)", f"{_SOURCES}:open_python"),
    ),
    tasks=(TaskDeclaration("classification", "softmax cross-entropy, accuracy", "fedpub.tasks:CLASSIFICATION"),),
    models=(),
    files=(),
    client_fields=frozenset(),
    describers=f"{_SOURCES}:DESCRIBERS",
    device="fedpub.data.user_table_device:DEVICE",
    config_fields={"table": (TableConfig, TableConfig())},
)

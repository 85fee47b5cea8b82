"""Federated EMNIST's declaration (TFF ``simulation/datasets/emnist.py``; ``shared/reference/datasets.md`` §1):
the HDF5 and SQLite layouts, the synthetic look-alike digits of the quick start (with, for
``data.public.pool: heldout``, public writers from a spec of their own or scikit-learn's real digits), the
classification task, the models and TFF's files. Light: names only, the code is imported when a config uses it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from fedpub.config_section import Section
from fedpub.data.remote_files import tff_file
from fedpub.data.spec import Dataset, ModelDeclaration, Source, TaskDeclaration


class WriterStyle(Section):
    """How generated writers write (:class:`~fedpub.data.synthetic_emnist.SyntheticEmnistSpec`); the defaults are the
    quick start's private writers. A harder style (more ambiguous and noisy writers, more skewed class mixes) leaves
    more for more data to teach, the regime where private users can add to a few public ones (fedpub issue 36)."""

    class_concentration: float = Field(1.0, gt=0, description="Dirichlet concentration of each writer's class mix "
                                       "(smaller: more skewed)")
    ambiguous_fraction: float = Field(0.25, ge=0, le=1, description="share of writers who warp and jitter strongly")
    pixel_noise: float = Field(0.08, ge=0, le=0.5, description="largest standard deviation of a writer's pixel noise")
    noisy_fraction: float = Field(0.25, ge=0, le=1, description="share of writers with pixel noise")


class SyntheticEmnistPublicConfig(WriterStyle):
    """The public writers of ``data.public.pool: heldout``: another generator spec than the private writers', by
    default an off-distribution style (every writer ambiguous and noisy), for controls where public data should
    help less (fedpub issue 36)."""

    source: Literal["generator"] = "generator"
    num_writers: int = Field(100, ge=1, le=10_000)
    min_examples: int = Field(20, ge=2)
    max_examples: int = Field(80, ge=2)
    ambiguous_fraction: float = Field(1.0, ge=0, le=1, description="share of writers who warp and jitter strongly")
    pixel_noise: float = Field(0.3, ge=0, le=0.5, description="largest standard deviation of a writer's pixel noise")
    noisy_fraction: float = Field(1.0, ge=0, le=1, description="share of writers with pixel noise")
    seed: int = 0

    @model_validator(mode="after")
    def _example_range(self) -> SyntheticEmnistPublicConfig:
        if self.min_examples > self.max_examples:
            raise ValueError(f"min_examples ({self.min_examples}) must be <= max_examples ({self.max_examples})")
        return self


class SklearnDigitsPublicConfig(Section):
    """The public writers of ``data.public.pool: heldout`` as real handwritten digits: scikit-learn's bundled
    ``load_digits`` (1,797 8×8 images) in EMNIST's layout, dealt into pseudo-writers by a seeded shuffle, a real
    shifted public pool (:mod:`fedpub.data.emnist_sklearn_digits`; the ``reproductions`` extra)."""

    source: Literal["sklearn_digits"]
    num_writers: int = Field(100, ge=1, le=1_797, description="pseudo-writers (load_digits has 1,797 images)")
    seed: int = Field(0, description="seed of the shuffle that deals the images to the writers")


def _public_source(value: Any) -> str | None:
    """Which public writers ``data.synthetic.public`` asks for: its ``source``, by default the generator's; None
    (refused, the field named) for a value that is no mapping."""
    return str(value.get("source", "generator")) if isinstance(value, dict) else getattr(value, "source", None)


PublicWriters = Annotated[
    Annotated[SyntheticEmnistPublicConfig, Tag("generator")]
    | Annotated[SklearnDigitsPublicConfig, Tag("sklearn_digits")],
    Discriminator(_public_source, custom_error_type="public_source",
                  custom_error_message="its source must be generator (the default) or sklearn_digits"),
]


class SyntheticEmnistConfig(WriterStyle):
    """The offline quick-start data: synthetic handwritten digits in TFF's EMNIST HDF5 layout, the writers in the
    style of :class:`WriterStyle`'s fields."""

    num_writers: int = Field(500, ge=2, le=10_000)
    min_examples: int = Field(20, ge=2)
    max_examples: int = Field(80, ge=2)
    test_fraction: float = Field(0.15, gt=0, lt=1)
    seed: int = 0
    public: PublicWriters | None = Field(
        None, description="public writers (with data.public.pool: heldout) from another generator spec or, with "
        "source sklearn_digits, scikit-learn's real digits; null = none"
    )


_SOURCES = "fedpub.data.emnist_sources"

EMNIST = Dataset(
    name="emnist",
    title="federated EMNIST (TFF): handwritten characters grouped by writer",
    reference="tensorflow_federated/python/simulation/datasets/emnist.py (HDF5 loader before commit 7bb20162f)",
    sources=(
        Source(
            "synthetic_emnist",
            "look-alike handwritten digits written there in TFF's HDF5 layout (fed_emnist_digitsonly_{train,test}.h5) "
            "from data.synthetic, and public writers (fed_emnist_digitsonly_public.h5) from data.synthetic.public "
            "(generated, or scikit-learn's real digits)",
            f"{_SOURCES}:open_synthetic",
            generate=f"{_SOURCES}:generate_synthetic",
        ),
        Source("emnist_h5", "a directory with fed_emnist[_digitsonly]_{train,test}.h5", f"{_SOURCES}:open_h5"),
        Source(
            "emnist_sqlite", "TFF's emnist_all.sqlite or emnist_all.sqlite.lzma, or a folder holding it",
            f"{_SOURCES}:open_sqlite",
        ),
    ),
    tasks=(TaskDeclaration("classification", "softmax cross-entropy, accuracy", "fedpub.tasks:CLASSIFICATION"),),
    models=(
        ModelDeclaration(
            "emnist_small_cnn", "two 5x5 convolutions, about 18k parameters", "fedpub.models.emnist:SmallCNN"
        ),
        ModelDeclaration("emnist_cnn_dropout", "TFF's cnn_dropout", "fedpub.models.emnist:CnnDropout"),
        ModelDeclaration("emnist_mlp", "TFF's 2nn, 200-200", "fedpub.models.emnist:Mlp"),
        ModelDeclaration(
            "emnist_softmax", "multinomial logistic regression on the pixels, 7,850 parameters",
            "fedpub.models.emnist:Softmax",
        ),
    ),
    files=(
        tff_file(
            "fed_emnist.tar.bz2",
            "fe1ed5a502cea3a952eb105920bff8cffb32836b5173cb18a57a32c3606f3ea0",
            mirror=True,
            members=("fed_emnist_train.h5", "fed_emnist_test.h5"),
        ),
        tff_file(
            "fed_emnist_digitsonly.tar.bz2",
            "55333deb8546765427c385710ca5e7301e16f4ed8b60c1dc5ae224b42bd5b14b",
            mirror=False,
            members=("fed_emnist_digitsonly_train.h5", "fed_emnist_digitsonly_test.h5"),
        ),
        tff_file("emnist_all.sqlite.lzma", None, mirror=False),
    ),
    client_fields=frozenset({"label", "pixels"}),
    describers="fedpub.data.emnist_files:DESCRIBERS",
    config_fields={
        "only_digits": (
            bool,
            Field(
                True, description="10 classes (fed_emnist_digitsonly_* / digits_only_*) or 62 (fed_emnist_* / all_*)"
            ),
        ),
        "synthetic": (SyntheticEmnistConfig, SyntheticEmnistConfig()),
    },
    public_pools=("train_fraction", "heldout"),
    sqlite_splits=("all_train", "all_test", "digits_only_train", "digits_only_test"),
    device="fedpub.data.emnist_device:DEVICE",
)

"""Typed experiment configuration loaded from YAML (pydantic, frozen, unknown keys forbidden).

Every section maps 1:1 to the arguments of a factory; a bad value is reported as a
:class:`ConfigError` that names the field (dotted path), what was given and what is allowed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from fedpub.models import MODELS


class ConfigError(ValueError):
    """A configuration that cannot be run; the message names the file and the field."""


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="strings")


class SyntheticEmnistConfig(_Section):
    """The offline quick-start data: synthetic handwritten digits in TFF's EMNIST HDF5 layout."""

    num_writers: int = Field(500, ge=2)
    min_examples: int = Field(20, ge=2)
    max_examples: int = Field(80, ge=2)
    test_fraction: float = Field(0.15, gt=0, lt=1)
    seed: int = 0


class SyntheticStackOverflowConfig(_Section):
    """Offline look-alike StackOverflow files (TFF's HDF5 layout and count files)."""

    num_clients: int = Field(400, ge=2)
    test_clients: int = Field(100, ge=1)
    min_examples: int = Field(5, ge=1)
    max_examples: int = Field(30, ge=1)
    seed: int = 0


class StackOverflowConfig(_Section):
    """TFF's StackOverflow tasks: vocabularies from the count files, features as TFF builds them."""

    tag_vocab_size: int = Field(500, ge=1)
    normalization: Literal["in_vocab", "all_tokens"] = Field(
        "in_vocab", description="bag of words ÷ in-vocabulary tokens (TFF now) or ÷ all tokens (older TFF, AdaDPS)"
    )
    max_elements: int | None = Field(1000, ge=1, description="cap on a user's examples (TFF: 1,000)")
    test_split: Literal["test", "heldout"] = "test"


class PublicUsersConfig(_Section):
    """Which users opted out of privacy; they never count in the private population N."""

    pool: Literal["train_fraction", "heldout"] = Field(
        "train_fraction", description="a seeded fraction of the training users, or StackOverflow's held-out split"
    )
    fraction: float = Field(0.0, ge=0, lt=1, description="seeded fraction of the training users made public")
    seed: int = 0


class DataConfig(_Section):
    source: Literal[
        "synthetic_emnist", "emnist_h5", "emnist_sqlite", "stackoverflow", "synthetic_stackoverflow"
    ] = "synthetic_emnist"
    path: Path = Field(
        Path("data/synthetic_emnist"),
        description="directory with fed_emnist[_digitsonly]_{train,test}.h5, or emnist_all.sqlite[.lzma], "
        "or (StackOverflow) stackoverflow_*.h5 or stackoverflow.sqlite[.lzma] with the two count files",
    )
    only_digits: bool = True
    synthetic: SyntheticEmnistConfig = SyntheticEmnistConfig()
    synthetic_stackoverflow: SyntheticStackOverflowConfig = SyntheticStackOverflowConfig()
    stackoverflow: StackOverflowConfig = StackOverflowConfig()
    uniform_users: int | None = Field(
        None, ge=2, description="DOPE's construction: pool the training examples and deal them to K users"
    )
    public: PublicUsersConfig = PublicUsersConfig()
    eval_clients: int | None = Field(
        200, ge=1, description="test clients evaluated (the first ones by id); null = all"
    )


class ModelConfig(_Section):
    name: str = "emnist_small_cnn"

    @field_validator("name")
    @classmethod
    def _known_model(cls, name: str) -> str:
        if name not in MODELS:
            raise ValueError(f"unknown model; allowed: {', '.join(sorted(MODELS))}")
        return name


class ClientConfig(_Section):
    """Local training on each client: E epochs of minibatch SGD."""

    epochs: int = Field(1, ge=1)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.0, ge=0, lt=1)
    max_examples: int | None = Field(None, ge=1, description="cap on a client's examples per round")


class SamplingConfig(_Section):
    """Give exactly one of ``clients_per_round`` (expected cohort m) or ``sampling_rate`` (q)."""

    kind: Literal["poisson", "fixed"] = "poisson"
    clients_per_round: float | None = Field(None, gt=0)
    sampling_rate: float | None = Field(None, gt=0, le=1)

    @model_validator(mode="after")
    def _exactly_one(self) -> SamplingConfig:
        if (self.clients_per_round is None) == (self.sampling_rate is None):
            raise ValueError("give exactly one of clients_per_round or sampling_rate")
        if self.kind == "fixed" and self.clients_per_round is not None:
            if self.clients_per_round != int(self.clients_per_round):
                raise ValueError("clients_per_round must be a whole number for fixed-size sampling")
        return self


class ServerOptimizerConfig(_Section):
    name: Literal["sgd", "adam"] = "sgd"
    lr: float = Field(1.0, gt=0)
    momentum: float = Field(0.0, ge=0, lt=1, description="sgd only")
    beta1: float = Field(0.9, ge=0, lt=1, description="adam only")
    beta2: float = Field(0.99, ge=0, lt=1, description="adam only")
    eps: float = Field(1e-3, gt=0, description="adam only")


class AdaptiveClipConfig(_Section):
    """Adaptive clipping (Andrew et al. 2021): ``clip_norm`` is then the initial C."""

    target_quantile: float = Field(0.5, ge=0, le=1, description="fraction of updates left unclipped, γ")
    learning_rate: float = Field(0.2, gt=0, description="η in C ← C·exp(−η(b̃ − γ))")
    count_noise_std: float = Field(..., gt=0, description="σ_b, noise std on the unclipped count (paper: m/20)")


class DpFedAvgConfig(_Section):
    """User-level DP-FedAvg (McMahan et al. 2018); momentum → DP-FedAvgM, adam → DP-FedAdam."""

    name: Literal["dp_fedavg"] = "dp_fedavg"
    clip_norm: float = Field(1.0, gt=0, description="L2 clip of each user's update; .inf = off")
    noise_multiplier: float | None = Field(None, ge=0)
    target_epsilon: float | None = Field(None, gt=0)
    sampling: SamplingConfig = SamplingConfig(clients_per_round=50)
    server_optimizer: ServerOptimizerConfig = ServerOptimizerConfig()
    adaptive_clip: AdaptiveClipConfig | None = None

    @model_validator(mode="after")
    def _noise_or_target(self) -> DpFedAvgConfig:
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ValueError("give exactly one of noise_multiplier or target_epsilon")
        if math.isinf(self.clip_norm) and (self.noise_multiplier or self.target_epsilon):
            raise ValueError("an infinite clip_norm only goes with noise_multiplier: 0")
        return self


class DopeConfig(DpFedAvgConfig):
    """DOPE-SGD's public-user recentering (Nasr et al. 2023): clip around the public users' mean update."""

    name: Literal["dope"] = "dope"  # type: ignore[assignment]
    public_clients_per_round: int = Field(10, ge=1, description="public users trained each round (no privacy cost)")
    center_clip: float = Field(math.inf, gt=0, description="λ: the center is clipped to this norm (eq. 2)")


STRATEGY_CONFIGS: dict[str, type[DpFedAvgConfig]] = {"dp_fedavg": DpFedAvgConfig, "dope": DopeConfig}


def _strategy_name(value: Any) -> str | None:
    """The recipe a strategy section asks for (``dp_fedavg`` when ``name`` is left out)."""
    if isinstance(value, dict):
        return value.get("name", "dp_fedavg")
    return getattr(value, "name", None)


StrategyConfig = Annotated[
    Annotated[DpFedAvgConfig, Tag("dp_fedavg")] | Annotated[DopeConfig, Tag("dope")],
    Discriminator(_strategy_name),
]


class PrivacyConfig(_Section):
    delta: float = Field(1e-5, gt=0, lt=1)
    accountant: Literal["pld", "rdp"] = "pld"
    budget_epsilon: float | None = Field(
        None, gt=0, description="stop before the run's ε would exceed this"
    )


class FlowerConfig(_Section):
    """How the Flower backends run (``fedpub run --backend flower``, ``flwr run``)."""

    client_num_cpus: float = Field(1.0, gt=0, description="CPUs per simulated client (Ray actor)")
    client_num_gpus: float = Field(0.0, ge=0, description="GPU fraction per simulated client, e.g. 0.25")
    ray_num_cpus: int | None = Field(None, ge=1, description="CPUs given to Ray; null = all")
    node_wait_timeout: float = Field(120.0, gt=0, description="seconds to wait for the expected nodes")
    round_timeout: float = Field(3600.0, gt=0, description="seconds to wait for a round's replies")


class ExperimentConfig(_Section):
    name: str = Field("quickstart", pattern=r"^[A-Za-z0-9_.-]+$")
    seed: int = 0
    rounds: int = Field(40, ge=1)
    eval_every: int = Field(5, ge=1)
    checkpoint_every: int = Field(5, ge=1)
    output_dir: Path = Path("runs")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    task: Literal["classification", "so_tag", "so_tag_single", "so_nwp"] = Field(
        "classification", description="loss and metrics; the so_* tasks need StackOverflow data"
    )
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    client: ClientConfig = ClientConfig()
    strategy: StrategyConfig = DpFedAvgConfig(noise_multiplier=1.0)
    privacy: PrivacyConfig = PrivacyConfig()
    flower: FlowerConfig = FlowerConfig()


def _check_task_and_data(config: ExperimentConfig) -> None:
    stackoverflow = config.data.source in ("stackoverflow", "synthetic_stackoverflow")
    if config.data.public.pool == "heldout" and not stackoverflow:
        raise ConfigError("data.public.pool `heldout` needs StackOverflow data (its held-out split)")
    if stackoverflow != config.task.startswith("so_"):
        raise ConfigError(
            f"task `{config.task}` does not go with data.source `{config.data.source}`: the so_* tasks "
            "(so_tag, so_tag_single, so_nwp) need stackoverflow or synthetic_stackoverflow data, "
            "classification needs EMNIST data"
        )


def _walk(loc: tuple) -> tuple[list[str], list[str]]:
    """The field path of ``loc`` without pydantic's union tag (the recipe name it inserts after
    ``strategy``), and the keys allowed in the section the path ends in."""
    model: type[BaseModel] | None = ExperimentConfig
    path: list[str] = []
    tag_next = False
    for part in loc:
        if tag_next:
            model, tag_next = STRATEGY_CONFIGS.get(str(part)), False
            continue
        path.append(str(part))
        field = model.model_fields.get(str(part)) if model is not None else None
        annotation = field.annotation if field is not None else None
        tag_next = model is ExperimentConfig and part == "strategy"
        members = [a for a in (annotation, *get_args(annotation)) if isinstance(a, type)]  # X or X | None
        model = next((a for a in members if issubclass(a, BaseModel)), None)
    return path, list(model.model_fields) if model is not None else []


def _describe(error: Any) -> str:
    path, _ = _walk(error["loc"])
    where = ".".join(path) or "(top level)"
    if error["type"] == "extra_forbidden":
        allowed = ", ".join(_walk(error["loc"][:-1])[1])
        return f"unknown key `{where}`; allowed keys here: {allowed}"
    given = error.get("input")
    shown = "" if isinstance(given, dict) else f" (got {given!r})"
    return f"field `{where}`: {error['msg']}{shown}"


def parse_config(raw: Any, source: str = "<config>") -> ExperimentConfig:
    """Validate a mapping (as read from YAML); raise ConfigError naming every bad field."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys, got {type(raw).__name__}")
    try:
        config = ExperimentConfig.model_validate(raw)
    except pydantic.ValidationError as exc:
        lines = "\n".join(f"  - {_describe(e)}" for e in exc.errors())
        raise ConfigError(f"{source}: invalid configuration\n{lines}") from None
    try:
        _check_task_and_data(config)
    except ConfigError as error:
        raise ConfigError(f"{source}: invalid configuration\n  - {error}") from None
    return config


def load_config(path: Path) -> ExperimentConfig:
    """Read and validate a YAML experiment file."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_config(raw, str(path))


def dump_config(config: ExperimentConfig) -> str:
    """The resolved configuration as YAML (what a run writes next to its results)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)

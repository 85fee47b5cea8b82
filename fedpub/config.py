"""Typed experiment configuration loaded from YAML (pydantic, frozen, unknown keys forbidden).

Every section maps 1:1 to the arguments of a factory; a bad value is reported as a
:class:`ConfigError` that names the field (dotted path), what was given and what is allowed.
"""

from __future__ import annotations

import math
import re
import reprlib
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import pydantic
import yaml
from pydantic import AfterValidator, BaseModel, Discriminator, Field, Tag, field_validator, model_validator

from fedpub import recipe_registry
from fedpub.config_section import Section
from fedpub.data import registry
from fedpub.data.spec import PUBLIC_POOLS, Reference, config_folder
from fedpub.strict_yaml import load_yaml

class ConfigError(ValueError):
    """A configuration that cannot be run; the message names the file and the field."""


def _no_nul(path: Path) -> Path:
    if "\0" in str(path):
        raise ValueError("a path cannot contain a NUL character")
    return path


FilePath = Annotated[Path, AfterValidator(_no_nul)]


class PublicUsersConfig(Section):
    """Which users opted out of privacy; they never count in the private population N."""

    pool: Literal[PUBLIC_POOLS] = Field(
        "train_fraction",
        description="a seeded fraction of the training users, or the dataset's held-out split (where it has one)",
    )
    fraction: float = Field(0.0, ge=0, lt=1, description="seeded fraction of the training users made public")
    seed: int = 0
    users: tuple[str, ...] | None = Field(
        None, min_length=1, description="these training users are public (their ids), instead of a fraction"
    )

    @model_validator(mode="after")
    def _one_way(self) -> PublicUsersConfig:
        if self.users is not None and (self.fraction > 0 or self.pool != "train_fraction"):
            raise ValueError("give data.public.users (a list) or data.public.fraction / pool: heldout, one of them")
        return self


class ValidationUsersConfig(Section):
    """Validation users: a seeded fraction of the private training users held out of N, never sampled nor trained
    on; the model is evaluated on their training examples (``val_*`` beside ``eval_*``) so that hyper-parameters
    are tuned without the test split. Their metrics are released outside DP, like the public users' data."""

    fraction: float = Field(0.0, ge=0, lt=1, description="seeded fraction of the private users held out for validation")
    seed: int = 0


class EvaluationUsersConfig(Section):
    """Evaluation users: a seeded fraction of the private training users (after the validation users) held out of N,
    never sampled nor trained on, whose test examples evaluate the model. Held out only when the run evaluates on
    them (``data.eval_users`` ``evaluation``, or ``auto`` when no public user has test examples): N shrinks by the
    fraction and the accounting counts the rest. Their metrics are released outside DP, like the public users'."""

    fraction: float = Field(
        0.1, gt=0, lt=1, description="seeded fraction of the private users held out for evaluation (when evaluated on)"
    )
    seed: int = 0


class _DataFields(Section):
    """The ``data`` fields every dataset shares; :data:`DataConfig` adds each dataset's own after ``path``."""

    source: Literal[registry.SOURCE_NAMES] = Field(
        registry.DEFAULT_SOURCE, description="which dataset and file layout (`fedpub data info DATASET` lists them)"
    )
    path: FilePath = Field(
        Path("data") / registry.DEFAULT_SOURCE,
        description="what data.source reads: a directory of the dataset's files, or its .sqlite[.lzma] file",
    )
    uniform_users: int | None = Field(
        None, ge=2, description="DOPE's construction: pool the training examples and deal them to K users"
    )
    public: PublicUsersConfig = PublicUsersConfig()
    validation: ValidationUsersConfig = ValidationUsersConfig()
    evaluation: EvaluationUsersConfig = EvaluationUsersConfig()
    eval_clients: int | None = Field(
        200, ge=1, description="test clients evaluated (the first ones by id); null = all"
    )
    eval_users: Literal["auto", "public", "evaluation", "all"] = Field(
        "auto",
        description="whose test examples evaluate the model: `public`, the public users'; `evaluation`, those of "
        "users outside N (data.evaluation's, held out when every test user is a training user); `all`, every test "
        "client's, private users' included (labelled so in every file and plot: their examples are not covered by "
        "DP); `auto`, the public users' when they have "
        "test examples, else those of users outside N (held out, or test users who are no training user)",
    )
    cache_mb: int = Field(
        1024, ge=0, description="MB of decoded training users kept in memory between rounds (and as much again "
        "for held-out public users), least recently used dropped first; 0 = read every user from the file each "
        "time it is sampled"
    )
    preload: bool = Field(
        False, description="in-process: read every user a round may train (private and public) into the cache "
        "before the first round, as pfl-research holds its dataset in memory, so that no round reads a file; "
        "refused, naming cache_mb, when they do not fit in it"
    )
    prefetch: Literal["auto", "on", "off"] = Field(
        "auto", description="in-process: read the next round's users into the cache in a background thread while "
        "the current round trains; auto = on a CUDA device only (on a CPU the reading competes with training for "
        "the cores and the GIL)"
    )


def _data_section() -> type[Section]:
    """The ``data`` section: the shared fields, each registered dataset's own after ``path`` (registry order)."""
    shared = {name: (field.annotation, field) for name, field in _DataFields.model_fields.items()}
    first = {name: shared.pop(name) for name in ("source", "path")}
    return pydantic.create_model(
        "DataConfig", __base__=Section, __module__=__name__, __doc__="Which users an experiment trains and "
        "evaluates on: the dataset and its files, its own sections, the public users, the cache.",
        **first, **registry.data_fields(), **shared,
    )


DataConfig = _data_section()


class ModelConfig(Section):
    """The model: a registered one by ``name``, or any PyTorch model a ``factory`` builds from ``kwargs``."""

    name: str | None = Field(registry.default_model(), description="a registered model (instead of factory)")
    factory: Reference | None = Field(
        None, description="'package.module:callable' returning a torch.nn.Module, called with model.kwargs (its "
        "parameters initialised as it initialises them, from the run's seed); imported on every node that trains",
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="the keyword arguments of model.factory")

    @model_validator(mode="before")
    @classmethod
    def _factory_replaces_name(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and raw.get("factory") is not None and "name" not in raw:
            return {**raw, "name": None}
        return raw

    @field_validator("name")
    @classmethod
    def _known_model(cls, name: str | None) -> str | None:
        if name is not None and name not in registry.MODEL_NAMES:
            raise ValueError(f"unknown model; allowed: {', '.join(sorted(registry.MODEL_NAMES))}, or model.factory "
                             "('package.module:callable') for your own")
        return name

    @model_validator(mode="after")
    def _name_or_factory(self) -> ModelConfig:
        if (self.name is None) == (self.factory is None):
            raise ValueError("give model.name (a registered model) or model.factory ('package.module:callable'), "
                             "one of them")
        if self.kwargs and self.factory is None:
            raise ValueError("model.kwargs are model.factory's arguments; a registered model (model.name) takes none")
        return self


class TaskConfig(Section):
    """Your own task: a loss and metrics, each ``(outputs, y) -> one value per example`` (a tensor of shape
    ``(B,)``); the loss minimised is their mean, a metric is their mean over the evaluated examples, and the first
    metric is the headline one. Per example, so padded batches mask out (the vectorised path can take the task)."""

    loss: Reference = Field(description="'package.module:callable': per-example losses (B,)")
    metrics: tuple[Reference, ...] = Field(
        min_length=1, description="'package.module:callable' each: per-example values (B,), named by the callable"
    )


class ClientConfig(Section):
    """Local training on each client: E epochs of minibatch SGD."""

    epochs: int = Field(1, ge=1)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.0, ge=0, lt=1)
    max_examples: int | None = Field(None, ge=1, description="cap on a client's examples per round")
    timeout_s: float | None = Field(
        None, gt=0, description="seconds a user's local training may take (checked after each step); "
        "a user past it sends nothing and counts in cohort_failed; null = no limit",
    )
    path: Literal["auto", "vectorised", "loop"] = Field(
        "auto", description="in-process: how each group of users with the same number of local steps trains: "
        "auto = time vectorised (vmap) and user by user on the run's first groups of each size and keep the "
        "faster (recorded in the run's paths.json) | vectorised | loop (user by user). The two agree up to "
        "floating-point rounding, which noisy rounds can grow (the quick start ends at 0.9030 or 0.9074 as idle or "
        "busy cores choose): for runs that must match bit for bit on any machine, set vectorised or loop"
    )
    vectorise_min_users: int = Field(
        1, ge=1, description="with path: vectorised, groups of fewer users train one by one"
    )

    @model_validator(mode="before")
    @classmethod
    def _replaced_vectorise(cls, data: Any) -> Any:
        if isinstance(data, dict) and "vectorise" in data:
            raise ValueError(
                "client.vectorise was replaced by client.path: auto (the default: time both ways, keep the "
                "faster) | vectorised | loop (what vectorise: false did)"
            )
        return data

    def local_training_fields(self) -> dict[str, Any]:
        """The fields of local training itself (not how the in-process engine schedules the cohort)."""
        return self.model_dump(exclude={"path", "vectorise_min_users"})


CYCLIC_SAMPLING = ("cyclic_poisson", "cyclic_fixed")


class SamplingConfig(Section):
    """Give exactly one of ``clients_per_round`` (expected cohort m) or ``sampling_rate`` (q). ``epoch_blocks``
    samples nothing (DP-FTRL, Kairouz et al. 2021): each epoch deals the private users, shuffled, into blocks of
    about m, one block a round, so every user takes part once an epoch (accounted under replace-special
    neighbours; ``privacy.accountant: rdp``). ``cyclic_poisson`` splits the private users into ``groups`` k by a
    keyed hash of the privacy seed and samples Poisson from group t mod k in round t (Choquette-Choo et al. 2023):
    each user at most once every k rounds; ``sampling_rate`` q is the rate within the group (expected cohort
    qN/k), and ``clients_per_round`` m gives q = mk/N. ``cyclic_fixed`` is its fixed-size form (for SecAgg+):
    the users are dealt by a seeded permutation into k groups and round t draws exactly m of group t mod k
    (replace-one neighbours; ``privacy.accountant: rdp``); ``sampling_rate`` q, the rate within a group, gives
    m = round(q·⌊N/k⌋)."""

    kind: Literal["poisson", "cyclic_poisson", "fixed", "cyclic_fixed", "epoch_blocks"] = "poisson"
    clients_per_round: float | None = Field(None, gt=0)
    sampling_rate: float | None = Field(None, gt=0, le=1)
    groups: int | None = Field(None, ge=1, description="cyclic_poisson, cyclic_fixed: k, the groups the users are "
                                                       "split into")

    @model_validator(mode="after")
    def _exactly_one(self) -> SamplingConfig:
        if (self.clients_per_round is None) == (self.sampling_rate is None):
            raise ValueError("give exactly one of clients_per_round or sampling_rate")
        if (self.kind in CYCLIC_SAMPLING) != (self.groups is not None):
            raise ValueError(f"groups (an integer >= 1) goes with sampling kinds `cyclic_poisson` and "
                             f"`cyclic_fixed` and only with them, got kind `{self.kind}` and groups {self.groups!r}")
        if self.kind in ("fixed", "cyclic_fixed", "epoch_blocks") and self.clients_per_round is not None:
            if self.clients_per_round != int(self.clients_per_round):
                raise ValueError(f"clients_per_round must be a whole number for sampling kind `{self.kind}`")
        return self


class ServerOptimizerConfig(Section):
    name: Literal["sgd", "adam"] = "sgd"
    lr: float = Field(1.0, gt=0)
    momentum: float = Field(0.0, ge=0, lt=1, description="sgd only")
    beta1: float = Field(0.9, ge=0, lt=1, description="adam only")
    beta2: float = Field(0.99, ge=0, lt=1, description="adam only")
    eps: float = Field(1e-3, gt=0, description="adam only")


class AdaptiveClipConfig(Section):
    """Adaptive clipping (Andrew et al. 2021): ``clip_norm`` is then the initial C."""

    target_quantile: float = Field(0.5, ge=0, le=1, description="fraction of updates left unclipped, γ")
    learning_rate: float = Field(0.2, gt=0, description="η in C ← C·exp(−η(b̃ − γ))")
    count_noise_std: float = Field(..., gt=0, description="σ_b, noise std on the unclipped count (paper: m/20)")


class RecenterConfig(Section):
    """DOPE-SGD (Nasr et al. 2023): clip the private updates around the public users' mean update."""

    center_clip: float | None = Field(
        None, gt=0, allow_inf_nan=True, description="λ: the center is clipped to this norm (eq. 2); null = clip_norm C (a center never "
        "moves the model further than a private user may); .inf = unclipped (public users drawn like the private)"
    )
    extended: bool = Field(False, description="public updates also enter the average, outside the noisy sum")
    clip_around_center: bool = Field(
        True, description="clip each private update around the center (DOPE); false: around zero, the center still "
        "added back at DOPE's weight: the control that removes the recentering alone"
    )


class PreconditionConfig(Section):
    """AdaDPS (Li et al. 2023): divide by a public preconditioner A before privatising."""

    source: Literal["public", "token_frequency"] = Field(
        "public", description="public users' RMSProp statistics, or the token frequencies of the dataset's vocabulary"
    )
    placement: Literal["server", "client"] = Field(
        "client", description="divide each update at the server, or each local gradient on the client (Alg. 3)"
    )
    statistic: Literal["user_second_moment", "rmsprop"] = Field(
        "user_second_moment", description="public: v averages the public users' mean of squared updates, or (the "
        "paper's RMSProp) the square of the public cohort's mean update"
    )
    beta: float = Field(0.9, ge=0, lt=1, description="public: RMSProp decay of the second moments")
    eps: float = Field(1e-3, gt=0, description="public: A = sqrt(v) + eps")
    profile: Literal["power", "top_k"] = Field(
        "power", description="token_frequency: A from the counts by a power (`power`, `floor`), or 1 for the "
        "`frequent_words` most frequent words and 1/`rare_scale` for the rest (`top_k`: the paper's own code)"
    )
    power: float = Field(
        1.0, gt=0, description="token_frequency, profile power: A_j = max((count_j/mean)^power, floor)"
    )
    floor: float = Field(1e-2, gt=0, description="token_frequency, profile power: smallest A_j")
    frequent_words: int = Field(
        100, ge=1, description="token_frequency, profile top_k: how many of the most frequent words keep A = 1"
    )
    rare_scale: float = Field(
        200.0, gt=0, description="token_frequency, profile top_k: every other word's A = 1/rare_scale (its steps "
        "rare_scale times larger)"
    )
    shuffle: bool = Field(
        False, description="token_frequency: the control shuffled A, the counts of the words that occur permuted "
        "among them by a permutation seeded from the run's seed (the same values, no information)"
    )

    @model_validator(mode="after")
    def _shuffles_side_information(self) -> PreconditionConfig:
        if self.shuffle and self.source != "token_frequency":
            raise ValueError("shuffle permutes side information (source token_frequency), not the public users' "
                             f"statistics (source {self.source}): set source token_frequency or shuffle false")
        return self

    @model_validator(mode="after")
    def _fields_of_the_profile(self) -> PreconditionConfig:
        ignored = {"power": ("frequent_words", "rare_scale"), "top_k": ("power", "floor")}[self.profile]
        if self.source == "token_frequency" and (set_here := sorted(set(ignored) & self.model_fields_set)):
            raise ValueError(f"{', '.join(set_here)} shape A under another profile than {self.profile!r}, which "
                             f"ignores them: set profile to {'top_k' if self.profile == 'power' else 'power'} or "
                             "remove them")
        return self


class ProjectionConfig(Section):
    """PDP-SGD / GEP (Zhou et al. 2021, Yu et al. 2021): project each private update onto the top-k subspace of
    the round's public updates before clipping."""

    k: int = Field(10, ge=1, description="the subspace's dimension; at most public_clients_per_round")
    noise_space: Literal["ambient", "subspace"] = Field(
        "ambient", description="`ambient`: the noise in all d dimensions; `subspace`: the noisy mean projected too, "
        "so the noise lies in the k subspace dimensions (post-processing: the same ε)"
    )


class MirrorConfig(Section):
    """PDA-DPMD (Amid et al. 2022): g = α_t·private + (1 − α_t)·public, α_t = cos(πt/2K). The recipe also
    pretrains on public data (``warm_start``, on by default: Algorithm 1 line 1); Algorithm 1's output, the average
    of the iterates, is ``model_average: {kind: all}``."""

    decay_rounds: int | None = Field(None, ge=1, description="K; null = the run's rounds")
    alpha_floor: float = Field(0.0, ge=0, le=1, description="α never goes below this (and stays there after K)")
    public_term: bool = Field(
        True, description="false: the control α-damped DP-FedAvg, g = α_t·private with no public term (no public "
        "users trained each round; the warm start stays)"
    )


class PublicScheduleConfig(Section):
    """PPSGD (Wang & Zhou 2020): public users steer the noise multiplier and the clip norm. The defaults are the
    paper's (§ Experiments: α = β = 0.3, ϕ = 10, φ = 100 for the hinge loss; it uses φ = 5 or 10 for the square
    loss), its budget test read against the noise its tCDP mechanism would add (``noise_reference``)."""

    budget_growth: float = Field(0.3, gt=0, description="α: ρ ← (1+α)ρ, i.e. z ← z/sqrt(1+α)")
    clip_decay: float = Field(0.3, gt=0, lt=1, description="β: C ← (1−β)C")
    noise_test_factor: float = Field(
        10.0, gt=0, description="ϕ (the paper's budget test): spend more when ϕ‖Δ̄_pub‖ < k·sqrt(d)·zC/m"
    )
    clip_test_factor: float = Field(
        100.0, gt=0, description="φ (the paper's clip test): shrink C when φ‖Δ̄_pub‖ < C; the paper: 100 for the "
        "hinge loss (the default), 5 or 10 for the square loss"
    )
    noise_reference: Literal["tcdp", "run"] = Field(
        "tcdp", description="the noise the budget test compares with: `tcdp`, the paper's (its tCDP Gaussian for the "
        "run's ε, δ, q and rounds: k = σ_tCDP/σ_run, fedpub/steps/public_schedule.py), for which ϕ was set; `run`, "
        "this run's own (k = 1)"
    )
    min_noise_multiplier: float | None = Field(
        None, gt=0, description="z never goes below this; null = no floor (the paper's)"
    )


class BudgetScheduleConfig(Section):
    """Seed 001, Table 2: a few rounds with a smaller z (more budget), the rest calibrated to the target."""

    boosted_rounds: int = Field(..., ge=1)
    boosted_noise_multiplier: float | None = Field(None, gt=0, description="z of the boosted rounds")
    boosted_noise_ratio: float | None = Field(None, gt=0, description="or: their z is this times the others'")
    position: Literal["first", "last"] = "first"

    @model_validator(mode="after")
    def _one_noise(self) -> BudgetScheduleConfig:
        if (self.boosted_noise_multiplier is None) == (self.boosted_noise_ratio is None):
            raise ValueError("give exactly one of boosted_noise_multiplier or boosted_noise_ratio")
        return self

    def boosted_z(self, noise_multiplier: float) -> float:
        """The boosted rounds' z when the other rounds use ``noise_multiplier``."""
        if self.boosted_noise_multiplier is not None:
            return self.boosted_noise_multiplier
        return self.boosted_noise_ratio * noise_multiplier


class TreeAggregationConfig(Section):
    """DP-FTRL (Kairouz et al. 2021): the private mean's noise is tree-aggregated (the binary mechanism), the tree
    restarting every epoch of ``sampling.kind: epoch_blocks`` (each user once per tree). No options: the
    section switches the noise from one Gaussian a round to the tree's."""


class NoiseConfig(Section):
    """Banded matrix-factorization DP-FTRL (Choquette-Choo et al. 2023): the private mean's noise is correlated
    across rounds, (C⁻¹Z)_t with C b-banded, so that it partly cancels in the model's running sum. bands > 1 needs
    each user at most once every b rounds: ``sampling.kind: cyclic_poisson`` (or ``cyclic_fixed``, for SecAgg+) with
    groups >= bands, which also amplifies it. bands 1 is DP-FedAvg's independent noise."""

    kind: Literal["banded_mf"] = Field(..., description="banded_mf: banded matrix-factorization noise")
    bands: int = Field(..., ge=1, description="b: how many past rounds' noise each round's correlates with, plus one")
    factorization: Literal["bsr", "optimized"] = Field(
        "bsr", description="bsr: the banded square root of the workload (Kalinin & Lampert 2024, closed form); "
        "optimized: the b-banded Toeplitz factor of least expected error (L-BFGS-B, cached)"
    )


class PublicTrainingConfig(Section):
    """Non-private training of the global model on the pooled public users' data."""

    epochs: int = Field(1, ge=1)
    batch_size: int = Field(32, ge=1)
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.0, ge=0, lt=1)


class ModelReuseConfig(PublicTrainingConfig):
    """PPSGD's model reuse: after the private rounds, minimise L_pub(w) + λ‖w − w_T‖²."""

    prox_weight: float = Field(0.1, ge=0, description="λ")


class ModelAverageConfig(Section):
    """Seed 003 §3.2: also evaluate the mean (window) or EMA of the last global models; ``all``, the mean of every
    round's global model θ_1..θ_T (seed 000, PDA-DPMD's Algorithm 1 output)."""

    kind: Literal["window", "ema", "all"] = "window"
    window: int = Field(5, ge=1, description="window: how many of the last models")
    decay: float = Field(0.9, gt=0, lt=1, description="ema: avg ← decay·avg + (1−decay)·w")


class StrategyConfig(Section):
    """User-level DP-FedAvg (McMahan et al. 2018) plus the public-data parts, which compose: a recipe
    ``name`` switches its own section on, and any section may be added to any recipe."""

    name: Literal[recipe_registry.RECIPE_NAMES] = recipe_registry.BASE_RECIPE
    clip_norm: float = Field(
        1.0, gt=0, allow_inf_nan=True, description="L2 clip of each user's update; .inf = off (with z = 0: FedAvg)"
    )
    noise_multiplier: float | None = Field(None, ge=0)
    target_epsilon: float | None = Field(None, gt=0)
    sampling: SamplingConfig = SamplingConfig(clients_per_round=50)
    server_optimizer: ServerOptimizerConfig = ServerOptimizerConfig()
    adaptive_clip: AdaptiveClipConfig | None = None
    public_clients_per_round: int = Field(
        0, ge=0, description="public users trained each round (no privacy cost); 10 when a section needs them"
    )
    public_update_limit: float = Field(
        100.0, gt=0, description="a public update whose L2 norm exceeds this multiple of clip_norm (a diverged "
        "public user) is refused with a warning naming the user and the round; .inf = no limit"
    )
    recenter: RecenterConfig | None = None
    precondition: PreconditionConfig | None = None
    projection: ProjectionConfig | None = None
    mirror: MirrorConfig | None = None
    public_schedule: PublicScheduleConfig | None = None
    budget_schedule: BudgetScheduleConfig | None = None
    tree_aggregation: TreeAggregationConfig | None = None
    noise: NoiseConfig | None = None
    warm_start: PublicTrainingConfig | None = Field(
        None, description="pretrain w_0 on the public users' data; on by default for pda_dpmd (null: off)"
    )
    model_reuse: ModelReuseConfig | None = None
    model_average: ModelAverageConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _recipe_sections(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        filled = dict(raw)
        name = filled.get("name", recipe_registry.BASE_RECIPE)
        for section in recipe_registry.switched_on(name) if isinstance(name, str) else ():
            if filled.get(section) is None:
                filled[section] = {}
        for section in recipe_registry.on_by_default(name) if isinstance(name, str) else ():
            if section not in filled:
                filled[section] = {}
        sampling = filled.get("sampling", cls.model_fields["sampling"].default.model_dump(exclude={"kind"}))
        kinds = [p.sampling_kind for p in recipe_registry.active(filled) if p.sampling_kind is not None]
        if kinds and isinstance(sampling, dict) and "kind" not in sampling:
            filled["sampling"] = {**sampling, "kind": kinds[0]}  # the cohort rule the part needs, by default
        if "public_clients_per_round" not in filled and recipe_registry.public_cohort(filled):
            filled["public_clients_per_round"] = 10
        return filled

    @model_validator(mode="after")
    def _consistent(self) -> StrategyConfig:
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ValueError("give exactly one of noise_multiplier or target_epsilon")
        if math.isinf(self.clip_norm) and (self.noise_multiplier or self.target_epsilon):
            raise ValueError("an infinite clip_norm only goes with noise_multiplier: 0")
        steering = recipe_registry.steering(self)
        if len(steering) > 1:
            raise ValueError(f"{' and '.join(steering)} both set the round's clip or noise: choose one")
        for part in recipe_registry.active(self):
            if part.needs_fixed is not None and steering:
                raise ValueError(f"{part.section} {part.needs_fixed}: remove {steering[0]}")
            if part.sampling_kind is not None and self.sampling.kind != part.sampling_kind:
                raise ValueError(f"{part.section} {part.sampling_why}: sampling.kind must be {part.sampling_kind}, "
                                 f"got {self.sampling.kind}")
        varying = [p.section for p in recipe_registry.active(self) if "noise_multiplier" in p.steers]
        if self.sampling.kind in CYCLIC_SAMPLING and self.sampling.groups > 1 and varying:
            raise ValueError(f"sampling.kind {self.sampling.kind} prices group 0's rounds for every group, true only "
                             f"when every round has the same noise multiplier: remove {varying[0]} (or set groups: 1)")
        public = recipe_registry.public_cohort(self)
        if public and self.public_clients_per_round == 0:
            raise ValueError(f"public_clients_per_round is 0, but {'/'.join(public)} train public users each round")
        if self.public_clients_per_round and not public:
            raise ValueError(
                f"public_clients_per_round is {self.public_clients_per_round}, but no section of recipe `{self.name}` "
                f"uses public users each round, so they would be trained for nothing: remove it (sections that use "
                f"them: {', '.join(recipe_registry.PER_ROUND_PUBLIC)}, with what they use)"
            )
        pre = self.precondition
        geometric = recipe_registry.in_public_geometry(self)
        if pre and pre.source == "public" and pre.placement == "client" and geometric:
            raise ValueError(
                "precondition with source `public` and placement `client` trains public users without A, so "
                "their updates are in another geometry than the private updates, which "
                f"{', '.join(geometric)} combine{'s' if len(geometric) == 1 else ''} with them: use placement "
                "`server`"
            )
        return self


class PrivacyConfig(Section):
    delta: float = Field(1e-5, gt=0, lt=1)
    accountant: Literal["pld", "rdp"] = "pld"
    budget_epsilon: float | None = Field(
        None, gt=0, description="stop before the run's ε would exceed this"
    )
    epsilon_every: int | None = Field(
        None,
        ge=1,
        description="rounds between ε reports in metrics.jsonl (a PLD evaluation costs 0.1-0.4 s); null = on "
        "evaluation rounds and the last round. With budget_epsilon every round is priced anyway and reported",
    )
    randomness: Literal["auto", "secret", "reproducible"] = Field(
        "auto",
        description="where the noise and the private cohorts are drawn from: `secret`, a seed from the OS's CSPRNG "
        "held only by the server; `reproducible`, a function of `seed` and `name` (not private against anyone "
        "holding the config); `auto`, secret in a deployment (flwr run), reproducible in a simulation",
    )
    draws_key: str | None = Field(
        None, min_length=1, description="reproducible randomness only: derive the privacy seed from `seed` and this "
        "key instead of `name`, so runs given one key draw the same cohorts and noise (common random numbers "
        "between the arms of a comparison); never release two models of one key: their noise cancels; null = `name`",
    )
    diagnostics: Literal["auto", "on", "off"] = Field(
        "auto",
        description="write diagnostics.jsonl, un-noised statistics of the private users (realised cohort, "
        "failures, update norms, clipped fraction, training loss): outside the DP guarantee; `auto`, on in a "
        "simulation, off in a deployment",
    )
    noise_sampler: Literal["torch", "opendp"] = Field(
        "torch",
        description="who draws the server's Gaussian noise: `torch`, torch's seeded textbook floating-point sampler "
        "(reproducible; not hardened against floating-point attacks); `opendp`, OpenDP's exact discrete-Gaussian "
        "mechanism from the OS's randomness (pip install 'fedpub[secure-noise]'; not reproducible, ~20k draws/s; "
        "not with tree_aggregation or noise: banded_mf). docs/privacy.md",
    )


class FlowerConfig(Section):
    """How the Flower backends run (``fedpub run --backend flower``, ``flwr run``)."""

    client_num_cpus: float = Field(1.0, gt=0, description="CPUs per simulated client (Ray actor)")
    client_num_gpus: float = Field(0.0, ge=0, description="GPU fraction per simulated client, e.g. 0.25")
    ray_num_cpus: int | None = Field(
        None, ge=1, description="CPUs given to the local Ray fedpub starts; null = all (not with ray_address)"
    )
    ray_address: str | None = Field(
        None, min_length=1, description="host:port of a running Ray cluster's head (`ray start --head`) to run the "
        "simulation on; null = RAY_ADDRESS if set, else a new local Ray (never a running one)",
    )
    node_wait_timeout: float = Field(120.0, gt=0, description="seconds to wait for the expected nodes")
    round_timeout: float = Field(3600.0, gt=0, description="seconds to wait for a round's replies")
    public_users: Literal["server", "nodes"] = Field(
        "server",
        description="where a recipe's public users train: `server`, a pool the ServerApp holds and trains itself; "
        "`nodes`, their own SuperNodes that declare themselves public (sent TRAIN messages like the private cohort)",
    )
    private_users: Literal["data", "nodes"] = Field(
        "data",
        description="who the private users are on Flower: `data`, the training file's users (the server holds the "
        "population's data and waits for a node per private user); `nodes`, the nodes that register as private "
        "(a deployment: the server holds no private data, N is their number when discovery ends)",
    )
    expected_private_nodes: int | None = Field(
        None, ge=1, description="with private_users `nodes`: the private nodes to wait for (discovery ends when "
        "all are there; more is an error)",
    )
    min_private_nodes: int | None = Field(
        None, ge=1, description="with private_users `nodes`: after node_wait_timeout, run with at least this many "
        "private nodes (fewer is an error); null = expected_private_nodes",
    )
    user_registry: FilePath | None = Field(
        None, description="YAML registry of user id -> {public, key}: a node must sign its user id with the key "
        "registered for it; unregistered ids, bad signatures and a second node claiming a taken id are refused "
        "(null = no registry: a duplicate id stops discovery)",
    )

    @model_validator(mode="after")
    def _ray(self) -> FlowerConfig:
        if self.ray_address is not None and self.ray_num_cpus is not None:
            raise ValueError(
                "ray_num_cpus sizes the local Ray fedpub starts; with ray_address the cluster's nodes declare their "
                "CPUs (`ray start --num-cpus`): drop ray_num_cpus or ray_address"
            )
        return self

    @model_validator(mode="after")
    def _private_nodes(self) -> FlowerConfig:
        if self.private_users == "nodes" and self.expected_private_nodes is None:
            raise ValueError("private_users `nodes` needs expected_private_nodes (the private population to wait for)")
        if self.private_users == "data" and (self.expected_private_nodes or self.min_private_nodes):
            raise ValueError("expected_private_nodes and min_private_nodes go with private_users `nodes`")
        if self.min_private_nodes is not None and self.min_private_nodes > (self.expected_private_nodes or 0):
            raise ValueError("min_private_nodes cannot exceed expected_private_nodes")
        return self


class WandbConfig(Section):
    """A Weights & Biases run for each fedpub run (``pip install 'fedpub[tracking]'``)."""

    project: str = Field(..., min_length=1, description="the W&B project the run is logged to")
    entity: str | None = Field(None, description="the W&B team or user; null = your default entity")
    mode: Literal["online", "offline"] = Field(
        "online", description="online: sent to W&B as it runs; offline: kept in <run dir>/wandb/ for `wandb sync`"
    )
    tags: tuple[str, ...] = Field((), description="tags of the W&B run")


class MlflowConfig(Section):
    """An MLflow run for each fedpub run (``pip install 'fedpub[tracking]'``: mlflow-skinny, or full mlflow)."""

    tracking_uri: str | None = Field(
        None, description="where MLflow keeps runs: a server (http://host:5000), a database (sqlite:///mlflow.db); "
        "null = MLflow's default (MLFLOW_TRACKING_URI, else ./mlflow.db)",
    )
    experiment: str = Field(..., min_length=1, description="the MLflow experiment (created when missing)")


class TrackingConfig(Section):
    """Experiment trackers that also receive what a run releases (metrics.jsonl's records, the config, the final
    figures; never diagnostics), all off by default. Not part of what the run computes: changing this section
    does not make a resumed run another config (docs/guides/tracking.md)."""

    tensorboard: bool = Field(
        False, description="TensorBoard event files in <run dir>/tensorboard/ (pip install 'fedpub[tracking]')"
    )
    wandb: WandbConfig | None = Field(None, description="a Weights & Biases run: {project, entity, mode, tags}")
    mlflow: MlflowConfig | None = Field(None, description="an MLflow run: {tracking_uri, experiment}")


def _task_form(value: Any) -> str:
    """Which form a ``task`` value takes: a preset's name, or your own ``{loss, metrics}``."""
    return "preset" if isinstance(value, str) else "own"


MAX_ROUNDS = 100_000
"""The most rounds a run may plan: its calibration prices every planned round (about 60 s for 100,000 on 2 cores), so
a size that could never finish (``rounds: 1e12`` hung in the calibration) is refused when the config is read."""


class ExperimentConfig(Section):
    name: str = Field(
        "quickstart", pattern=r"^[A-Za-z0-9_.-]+$", description="the run's folder under output_dir: letters, digits, "
        "_ . - (no / or \\), neither . nor ..",
    )
    seed: int = 0
    rounds: int = Field(
        40, ge=1, le=MAX_ROUNDS, description=f"rounds to run (at most {MAX_ROUNDS:,}: the noise is calibrated over "
        "every round before the first, about a minute at the most)",
    )
    eval_every: int = Field(5, ge=1)
    checkpoint_every: int = Field(5, ge=1)
    stop_after_failed_rounds: int | None = Field(
        3, ge=1, description="stop (checkpointed, resumable) after this many rounds in a row in which every "
        "sampled user failed; null = go on, releasing noise only",
    )
    output_dir: FilePath = Path("runs")
    device: str = Field(
        "auto", description="a torch device: auto (CUDA when present), cpu, cuda, cuda:1, mps, ... (its form is "
        "checked here, without torch; whether torch knows it and this machine has it, when the experiment is built)",
    )
    task: Annotated[
        Annotated[Literal[registry.TASK_NAMES], Tag("preset")] | Annotated[TaskConfig, Tag("own")],
        Discriminator(_task_form),
    ] = Field(
        registry.default_task(), description="loss and metrics: a preset (each data.source serves its dataset's), "
        "or your own {loss, metrics}"
    )
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    client: ClientConfig = ClientConfig()
    strategy: StrategyConfig = StrategyConfig(noise_multiplier=1.0)
    privacy: PrivacyConfig = PrivacyConfig()
    flower: FlowerConfig = FlowerConfig()
    tracking: TrackingConfig = TrackingConfig()

    @field_validator("name")
    @classmethod
    def _one_folder(cls, name: str) -> str:
        if name in (".", ".."):
            raise ValueError(f"the run's folder is output_dir/name: `{name}` is not a folder of its own (the run "
                             "would write outside its run directory); give a name of letters, digits, _ . -")
        return name

    @field_validator("device")
    @classmethod
    def _device_form(cls, device: str) -> str:
        if not re.fullmatch(r"auto|[a-z][a-z0-9_]*(:[0-9]+)?", device):
            raise ValueError("not a torch device: use auto, cpu, cuda, cuda:<index>, mps, or another torch device type")
        return device


def _check_public_users(config: ExperimentConfig) -> None:
    """A recipe that trains public users needs some: data.public (a fraction, or the dataset's held-out split), or
    the server's own users when the private users are nodes."""
    strategy, public = config.strategy, config.data.public
    needs = recipe_registry.public_phases(strategy)
    if strategy.public_clients_per_round:
        needs.insert(0, f"public_clients_per_round ({strategy.public_clients_per_round})")
    marked = "table" in registry.source(config.data.source)[0].config_fields and config.data.table.public is not None
    has_public = (public.pool == "heldout" or public.fraction > 0 or public.users is not None or marked
                  or config.flower.private_users == "nodes")
    if needs and not has_public:
        heldout = ", ".join(registry.sources_where(lambda d, s: "heldout" in d.public_pools))
        raise ConfigError(
            f"strategy `{strategy.name}` trains public users (strategy.{', strategy.'.join(needs)}), but the data has "
            f"none: set data.public.fraction (e.g. 0.02), data.public.users (a list), or data.public.pool: heldout "
            f"(data.source {heldout})"
        )


def _check_task_and_data(config: ExperimentConfig) -> None:
    """The task, the model and the public pool are ones the source's dataset declares; a deployment whose private
    users are nodes reads no generated or pooled data."""
    data = config.data
    dataset, source = registry.source(data.source)
    if config.flower.private_users == "nodes" and data.validation.fraction > 0:
        raise ConfigError(
            f"data.validation.fraction {data.validation.fraction}: validation users are held out of the private "
            "users' data, which flower.private_users `nodes` keeps on the nodes; set data.validation.fraction: 0"
        )
    if config.flower.private_users == "nodes" and data.eval_users == "evaluation":
        raise ConfigError(
            "data.eval_users `evaluation`: evaluation users are held out of the private users' data, which "
            "flower.private_users `nodes` keeps on the nodes; set data.eval_users: public (the server's users)"
        )
    if config.flower.private_users == "nodes" and (source.generated or data.uniform_users is not None):
        raise ConfigError(
            "flower.private_users `nodes` reads no private data on the server: data.source cannot be synthetic (the "
            f"server would generate every user; {data.source} is) and data.uniform_users cannot pool the users' "
            "examples"
        )
    if data.public.pool not in dataset.public_pools:
        heldout = ", ".join(registry.sources_where(lambda d, s: data.public.pool in d.public_pools))
        raise ConfigError(
            f"data.public.pool `{data.public.pool}` needs a dataset with a held-out split (data.source {heldout}); "
            f"{dataset.name} has: {', '.join(dataset.public_pools)}"
        )
    if isinstance(config.task, TaskConfig):
        if len(dataset.tasks) > 1:
            raise ConfigError(
                f"task {{loss, metrics}}: {dataset.name} data is read per task (its examples differ by task), so a "
                f"task of your own does not go with data.source `{data.source}`; task: "
                f"{' | '.join(dataset.task_names)}"
            )
    elif config.task not in dataset.task_names:
        serving = ", ".join(registry.sources_where(lambda d, s: config.task in d.task_names))
        raise ConfigError(
            f"task `{config.task}` does not go with data.source `{data.source}`: {dataset.name} data allows task "
            f"{' | '.join(dataset.task_names)}; task {config.task} needs data.source {serving}"
        )
    if config.model.name is not None and config.model.name not in dataset.model_names:
        serving = ", ".join(registry.sources_where(lambda d, s: config.model.name in d.model_names))
        allowed = " | ".join(dataset.model_names) or "none registered"
        raise ConfigError(
            f"model `{config.model.name}` does not go with data.source `{data.source}`: {dataset.name} data allows "
            f"model.name {allowed}, or model.factory ('package.module:callable') for your own; model "
            f"{config.model.name} needs data.source {serving}"
        )


def _section(annotation: Any) -> type[BaseModel] | None:
    """The section a field of type ``annotation`` holds: X for X or X | None, else None."""
    members = [a for a in (annotation, *get_args(annotation)) if isinstance(a, type)]
    return next((a for a in members if issubclass(a, BaseModel)), None)


def _tagged(annotation: Any) -> dict[str, type[BaseModel] | None]:
    """The forms of a tagged union anywhere in ``annotation`` (``Annotated[X, Tag(t)]``), by tag: the form of ``task``
    (:func:`_task_form`), the source of ``data.synthetic.public``."""
    forms: dict[str, type[BaseModel] | None] = {}
    for arg in get_args(annotation):
        tag = next((m.tag for m in getattr(arg, "__metadata__", ()) if isinstance(m, Tag)), None)
        forms |= _tagged(arg) if tag is None else {tag: _section(get_args(arg)[0])}
    return forms


def _walk(loc: tuple) -> tuple[list[str], list[str]]:
    """The field path of ``loc`` (without a tagged union's tags), and the keys allowed in the section it ends in."""
    model: type[BaseModel] | None = ExperimentConfig
    path: list[str] = []
    forms: dict[str, type[BaseModel] | None] = {}
    for part in loc:
        if part in forms:
            model, forms = forms[part], {}
            continue
        path.append(str(part))
        field = model.model_fields.get(str(part)) if model is not None else None
        annotation = field.annotation if field is not None else None
        model, forms = _section(annotation), _tagged(annotation)
    return path, list(model.model_fields) if model is not None else []


_SHOWN = reprlib.Repr()  # a given value is shown cut short: YAML aliases can nest a huge value in a few lines
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 2, 80, 80


def _describe(error: Any) -> str:
    path, _ = _walk(error["loc"])
    where = ".".join(path) or "(top level)"
    if error["type"] == "extra_forbidden":
        allowed = ", ".join(_walk(error["loc"][:-1])[1])
        return f"unknown key `{where}`; allowed keys here: {allowed}"
    given = error.get("input")
    shown = "" if isinstance(given, dict) else f" (got {_SHOWN.repr(given)})"
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
        _check_public_users(config)
    except ConfigError as error:
        raise ConfigError(f"{source}: invalid configuration\n  - {error}") from None
    return config


def apply_overrides(raw: Any, overrides: Sequence[str]) -> dict[str, Any]:
    """``raw`` (a config mapping) with each ``KEY=VALUE`` of ``overrides`` set, in order (``--set``): KEY a dotted
    path (``strategy.clip_norm``), VALUE read as YAML (``0.5``, ``null``, ``true``, ``[1, 2]``, ``cuda:1``). The
    result is validated like any config (an unknown key is named with the keys allowed there)."""
    result: dict[str, Any] = dict(raw or {}) if isinstance(raw, dict) or raw is None else raw
    if not isinstance(result, dict):
        return result  # parse_config says the top level must be a mapping
    for item in overrides:
        key, sep, text = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE with a dotted KEY, e.g. strategy.clip_norm=0.5")
        try:
            value = load_yaml(text) if text.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {item!r}: the value is not valid YAML: {yaml_problem(exc)}") from None
        section = result
        for depth, part in enumerate(parts[:-1]):
            inner = section.get(part)
            if inner is None:
                inner = {}
            elif not isinstance(inner, dict):
                where = ".".join(parts[: depth + 1])
                raise ConfigError(f"--set {item!r}: `{where}` is a value ({inner!r}), not a section with keys")
            section[part] = inner = dict(inner)
            section = inner
        section[parts[-1]] = value
    return result


def load_config(path: Path, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Read and validate a YAML experiment file, with ``overrides`` (``--set KEY=VALUE``) applied; an error names
    the file, the overrides and the field."""
    try:
        text = Path(path).read_bytes()  # YAML decodes it: UTF-8, or UTF-16 with a byte order mark
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:  # also text that is not UTF-8
        raise ConfigError(f"{path}: not valid YAML: {yaml_problem(exc)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid YAML: lists or mappings nested too deeply") from None
    if raw is None:
        raise ConfigError(f"{path}: the file is empty: give the experiment's keys (fedpub run with no CONFIG runs the "
                          "bundled quick start)")
    config_folder(str(Path(path).resolve().parent))  # model.factory: a module beside the config
    source = " ".join([str(path), *(f"--set {item}" for item in overrides)])
    return parse_config(apply_overrides(raw, overrides), source)


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong and where (line and column), without PyYAML's quoted excerpt."""
    if not isinstance(error, yaml.MarkedYAMLError) or error.problem is None:
        return " ".join(str(error).split())
    mark = error.problem_mark
    where = "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}"
    return f"{error.problem}{where}"


def dump_config(config: ExperimentConfig) -> str:
    """The resolved configuration as YAML (what a run writes next to its results). Of the datasets' own ``data``
    sections only those of ``data.source``'s dataset are written: the others do not change the run, and
    registering a dataset then changes no other run's resolved config."""
    raw = config.model_dump(mode="json")
    if config.model.factory is None:  # a registered model's section reads as it did before factories existed
        del raw["model"]["factory"], raw["model"]["kwargs"]
    if config.data.public.users is None:  # so does a public section of no list
        del raw["data"]["public"]["users"]
    own = registry.source(config.data.source)[0].config_fields
    for name in registry.data_fields():
        if name not in own:
            del raw["data"][name]
    return yaml.safe_dump(raw, sort_keys=False)

"""A recipe's run phases: what runs around its private rounds, declared by the ``strategy:`` sections and run the
same way by every backend (fedpub's run session and :class:`~fedpub.strategies.flower.FedpubStrategy` in a Flower
user's own ServerApp).

- before the rounds, **warm start** (``warm_start``; PDA-DPMD's Algorithm 1 line 1, on by default for it): w_0
  pretrained on the pooled public users' data;
- after each round, the **model average** (``model_average``): the mean or EMA of the last global models, evaluated
  beside the global model (post-processing of released models);
- after the rounds, **model reuse** (``model_reuse``; PPSGD, Wang & Zhou 2020, Alg. 1 line 25): the released model
  minimises L_pub(w) + λ‖w − w_T‖² from the private w_T.

The training on public data is client-side work behind :class:`PublicTrainer` (fedpub's own:
:class:`fedpub.clients.public_training.PooledPublicTrainer`). Public users opted out: none of this costs privacy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from fedpub.config import ModelAverageConfig, ModelReuseConfig, PublicTrainingConfig, StrategyConfig
from fedpub.model_average import averaged_params, init_average, update_average
from fedpub.types import Params


class PublicTrainer(Protocol):
    """Non-private training on the pooled public users' data (with λ‖w − ``params``‖² for a ModelReuseConfig)."""

    def train_public(
        self, params: Params, config: PublicTrainingConfig, purpose: str
    ) -> tuple[Params, dict[str, float]]:
        """``config.epochs`` of training from ``params`` (``purpose``: the phase, which seeds its generator); the
        new parameters and the training metrics."""
        ...


@dataclass(frozen=True)
class RunPhases:
    """The run phases a strategy config declares (none: the rounds alone)."""

    warm_start: PublicTrainingConfig | None = None
    model_reuse: ModelReuseConfig | None = None
    model_average: ModelAverageConfig | None = None

    @classmethod
    def from_config(cls, strategy: StrategyConfig) -> RunPhases:
        return cls(strategy.warm_start, strategy.model_reuse, strategy.model_average)

    @property
    def public_sections(self) -> list[str]:
        """The sections that train on public data (``strategy.<name>``), in the order they run."""
        return [name for name in ("warm_start", "model_reuse") if getattr(self, name) is not None]

    def before_rounds(self, params: Params, trainer: PublicTrainer | None) -> tuple[Params, dict[str, float]]:
        """The model the first round starts from (warm started when declared) and the phase's metrics
        (``warm_start/<metric>``)."""
        return self._train(params, self.warm_start, "warm_start", trainer)

    def after_rounds(self, params: Params, trainer: PublicTrainer | None) -> tuple[Params, dict[str, float]]:
        """The released model from the last round's ``params`` (model reuse when declared, else ``params``) and the
        phase's metrics (``model_reuse/<metric>``)."""
        return self._train(params, self.model_reuse, "model_reuse", trainer)

    def init_average(self) -> dict[str, Any]:
        """The model average's state before the first round (a plain dict: checkpointed with the run)."""
        return init_average()

    def update_average(self, state: dict[str, Any], params: Params) -> dict[str, Any]:
        """The average's state after one more round's global model ``params`` (unchanged when none is declared)."""
        return state if self.model_average is None else update_average(self.model_average, state, params)

    @staticmethod
    def averaged(state: dict[str, Any]) -> Params | None:
        """The averaged model to evaluate beside the global model (None before the first round or when off)."""
        return averaged_params(state)

    @staticmethod
    def _train(
        params: Params, config: PublicTrainingConfig | None, purpose: str, trainer: PublicTrainer | None
    ) -> tuple[Params, dict[str, float]]:
        if config is None:
            return params, {}
        if trainer is None:
            raise ValueError(f"strategy.{purpose} trains on the public users' pooled data, but no public trainer "
                             "was given")
        trained, metrics = trainer.train_public(params, config, purpose)
        return trained, {f"{purpose}/{k}": v for k, v in metrics.items()}

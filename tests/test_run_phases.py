"""The run phases a strategy config declares (fedpub/run_phases.py), and the drop-in strategy's refusal of a phase
that trains on public data without a public trainer. (That the drop-in runs them as ``fedpub run`` does:
tests/simulations/test_drop_in_phases.py.)"""

from __future__ import annotations

import pytest
import torch

from fedpub.config import ModelReuseConfig, PublicTrainingConfig, StrategyConfig
from fedpub.run_phases import RunPhases
from fedpub.strategies.flower import FedpubStrategy, TrainFnPublicTrainer


class ShiftingTrainer:
    """Adds the phase's lr to every weight, and says which phases it ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def train_public(self, params, config: PublicTrainingConfig, purpose: str):
        self.ran.append(purpose)
        return {k: v + config.lr for k, v in params.items()}, {"train_loss": 1.5}


def test_pda_dpmd_warm_starts_by_default_and_ppsgd_reuses_the_model():
    params, trainer = {"w": torch.zeros(2)}, ShiftingTrainer()
    pda = RunPhases.from_config(StrategyConfig(name="pda_dpmd", noise_multiplier=1.0))
    started, metrics = pda.before_rounds(params, trainer)
    assert torch.equal(started["w"], torch.full((2,), pda.warm_start.lr))
    assert metrics == {"warm_start/train_loss": 1.5}
    assert pda.after_rounds(started, trainer) == (started, {})  # no model reuse: the last model is released
    ppsgd = RunPhases.from_config(StrategyConfig(name="ppsgd", noise_multiplier=1.0))
    assert isinstance(ppsgd.model_reuse, ModelReuseConfig) and ppsgd.before_rounds(params, trainer) == (params, {})
    released, metrics = ppsgd.after_rounds(params, trainer)
    assert metrics == {"model_reuse/train_loss": 1.5} and trainer.ran == ["warm_start", "model_reuse"]


def test_the_model_average_is_kept_only_when_declared():
    rounds = [{"w": torch.tensor([float(t)])} for t in (1, 2, 3)]
    none, every = RunPhases(), RunPhases.from_config(StrategyConfig(noise_multiplier=1.0, model_average={"kind": "all"}))
    state_none, state_all = none.init_average(), every.init_average()
    for params in rounds:
        state_none, state_all = none.update_average(state_none, params), every.update_average(state_all, params)
    assert RunPhases.averaged(state_none) is None
    assert torch.equal(RunPhases.averaged(state_all)["w"], torch.tensor([2.0]))


def test_the_drop_in_strategy_refuses_public_phases_without_a_public_trainer():
    with pytest.raises(ValueError, match=r"strategy\.warm_start train the model .* give public_trainer="):
        FedpubStrategy.from_config({"name": "pda_dpmd", "public_clients_per_round": 2, "noise_multiplier": 1.0},
                                   population=100, rounds=3, seed=0, public_nodes=True)
    strategy = FedpubStrategy.from_config(  # warm_start: null runs it cold, no trainer needed
        {"name": "pda_dpmd", "public_clients_per_round": 2, "noise_multiplier": 1.0, "warm_start": None},
        population=100, rounds=3, seed=0, public_nodes=True,
    )
    assert strategy.phases == RunPhases()


def test_a_pooled_train_function_must_return_the_models_weights():
    trainer = TrainFnPublicTrainer(lambda weights, config: {"other": torch.zeros(1)})
    with pytest.raises(ValueError, match="pooled train function returned weights \\(warm_start\\) that do not fit"):
        trainer.train_public({"w": torch.zeros(2)}, PublicTrainingConfig(), "warm_start")
    fine = TrainFnPublicTrainer(lambda weights, config: {"w": weights["w"] + config.lr})
    assert torch.equal(fine.train_public({"w": torch.zeros(2)}, PublicTrainingConfig(lr=0.5), "warm_start")[0]["w"],
                       torch.full((2,), 0.5))

"""Seed 003's CPU mechanism proxy: its rounds are fedpub's own DOPE and DP-FedAvg rounds (noise off, the same
updates), its arms share their draws, and its quick mode writes its record."""

from __future__ import annotations

import math

import pytest
import torch

from fedpub.config import StrategyConfig
from fedpub.privacy.events import PoissonSampling
from fedpub.strategies.compose import build_strategy
from fedpub.simulations.reproductions import dope_proxy as dp
from fedpub.simulations.reproductions.results_record import VERDICTS, read_claims_json

SETTING = dp.Setting(dim=6, private=50, public=3, cohort=5, rounds=2)
CONFIGS = {
    "dp_fedavg_all": {},
    "dp_fedavg_only_private": {"name": "dope", "recenter": {"center_clip": 1e-12, "extended": True}},
    "dope": {"name": "dope", "recenter": {"center_clip": math.inf}},
    "dope_no_recentering": {"name": "dope", "recenter": {"center_clip": math.inf, "clip_around_center": False}},
}


@pytest.mark.parametrize("arm", dp.PRIVATE_ARMS)
def test_a_noiseless_proxy_round_is_fedpubs_round_of_that_arm(arm):
    """The same private and public updates through fedpub's strategy (noise multiplier 0, server lr 1) and through
    the proxy's aggregate give the same step (the dope_table7 sweep's settings of each arm)."""
    gen = torch.Generator().manual_seed(0)
    model = torch.randn(SETTING.dim, generator=gen, dtype=dp.DTYPE)
    private = [torch.randn(SETTING.dim, generator=gen, dtype=dp.DTYPE) * s for s in (0.2, 0.5, 1.0, 3.0)]
    public = [torch.randn(SETTING.dim, generator=gen, dtype=dp.DTYPE) for _ in range(SETTING.public)]
    clip = 0.7
    core = build_strategy(StrategyConfig(clip_norm=clip, noise_multiplier=0.0, **CONFIGS[arm]),
                          sampling=PoissonSampling(SETTING.cohort / SETTING.private), population=SETTING.private,
                          noise_multiplier=0.0, seed=0, rounds=SETTING.rounds)
    params = {"w": model}
    fedpub_step = core.aggregate(params, [{"w": u} for u in private], core.init(params), 0,
                                 public_updates=[] if arm == "dp_fedavg_all" else [{"w": u} for u in public]
                                 ).params["w"] - model
    center = torch.stack(public).mean(0)[None]
    proxy_step = dp.aggregate(arm, torch.stack(private)[None], center, torch.tensor([clip], dtype=dp.DTYPE),
                              torch.zeros(1, SETTING.dim, dtype=dp.DTYPE), SETTING)[0]
    torch.testing.assert_close(fedpub_step.to(dp.DTYPE), proxy_step, rtol=1e-5, atol=1e-6)


def test_every_arm_of_a_seed_draws_the_same_cohort_and_seeds_differ():
    """One noiseless, unclipped round from w = 0: each arm's model is its formula over the one cohort the seed's
    stream draws (the private users whose uniform falls under m/N), so the arms differ only in how they aggregate."""
    import dataclasses

    from fedpub.seeding import torch_generator

    setting = dataclasses.replace(SETTING, rounds=1)
    users = dp.make_users(setting, 0)
    one, unclipped = torch.tensor([1.0], dtype=dp.DTYPE), torch.tensor([1e6], dtype=dp.DTYPE)
    uniforms = torch.rand(setting.private + setting.public, generator=torch_generator(dp.NAME, 0, "rounds"),
                          dtype=dp.DTYPE)
    cohort = users.private[uniforms[:setting.private] < setting.cohort / setting.private]
    center, m, k = users.public.mean(0), setting.cohort, setting.public
    expected = {"dope": center + (cohort - center).sum(0) / m,
                "dope_no_recentering": center + cohort.sum(0) / m,
                "dp_fedavg_only_private": (cohort.sum(0) + k * center) / (m + k)}
    for arm, model in expected.items():
        torch.testing.assert_close(dp.train(arm, setting, users, one, unclipped, 0.0, 0)[0], model)
    noisy = [dp.train("dope", setting, users, one, one, 1.0, stream) for stream in (0, 0, 1)]
    assert torch.equal(noisy[0], noisy[1]) and not torch.equal(noisy[0], noisy[2])


def test_quick_mode_writes_the_claims_at_own_and_shared_points(tmp_path):
    out = dp.main(["--quick", "--out", str(tmp_path / "out")])
    record = read_claims_json(out / "claims.json")
    assert record.name == "dope_proxy" and record.seed_paper == "003" and record.quick and record.seeds == 3
    assert all(c.verdict.startswith(VERDICTS) for c in record.claims)
    texts = [c.text for c in record.claims]
    assert "DOPE-SGD beats DOPE with the recentering removed (the public mean still added at DOPE's weight): the " \
           "recentering alone — both at dope_no_recentering's tuned (η, C)" in texts
    assert "RDP" in (out / "comparison.md").read_text()

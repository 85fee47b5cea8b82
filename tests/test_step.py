import torch

from fedpub.step import Step, chain, named_chain
from fedpub.types import RoundContext, StepResult

CTX = RoundContext(round=0, seed=0, population=10, sampling_rate=0.5, expected_cohort=5.0, cohort_size=5)


def _adder(amount: float, output: str | None = None) -> Step:
    def init(params):
        return {"calls": 0}

    def update(updates, state, *, ctx, **inputs):
        seen = inputs.get("offset", 0.0)
        out = {k: v + amount + seen for k, v in updates.items()}
        outputs = {output: amount} if output else {}
        return StepResult(out, {"calls": state["calls"] + 1}, {"added": amount}, outputs=outputs)

    return Step(init, update)


def test_named_chain_runs_in_order_and_feeds_outputs_forward():
    step = named_chain(("first", _adder(1.0, output="offset")), ("second", _adder(10.0)))
    params = {"w": torch.zeros(2)}
    state = step.init(params)
    result = step.update(params, state, ctx=CTX)
    # second adds 10 plus the offset 1 emitted by first
    torch.testing.assert_close(result.updates["w"], torch.full((2,), 12.0))
    assert result.state == {"first": {"calls": 1}, "second": {"calls": 1}}
    assert result.metrics == {"first/added": 1.0, "second/added": 10.0}
    assert state == {"first": {"calls": 0}, "second": {"calls": 0}}


def test_chain_names_steps_by_position():
    step = chain(_adder(1.0), _adder(2.0))
    assert set(step.init({})) == {"0", "1"}


def test_the_chain_declares_its_steps_releases_in_order_feeding_declared_outputs_forward():
    """A schedule's declared noise multiplier reaches the noise step's declaration, as its output reaches
    the noise step's update; steps that declare nothing are skipped."""
    import dp_accounting

    from fedpub.step import Releases

    def schedule(round_index, **_):
        return Releases(outputs={"noise_multiplier": 0.5} if round_index == 0 else {})

    def noise(round_index, *, noise_multiplier=2.0, **_):
        return Releases((dp_accounting.GaussianDpEvent(noise_multiplier),))

    def count(round_index, **_):
        return Releases((dp_accounting.GaussianDpEvent(9.0),))

    plain = _adder(0.0)
    step = named_chain(
        ("schedule", Step(plain.init, plain.update, schedule)), ("plain", plain),
        ("noise", Step(plain.init, plain.update, noise)), ("count", Step(plain.init, plain.update, count)),
    )
    g = dp_accounting.GaussianDpEvent
    assert step.releases(0) == Releases((g(0.5), g(9.0)), {"noise_multiplier": 0.5})
    assert step.releases(1) == Releases((g(2.0), g(9.0)), {})
    assert named_chain(("plain", plain)).releases(3) == Releases()

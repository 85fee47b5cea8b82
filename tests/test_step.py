"""Steps and chains: order, states and metrics, and the declared names a chain checks when built and run."""

import dp_accounting
import pytest
import torch

from fedpub.privacy.events import PoissonSampling
from fedpub.step import EmptyState, Prepared, Releases, Step, StepResult, after_sum_step, chain, named_chain, user_step
from fedpub.steps.aggregate import aggregate
from fedpub.strategy import StrategyCore
from fedpub.types import ROUND_INPUTS, RoundContext

CTX = RoundContext(round=0, seed=0, population=10, sampling_rate=0.5, expected_cohort=5.0, cohort_size=5)


def _adder(amount: float, output: str | None = None) -> Step:
    def init(params):
        return {"calls": 0}

    def update(updates, state, *, ctx, offset=None):
        out = {k: v + amount + (offset or 0.0) for k, v in updates.items()}
        outputs = {output: amount} if output else {}
        return StepResult(out, {"calls": state["calls"] + 1}, {"added": amount}, outputs=outputs)

    return after_sum_step(update, init=init, optional_inputs=("offset",), outputs=(output,) if output else ())


def _reader(required: tuple[str, ...] = (), optional: tuple[str, ...] = (), writes: tuple[str, ...] = ()) -> Step:
    """A stateless step that records the inputs it was given as its metrics' keys and writes ``writes``."""

    def update(updates, state: EmptyState, *, ctx, **given):
        return StepResult(updates, state, dict.fromkeys(given, 1.0), outputs=dict.fromkeys(writes, 0.0))

    return after_sum_step(update, inputs=required, optional_inputs=optional, outputs=writes)


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


def test_a_stateless_step_has_an_empty_state():
    step = _reader()
    assert step.init({"w": torch.zeros(2)}) == {}


def test_a_step_gets_only_the_names_it_declares():
    step = named_chain(
        ("clip", _reader(writes=("clip_norm", "center"))),
        ("noise", _reader(required=("clip_norm",), optional=("public_mean", "noise_multiplier"))),
    )
    result = step.update({}, step.init({}), ctx=CTX, public_mean=None, public_updates=None)
    assert result.metrics == {"noise/clip_norm": 1.0, "noise/public_mean": 1.0}


def test_the_chain_declares_the_round_inputs_its_steps_read_and_every_output():
    step = named_chain(
        ("precondition", _reader(optional=("public_mean", "public_updates"), writes=("public_mean",))),
        ("recenter", _reader(required=("public_mean",), writes=("center",))),
    )
    assert (step.inputs, step.optional_inputs, step.outputs) == ((), ("public_mean", "public_updates"),
                                                                 ("public_mean", "center"))
    assert named_chain(("a", _reader(required=("public_updates",)))).inputs == ("public_updates",)


def test_a_step_requiring_a_name_nobody_provides_before_it_is_refused_with_the_order_to_fix():
    with pytest.raises(ValueError, match=r"step 'add_center' requires the input 'center', which neither the round "
                                         r"\(public_mean, public_updates\) nor an earlier step provides; step "
                                         r"'recenter' writes it later: put 'add_center' after it"):
        named_chain(("add_center", _reader(required=("center",))), ("recenter", _reader(writes=("center",))))
    with pytest.raises(ValueError, match=r"step 'noise' requires the input 'clip_nrom', which neither the round"):
        named_chain(("clip", _reader(writes=("clip_norm",))), ("noise", _reader(required=("clip_nrom",))))


def test_a_step_shadowing_a_name_already_provided_is_refused():
    with pytest.raises(ValueError, match="step 'schedule' writes 'clip_norm', which step 'clip' already provides"):
        named_chain(("clip", _reader(writes=("clip_norm",))), ("schedule", _reader(writes=("clip_norm",))))
    with pytest.raises(ValueError, match="step 'mix' writes 'public_mean', which the round already provides"):
        named_chain(("mix", _reader(writes=("public_mean",))))


def test_a_step_that_reads_a_name_may_replace_it_for_the_later_steps():
    step = named_chain(
        ("precondition", _reader(optional=("public_mean",), writes=("public_mean",))),
        ("mirror", _reader(optional=("public_mean",))),
    )
    result = step.update({}, step.init({}), ctx=CTX, public_mean={"w": torch.ones(1)})
    assert result.outputs == {"public_mean": 0.0}  # what mirror read: precondition's


def test_a_required_input_missing_at_run_time_and_an_undeclared_output_are_refused():
    def update(updates, state, *, ctx):
        return StepResult(updates, state, outputs={"clip_norm": 1.0} if ctx.round else {})

    sometimes = after_sum_step(update, outputs=("clip_norm",))
    step = named_chain(("clip", sometimes), ("noise", _reader(required=("clip_norm",))))
    with pytest.raises(ValueError, match=r"step 'noise' requires \['clip_norm'\], which no earlier step gave"):
        step.update({}, step.init({}), ctx=CTX)
    undeclared = named_chain(("clip", after_sum_step(update)))
    with pytest.raises(ValueError, match=r"step 'clip' gave the outputs \['clip_norm'\], which it does not declare"):
        undeclared.update({}, undeclared.init({}), ctx=RoundContext(**{**CTX.__dict__, "round": 1}))


def test_a_chain_takes_only_the_round_inputs():
    step = named_chain(("a", _reader()))
    with pytest.raises(ValueError, match=r"a chain's inputs are the round's \(public_mean, public_updates\), got "
                                         r"\['center'\]"):
        step.update({}, step.init({}), ctx=CTX, center={})


def test_the_strategy_core_gives_the_steps_every_round_input():
    def prepare(like, state, *, ctx, **given):
        return Prepared(state, metrics=dict.fromkeys(given, 1.0))

    probe = named_chain(("probe", user_step(prepare, optional_inputs=tuple(ROUND_INPUTS))), ("aggregate", aggregate()))
    core = StrategyCore("probe", probe, PoissonSampling(0.5), population=10, seed=0)
    params = {"w": torch.zeros(2)}
    outcome = core.aggregate(params, [{"w": torch.ones(2)}], core.init(params), 0, public_updates=[params])
    assert {k.removeprefix("probe/") for k in outcome.metrics if k.startswith("probe/")} == set(ROUND_INPUTS)


def test_a_name_declared_required_and_optional_is_refused():
    with pytest.raises(ValueError, match=r"\['center'\] declared both as required and as optional"):
        _reader(required=("center",), optional=("center",))


def test_the_chain_declares_its_steps_releases_in_order_feeding_declared_outputs_forward():
    """A schedule's declared noise multiplier reaches the noise step's declaration, as its output reaches
    the noise step's update; steps that declare nothing are skipped."""
    g = dp_accounting.GaussianDpEvent

    def schedule(round_index):
        return Releases(outputs={"noise_multiplier": 0.5} if round_index == 0 else {})

    def noise(round_index, *, noise_multiplier=None):
        return Releases((g(2.0 if noise_multiplier is None else noise_multiplier),))

    def count(round_index):
        return Releases((g(9.0),))

    plain = _adder(0.0)
    step = named_chain(
        ("schedule", after_sum_step(plain.update, init=plain.init, outputs=("noise_multiplier",), releases=schedule)),
        ("plain", plain),
        ("noise", after_sum_step(plain.update, init=plain.init, optional_inputs=("noise_multiplier",), releases=noise)),
        ("count", after_sum_step(plain.update, init=plain.init, releases=count)),
    )
    assert step.releases(0) == Releases((g(0.5), g(9.0)), {"noise_multiplier": 0.5})
    assert step.releases(1) == Releases((g(2.0), g(9.0)), {})
    assert named_chain(("plain", plain)).releases(3) == Releases()

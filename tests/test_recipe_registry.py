"""The recipe registry is the one declaration of a strategy's parts (issue 34): each optional section of
``StrategyConfig`` is a registered part and each part a section, the lists the config and the transports use come
from the declarations, a part's builders resolve, and a transport refuses a part it does not list."""

from __future__ import annotations

import dataclasses
import types
import typing

import pytest

from fedpub import recipe_registry
from fedpub.config import StrategyConfig
from fedpub.config_section import Section
from fedpub.data.spec import resolve
from fedpub.privacy.events import PoissonSampling
from fedpub.recipe_spec import SLOTS
from fedpub.strategies.build_context import BuildContext
from fedpub.strategies.compose import strategy_steps
from fedpub.strategies.flower import FedpubStrategy

BASE = {"clip_norm": 1.0, "noise_multiplier": 1.0}
MIRROR = next(p for p in recipe_registry.PARTS if p.section == "mirror")


def _recipe_sections() -> list[str]:
    """The fields of StrategyConfig that are an optional section (``X | None``, X a config section)."""
    def optional_section(annotation: object) -> bool:
        args = typing.get_args(annotation)
        return (typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args
                and any(isinstance(a, type) and issubclass(a, Section) for a in args))

    return [name for name, field in StrategyConfig.model_fields.items() if optional_section(field.annotation)]


def test_every_recipe_section_is_a_registered_part_and_every_part_a_section_in_the_same_order():
    sections = _recipe_sections()
    registered = [p.section for p in recipe_registry.PARTS]
    for section in sections:
        assert section in registered, f"strategy.{section} is a recipe section but not a part in recipe_registry.py"
    for section in registered:
        assert section in sections, f"part {section!r} in recipe_registry.py is no optional StrategyConfig section"
    assert registered == sections, "PARTS follows StrategyConfig's field order (the recipe names follow it)"


def test_every_builder_resolves_to_a_callable_and_fills_a_slot():
    refs = [*recipe_registry.PRIVATE_MEAN.items(), *(s for p in recipe_registry.PARTS for s in p.steps.items())]
    assert set(recipe_registry.PRIVATE_MEAN) <= set(SLOTS)
    for slot, ref in refs:
        assert slot in SLOTS and callable(resolve(ref)), ref
    for part in recipe_registry.PARTS:  # a part that sends payloads builds them, one that builds them names them
        assert (part.payload_builder is None) == (not part.payloads), part.section
        assert part.payload_builder is None or callable(resolve(part.payload_builder)), part.section
        assert part.noise_dimensions is None or callable(resolve(part.noise_dimensions)), part.section


def test_the_config_lists_come_from_the_declarations():
    assert typing.get_args(StrategyConfig.model_fields["name"].annotation) == recipe_registry.RECIPE_NAMES
    for name in recipe_registry.RECIPE_NAMES:
        config = StrategyConfig(name=name, **BASE)
        on = {p.section for p in recipe_registry.active(config)}
        assert set(recipe_registry.switched_on(name)) | set(recipe_registry.on_by_default(name)) == on, name
    token = StrategyConfig(name="adadps", precondition={"source": "token_frequency"}, **BASE)
    assert recipe_registry.public_cohort(token) == [] and token.public_clients_per_round == 0
    assert StrategyConfig(name="adadps", **BASE).public_clients_per_round == 10
    with pytest.raises(ValueError, match="public_clients_per_round is 0, but recenter/mirror train public users"):
        StrategyConfig(recenter={}, mirror={}, public_clients_per_round=0, **BASE)
    for unused in ({"name": "pda_dpmd", "mirror": {"public_term": False}}, {"name": "dp_fedavg"},
                   {"name": "adadps", "precondition": {"source": "token_frequency"}}):
        with pytest.raises(ValueError, match=r"public_clients_per_round is 3, but no section of recipe `\w+` uses "
                                             r"public users each round.*mirror \(unless public_term: false\)"):
            StrategyConfig(public_clients_per_round=3, **unused, **BASE)
    steering = [p.section for p in recipe_registry.PARTS if p.steers]
    assert steering == ["adaptive_clip", "public_schedule", "budget_schedule"]
    with pytest.raises(ValueError, match="tree_aggregation noises a whole tree with one C and one z: remove "
                                         "budget_schedule"):
        StrategyConfig(name="dp_ftrl", budget_schedule={"boosted_rounds": 1, "boosted_noise_ratio": 0.5}, **BASE)
    assert StrategyConfig(name="dp_ftrl", **BASE).sampling.kind == "epoch_blocks"


def test_a_transport_refuses_a_part_it_does_not_list_naming_both(monkeypatch):
    averaged = StrategyConfig(model_average={}, **BASE)
    recipe_registry.check_transport(averaged, "in_process")
    recipe_registry.check_transport(averaged, "flower_secagg")
    assert recipe_registry.Part("new_part", steps={"clip": "a.b:c"}).transports == (
        "in_process", "distributed", "flower", "flower_strategy")  # the secure sum is opted into, not given
    small = {**BASE, "sampling": {"clients_per_round": 2}}
    FedpubStrategy.from_config({**small, "model_average": {}}, population=4, rounds=2, seed=0)  # the drop-in runs it
    local_only = dataclasses.replace(MIRROR, transports=("in_process",))
    monkeypatch.setattr(recipe_registry, "PARTS", tuple(local_only if p.section == "mirror" else p
                                                        for p in recipe_registry.PARTS))
    with pytest.raises(ValueError, match=r"does not run strategy.mirror \(transport `flower_strategy`"):
        FedpubStrategy.from_config({**small, "name": "pda_dpmd", "warm_start": None}, population=4, rounds=2, seed=0,
                                   public_nodes=True)
    with pytest.raises(ValueError, match="unknown transport 'grpc'"):
        recipe_registry.unsupported(averaged, "grpc")


def test_a_new_part_is_chained_by_its_slot_and_two_parts_in_one_slot_are_refused(monkeypatch):
    config = StrategyConfig(name="dope", mirror={}, **BASE)
    ctx = BuildContext(config, PoissonSampling(0.1), 100, 1.0, 0, 5)
    names = [name for name, _ in strategy_steps(ctx)]
    assert names == ["recenter", "clip", "aggregate", "noise", "add_center", "mirror", "server_opt"]
    clashing = dataclasses.replace(MIRROR, steps={"recenter": "fedpub.strategies.dope:recenter_steps"})
    monkeypatch.setattr(recipe_registry, "PARTS", tuple(clashing if p.section == "mirror" else p
                                                        for p in recipe_registry.PARTS))
    with pytest.raises(ValueError, match="strategy.recenter and strategy.mirror both fill the chain's `recenter` step"):
        strategy_steps(ctx)


def test_a_declaration_that_names_an_unknown_slot_or_transport_is_refused():
    bad = dataclasses.replace(MIRROR, transports=("in_process", "carrier_pigeon"))
    with pytest.raises(recipe_registry.RegistryError, match="part 'mirror' names \\['carrier_pigeon'\\]"):
        recipe_registry._check((*recipe_registry.PARTS[:3], bad))


def test_a_part_declared_in_the_public_geometry_is_refused_beside_client_side_public_adadps(monkeypatch):
    """The rule is the registry's, not a list in the config: a part that declares ``public_geometry`` (here PPSGD's
    schedule, declared so for the test) is refused beside AdaDPS's client-side preconditioner of public statistics,
    naming it; undeclared, the same config is taken (issue 46, item 6)."""
    from fedpub.config import ConfigError, parse_config

    strategy = {"name": "ppsgd", "noise_multiplier": 1.0, "public_clients_per_round": 2,
                "precondition": {"placement": "client"}}
    raw = {"strategy": strategy, "privacy": {"budget_epsilon": 10.0}, "data": {"public": {"fraction": 0.1}}}
    assert parse_config(raw).strategy.public_schedule is not None
    declared = tuple(dataclasses.replace(p, public_geometry=True) if p.section == "public_schedule" else p
                     for p in recipe_registry.PARTS)
    monkeypatch.setattr(recipe_registry, "PARTS", declared)
    with pytest.raises(ConfigError, match="which public_schedule combines with them: use placement `server`"):
        parse_config(raw)
    assert recipe_registry.in_public_geometry(parse_config({**raw, "strategy": {
        **strategy, "precondition": {"placement": "server"}}}).strategy) == ["public_schedule"]

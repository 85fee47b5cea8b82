import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpub.config import ConfigError, dump_config, load_config, parse_config
from fedpub.data import registry


def test_defaults_and_round_trip_through_yaml():
    cfg = parse_config({"strategy": {"noise_multiplier": 0, "clip_norm": math.inf}})
    again = parse_config(yaml.safe_load(dump_config(cfg)))
    assert again == cfg and math.isinf(again.strategy.clip_norm)


@pytest.mark.parametrize("dataset", registry.DATASETS, ids=lambda d: d.name)
def test_the_resolved_config_holds_only_its_own_datasets_sections(dataset):
    model = {"name": dataset.models[0].name} if dataset.models else {"factory": "fedpub.models.emnist:Mlp"}
    cfg = parse_config({"data": {"source": dataset.sources[0].name}, "task": dataset.tasks[0].name, "model": model})
    data = yaml.safe_load(dump_config(cfg))["data"]
    assert {name for name in registry.data_fields() if name in data} == set(dataset.config_fields)
    assert parse_config(yaml.safe_load(dump_config(cfg))) == cfg


@pytest.mark.parametrize(
    "raw, expected",
    [
        ({"rounds": "many"}, "field `rounds`"),
        ({"rounds": 0}, "field `rounds`: Input should be greater than or equal to 1"),
        ({"strategy": {"noise_multiplier": 1, "clip": 1}}, "unknown key `strategy.clip`; allowed keys here: name, clip_norm"),
        ({"colour": "red"}, "unknown key `colour`"),
        ({"strategy": {"noise_multiplier": 1, "sampling": {"kind": "uniform", "clients_per_round": 2}}}, "'poisson', 'cyclic_poisson', 'fixed', 'cyclic_fixed' or 'epoch_blocks'"),
        ({"strategy": {"noise_multiplier": 1, "target_epsilon": 2}}, "exactly one of noise_multiplier or target_epsilon"),
        ({"strategy": {"noise_multiplier": 1, "sampling": {"clients_per_round": 2, "sampling_rate": 0.1}}}, "exactly one of clients_per_round"),
        ({"model": {"name": "resnet"}}, "emnist_cnn_dropout, emnist_mlp, emnist_small_cnn"),
        ({"privacy": {"accountant": "gdp"}}, "'pld' or 'rdp'"),
        ({"data": {"source": "mnist"}}, "'synthetic_emnist', 'emnist_h5', 'emnist_sqlite', 'stackoverflow'"),
    ],
)
def test_bad_values_name_the_field_and_what_is_allowed(raw, expected):
    with pytest.raises(ConfigError, match=None) as info:
        parse_config(raw, "exp.yaml")
    assert expected in str(info.value) and "exp.yaml" in str(info.value)


def test_unreadable_and_invalid_yaml_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rounds: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(listy)


yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["rounds", "seed", "strategy", "data", "client", "privacy", "x"]), yaml_values, max_size=4))
def test_random_configs_either_load_or_raise_a_config_error(raw):
    try:
        parse_config(raw)
    except ConfigError as error:
        assert "invalid configuration" in str(error)


def test_the_schema_takes_its_allowed_values_from_the_registry():
    with pytest.raises(ConfigError) as info:
        parse_config({"data": {"source": "mnist"}, "task": "segmentation", "model": {"name": "resnet"}})
    message = str(info.value)
    assert all(f"'{name}'" in message for name in registry.SOURCE_NAMES + registry.TASK_NAMES)
    assert f"allowed: {', '.join(sorted(registry.MODEL_NAMES))}" in message
    assert set(registry.data_fields()) < set(type(parse_config({}).data).model_fields)


def test_the_bundled_quickstart_config_is_valid():
    from fedpub.simulations.configs import quickstart_config_path

    cfg = load_config(quickstart_config_path())
    assert cfg.strategy.target_epsilon == 4.0 and cfg.data.source == "synthetic_emnist"


def test_every_bundled_experiment_config_is_valid():
    from fedpub.simulations.configs import quickstart_config_path

    configs = sorted(quickstart_config_path().parent.glob("*.yaml"))
    assert len(configs) >= 4
    tasks = {load_config(path).task for path in configs}
    assert tasks == {"classification", "so_tag", "so_tag_single", "so_nwp"}


def test_private_users_as_nodes_needs_a_population_and_real_files():
    nodes = {"private_users": "nodes", "expected_private_nodes": 3}
    with pytest.raises(ConfigError, match="private_users `nodes` needs expected_private_nodes"):
        parse_config({"flower": {"private_users": "nodes"}})
    with pytest.raises(ConfigError, match="min_private_nodes cannot exceed expected_private_nodes"):
        parse_config({"data": {"source": "emnist_h5"}, "flower": {**nodes, "min_private_nodes": 4}})
    with pytest.raises(ConfigError, match="data.source cannot be synthetic"):
        parse_config({"flower": nodes})
    assert parse_config({"data": {"source": "emnist_h5"}, "flower": nodes}).flower.expected_private_nodes == 3


def test_pda_dpmd_pretrains_by_default_and_null_turns_it_off_through_a_round_trip():
    strategy = {"name": "pda_dpmd", "noise_multiplier": 1.0}
    warm = parse_config({"strategy": strategy, "data": {"public": {"fraction": 0.1}}})
    assert warm.strategy.warm_start is not None and warm.strategy.mirror is not None
    cold = parse_config({"strategy": {**strategy, "warm_start": None}, "data": {"public": {"fraction": 0.1}}})
    assert cold.strategy.warm_start is None and cold.strategy.mirror is not None
    for cfg in (warm, cold):
        assert parse_config(yaml.safe_load(dump_config(cfg))) == cfg
    # a recipe's defining section cannot be turned off by null: it is what the recipe is
    assert parse_config({"strategy": {**strategy, "mirror": None, "warm_start": None},
                         "data": {"public": {"fraction": 0.1}}}).strategy.mirror is not None


def test_pda_dpmd_without_the_public_term_trains_no_public_users_and_keeps_its_warm_start():
    """mirror.public_term false is the control α-damped DP-FedAvg: no public cohort (so no public users are needed
    unless the warm start is on), the warm start as the recipe's; a value that is not a boolean is refused."""
    strategy = {"name": "pda_dpmd", "noise_multiplier": 1.0, "mirror": {"public_term": False}}
    damped = parse_config({"strategy": strategy, "data": {"public": {"fraction": 0.1}}})
    assert damped.strategy.public_clients_per_round == 0 and damped.strategy.warm_start is not None
    assert parse_config(yaml.safe_load(dump_config(damped))) == damped
    assert parse_config({"strategy": {**strategy, "warm_start": None}}).strategy.mirror.public_term is False
    assert parse_config({"strategy": {**strategy, "mirror": {}}, "data": {"public": {"fraction": 0.1}}}
                        ).strategy.public_clients_per_round == 10
    with pytest.raises(ConfigError, match="strategy.mirror.public_term"):
        parse_config({"strategy": {**strategy, "mirror": {"public_term": "maybe"}}})
    # with no public term the mirror mixes in no public update, so AdaDPS's client-side public A composes with it
    adadps = {**strategy, "precondition": {"source": "public", "placement": "client"}}
    assert parse_config({"strategy": adadps, "data": {"public": {"fraction": 0.1}}}).strategy.precondition
    with pytest.raises(ConfigError, match="which mirror combines with them: use placement `server`"):
        parse_config({"strategy": {**adadps, "mirror": {}}, "data": {"public": {"fraction": 0.1}}})

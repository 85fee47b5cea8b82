"""The vectorised cohort trainer gives the per-client loop's updates and metrics, and falls back where it must."""

import pytest
import torch

from fedpub.clients import cohort_training
from fedpub.clients.cohort_training import CohortTrainer, train_cohort_vectorised, vectorisation_blocker
from fedpub.clients.local_training import LocalTrainingConfig, train_client
from fedpub.column_update import ColumnUpdate, dense
from fedpub.data.base import ClientData
from fedpub.models import build_model
from fedpub.models.seeded import model_params
from fedpub.tasks import CLASSIFICATION, get_task
from fedpub.tasks.stackoverflow import TAG_PREDICTION


def _emnist_cohort(sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [ClientData(torch.rand(n, 1, 28, 28, generator=g), torch.randint(10, (n,), generator=g)) for n in sizes]


def _generators(count, offset=0):
    return [torch.Generator().manual_seed(offset + i) for i in range(count)]


def payloads(preconditioner):
    """AdaDPS's client payload, or none."""
    return {} if preconditioner is None else {"preconditioner": preconditioner}


def _assert_same_as_loop(model, datas, config, task, preconditioner=None):
    params = model_params(model)
    loop = [
        train_client(model, params, d, config, g, task, payloads=payloads(preconditioner))
        for d, g in zip(datas, _generators(len(datas)))
    ]
    vectorised = train_cohort_vectorised(
        model, params, datas, config, _generators(len(datas)), task, payloads=payloads(preconditioner)
    )
    assert len(vectorised) == len(loop)
    for a, b in zip(loop, vectorised):
        assert a.num_examples == b.num_examples
        for name in a.update:
            torch.testing.assert_close(b.update[name], a.update[name], rtol=1e-4, atol=1e-6)
        assert b.metrics.keys() == a.metrics.keys()
        for key in a.metrics:
            assert b.metrics[key] == pytest.approx(a.metrics[key], rel=1e-5, abs=1e-6)
    assert any(float(v.abs().max()) > 1e-4 for v in vectorised[0].update.values()), "nothing was trained"


@pytest.mark.parametrize("model_name", ["emnist_small_cnn", "emnist_mlp"])
def test_vectorised_updates_equal_the_per_client_loop_for_ragged_users(model_name):
    # sizes give 1 to 4 steps per epoch and short last batches: several step groups, masked padding
    datas = _emnist_cohort([3, 16, 17, 40, 23, 9, 64, 31])
    config = LocalTrainingConfig(epochs=2, batch_size=16, lr=0.1)
    _assert_same_as_loop(build_model(model_name, 10), datas, config, CLASSIFICATION)


def test_momentum_prox_term_subsampling_and_a_preconditioner_match_the_loop():
    model = build_model("emnist_mlp", 10)
    datas = _emnist_cohort([12, 30, 45, 7])
    config = LocalTrainingConfig(epochs=2, batch_size=8, lr=0.05, momentum=0.9, prox_weight=0.3, max_examples=20)
    g = torch.Generator().manual_seed(5)
    preconditioner = {k: 0.5 + torch.rand(v.shape, generator=g) for k, v in model_params(model).items()}
    _assert_same_as_loop(model, datas, config, CLASSIFICATION, preconditioner)


def test_multi_label_tag_prediction_matches_the_loop():
    model = build_model("so_tag_logreg", 20)
    g = torch.Generator().manual_seed(1)
    datas = [
        ClientData(torch.rand(n, 10_000, generator=g), (torch.rand(n, 20, generator=g) < 0.1).float())
        for n in (5, 11, 20)
    ]
    _assert_same_as_loop(model, datas, LocalTrainingConfig(epochs=1, batch_size=4, lr=0.5), TAG_PREDICTION)


def _bag_of_words_cohort(sizes, words, seed=0):
    """Users whose posts use a few of the 10,000 words each (different words per user), and 20 tags."""
    g = torch.Generator().manual_seed(seed)
    datas = []
    for n, used in zip(sizes, words):
        x = torch.zeros(n, 10_000)
        columns = torch.randperm(10_000, generator=g)[:used]
        x[:, columns] = (torch.rand(n, used, generator=g) < 0.3).float()
        datas.append(ClientData(x, (torch.rand(n, 20, generator=g) < 0.1).float()))
    return datas


@pytest.mark.parametrize("sparse", [False, True])
def test_bag_of_words_users_trained_cut_and_stacked_match_the_loop(sparse, monkeypatch):
    """Each user's input weight cut to its own columns, padded to the group's widest and stacked: the loop's
    updates (the cut layer's as the same ColumnUpdate, or dense), with momentum, the prox term and a preconditioner,
    and a group stacks only the cut weights."""
    model = build_model("so_tag_logreg", 20)
    params = model_params(model)
    datas = _bag_of_words_cohort([8, 8, 7, 20, 5], [40, 90, 15, 60, 30])  # two step groups of different widths
    config = LocalTrainingConfig(epochs=2, batch_size=4, lr=0.5, momentum=0.5, prox_weight=0.1)
    g = torch.Generator().manual_seed(2)
    preconditioner = {k: 0.5 + torch.rand(v.shape, generator=g) for k, v in params.items()}
    monkeypatch.setattr(cohort_training, "STACKED_ELEMENTS_BUDGET", 3 * (90 * 20 + 20))  # fits cut users only
    loop = [train_client(model, params, d, config, gen, TAG_PREDICTION, payloads=payloads(preconditioner),
                         sparse_update=sparse) for d, gen in zip(datas, _generators(5))]
    groups = cohort_training._groups(
        [cohort_training.plan_local_training(d, config, gen) for d, gen in zip(datas, _generators(5))],
        [cohort_training.input_columns(model, d.x) for d in datas], cohort_training._elements(model))
    assert sorted(len(group) for group in groups) == [1, 1, 3]  # 3 users fit the budget only because they are cut
    vectorised = train_cohort_vectorised(model, params, datas, config, _generators(5), TAG_PREDICTION,
                                         payloads=payloads(preconditioner), sparse_updates=sparse)
    for a, b in zip(loop, vectorised):
        assert a.update.keys() == b.update.keys()
        for name in a.update:
            assert type(a.update[name]) is type(b.update[name])
            if isinstance(a.update[name], ColumnUpdate):
                assert torch.equal(a.update[name].columns, b.update[name].columns)
            torch.testing.assert_close(dense(b.update[name]), dense(a.update[name]), rtol=1e-4, atol=1e-6)
        assert b.metrics == pytest.approx(a.metrics, rel=1e-5, abs=1e-6)
    assert float(dense(vectorised[0].update["0.weight"]).abs().max()) > 1e-4, "nothing was trained"


def test_groups_respect_the_stacked_parameter_budget(monkeypatch):
    model = build_model("emnist_mlp", 10)
    size = sum(p.numel() for p in model.parameters())
    monkeypatch.setattr(cohort_training, "STACKED_ELEMENTS_BUDGET", 2 * size)  # two users per group
    datas = _emnist_cohort([16] * 5 + [32] * 2)
    plans = [cohort_training.plan_local_training(d, LocalTrainingConfig(), g) for d, g in zip(datas, _generators(7))]
    assert cohort_training._groups(plans, [None] * 7, lambda cut: size) == [[0, 1], [2, 3], [4], [5, 6]]
    _assert_same_as_loop(model, datas, LocalTrainingConfig(batch_size=16, lr=0.1), CLASSIFICATION)


def test_users_without_examples_return_a_zero_update():
    model = build_model("emnist_mlp", 10)
    datas = [ClientData(torch.zeros(0, 1, 28, 28), torch.zeros(0, dtype=torch.long))] + _emnist_cohort([5])
    results = train_cohort_vectorised(model, model_params(model), datas, LocalTrainingConfig(), _generators(2), CLASSIFICATION)
    assert results[0].num_examples == 0 and all(float(v.abs().max()) == 0 for v in results[0].update.values())
    assert results[1].num_examples == 5


def test_dropout_recurrent_models_and_token_averaged_losses_fall_back_to_the_loop_with_a_reason():
    assert vectorisation_blocker(build_model("emnist_small_cnn", 10), CLASSIFICATION) is None
    assert "Dropout" in vectorisation_blocker(build_model("emnist_cnn_dropout", 10), CLASSIFICATION)
    assert "so_nwp" in vectorisation_blocker(build_model("emnist_small_cnn", 10), get_task("so_nwp"))
    lstm = torch.nn.Sequential(torch.nn.LSTM(4, 4))
    assert "LSTM" in vectorisation_blocker(lstm, CLASSIFICATION)
    with pytest.raises(ValueError, match="cannot vectorise"):
        train_cohort_vectorised(build_model("emnist_cnn_dropout", 10), {}, [], LocalTrainingConfig(), [], CLASSIFICATION)


def test_the_trainer_says_which_path_it_takes_and_gives_the_same_results_either_way():
    model = build_model("emnist_small_cnn", 10)
    config = LocalTrainingConfig(batch_size=8, lr=0.1)
    fast = CohortTrainer(model, config, CLASSIFICATION, path="vectorised")
    slow = CohortTrainer(model, config, CLASSIFICATION, path="loop")
    assert fast.describe() == "cohort training: vectorised"
    assert slow.describe() == "cohort training: per-client loop (client.path is loop)"
    dropout = CohortTrainer(build_model("emnist_cnn_dropout", 10), config, CLASSIFICATION)
    assert dropout.mode == "per-client loop" and "Dropout" in dropout.describe()
    with pytest.raises(ValueError, match="client.path is vectorised, but this model cannot be: layer .*Dropout"):
        CohortTrainer(build_model("emnist_cnn_dropout", 10), config, CLASSIFICATION, path="vectorised")
    datas, params = _emnist_cohort([10, 20]), model_params(model)
    a = fast.train(params, datas, _generators(2))
    b = slow.train(params, datas, _generators(2))
    for x, y in zip(a, b):
        for name in x.update:
            torch.testing.assert_close(x.update[name], y.update[name], rtol=1e-4, atol=1e-6)
    assert fast.train(params, [], []) == []


def test_step_count_groups_below_min_users_are_trained_one_by_one(monkeypatch):
    sizes = []
    vectorised_group = cohort_training._train_group

    def recording(model, start, plans, *args, **kwargs):
        sizes.append(len(plans))
        return vectorised_group(model, start, plans, *args, **kwargs)

    monkeypatch.setattr(cohort_training, "_train_group", recording)
    model = build_model("emnist_mlp", 10)
    config = LocalTrainingConfig(batch_size=16, lr=0.1)
    datas = _emnist_cohort([10, 12, 16, 30])  # three users with one local step, one with two
    trainer = CohortTrainer(model, config, CLASSIFICATION, path="vectorised", min_users=3)
    assert trainer.describe() == (
        "cohort training: vectorised (users with the same number of local steps, 3 or more; fewer: one by one)"
    )
    params = model_params(model)
    results = trainer.train(params, datas, _generators(4))
    assert sizes == [3]  # the two-step user alone was not vectorised
    loop = [train_client(model, params, d, config, g) for d, g in zip(datas, _generators(4))]
    assert all(torch.equal(results[3].update[k], loop[3].update[k]) for k in params)  # the loop's exact update
    for a, b in zip(results[:3], loop[:3]):
        for name in a.update:
            torch.testing.assert_close(a.update[name], b.update[name], rtol=1e-4, atol=1e-6)

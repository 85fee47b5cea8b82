"""Local training cut to the input columns a user's examples use: the same steps as on the whole weight."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedpub.clients.cohort_training import CohortTrainer
from fedpub.clients.input_columns import input_columns
from fedpub.clients.local_training import LocalTrainingConfig, train_client
from fedpub.column_update import ColumnUpdate
from fedpub.data.base import ClientData
from fedpub.models import build_model
from fedpub.models.seeded import model_params
from fedpub.tasks.stackoverflow import TAG_PREDICTION

FEATURES, TAGS = 400, 12


def _bag_of_words(n: int, seed: int, words: int = 60) -> ClientData:
    """``n`` posts using words among the first ``words`` of the vocabulary, as normalised counts; multi-hot tags."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(n, FEATURES)
    for i in range(n):
        x[i, torch.randint(words, (6,), generator=g)] += 1.0
    return ClientData(x / x.sum(dim=1, keepdim=True), (torch.rand(n, TAGS, generator=g) < 0.2).float())


def _model_and_uncut_twin(hidden: int = 0) -> tuple[nn.Sequential, nn.Sequential]:
    """The tag logistic regression (with ``hidden``: a ReLU layer of that width after the input layer), and the
    same layers behind an identity first layer (never cut)."""
    layers = [nn.Linear(FEATURES, TAGS)] if not hidden else [nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, TAGS)]
    model = nn.Sequential(*layers)  # so_tag_logreg, on a smaller vocabulary
    twin = nn.Sequential(nn.Identity(), *(type(layer)(*_sizes(layer)) for layer in layers))
    twin.load_state_dict(_twin_params(model.state_dict()))
    return model, twin


def _sizes(layer: nn.Module) -> tuple[int, ...]:
    return (layer.in_features, layer.out_features) if isinstance(layer, nn.Linear) else ()


def _twin_params(params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The names of the twin's parameters: every layer one place later."""
    return {f"{int(name.split('.')[0]) + 1}.{name.split('.', 1)[1]}": value for name, value in params.items()}


def test_the_cut_is_the_columns_the_examples_use_and_only_for_a_sparse_linear_input():
    data = _bag_of_words(8, seed=0, words=30)
    cut = input_columns(nn.Sequential(nn.Linear(FEATURES, TAGS)), data.x)
    assert cut is not None and cut.weight == "0.weight"
    assert torch.equal(cut.columns, data.x.abs().sum(dim=0).nonzero().squeeze(1))
    assert len(cut.columns) <= 30
    dense = ClientData(torch.rand(4, FEATURES) + 0.1, data.y[:4])
    assert input_columns(nn.Sequential(nn.Linear(FEATURES, TAGS)), dense.x) is None  # uses every column
    assert input_columns(nn.Sequential(nn.Identity(), nn.Linear(FEATURES, TAGS)), data.x) is None
    assert input_columns(build_model("emnist_mlp", 10), torch.zeros(3, 1, 28, 28)) is None

    class Scaled(nn.Sequential):  # its own forward: the input layer may not read the features directly
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(2 * x)

    assert input_columns(Scaled(nn.Linear(FEATURES, TAGS)), data.x) is None


@pytest.mark.parametrize(
    "config, preconditioned, hidden",
    [
        (LocalTrainingConfig(epochs=2, batch_size=4, lr=0.5), False, 0),
        (LocalTrainingConfig(epochs=2, batch_size=3, lr=0.2, momentum=0.9, prox_weight=0.3, max_examples=9), True, 0),
        (LocalTrainingConfig(epochs=2, batch_size=3, lr=0.2, momentum=0.9, prox_weight=0.3), True, 16),
    ],
)
def test_cut_training_gives_the_update_of_training_the_whole_weight(config, preconditioned, hidden):
    model, twin = _model_and_uncut_twin(hidden)
    params = model_params(model)
    g = torch.Generator().manual_seed(3)
    preconditioner = {k: 0.5 + torch.rand(v.shape, generator=g) for k, v in params.items()} if preconditioned else None
    data = _bag_of_words(11, seed=1)
    whole = train_client(
        twin, _twin_params(params), data, config, torch.Generator().manual_seed(7), TAG_PREDICTION,
        payloads={} if preconditioner is None else {"preconditioner": _twin_params(preconditioner)},
    )
    for sparse_update in (False, True):
        cut = train_client(
            model, params, data, config, torch.Generator().manual_seed(7), TAG_PREDICTION,
            payloads={} if preconditioner is None else {"preconditioner": preconditioner}, sparse_update=sparse_update,
        )
        weight = cut.update["0.weight"]
        assert isinstance(weight, ColumnUpdate) == sparse_update
        torch.testing.assert_close(weight.to_dense() if sparse_update else weight, whole.update["1.weight"])
        for name in params.keys() - {"0.weight"}:  # the input bias, and any later layer's tensors
            torch.testing.assert_close(cut.update[name], whole.update[next(iter(_twin_params({name: 0})))])
        assert cut.metrics == pytest.approx(whole.metrics) and cut.num_examples == whole.num_examples
    unused = data.x.abs().sum(dim=0) == 0
    assert float(whole.update["1.weight"][:, unused].abs().max()) == 0.0  # what makes the cut exact
    assert float(whole.update["1.weight"].abs().max()) > 1e-4, "nothing was trained"
    assert all(torch.equal(p, q) for p, q in zip(model[0].parameters(), (params["0.weight"], params["0.bias"]))), (
        "the resident model's input layer moved"
    )


def test_the_cohort_trainer_trains_such_a_model_user_by_user_and_cuts_the_sparse_users():
    model, twin = _model_and_uncut_twin()
    params, config = model_params(model), LocalTrainingConfig(batch_size=4, lr=0.5)
    g = torch.Generator().manual_seed(0)
    dense_user = ClientData(torch.rand(6, FEATURES, generator=g) + 0.01, (torch.rand(6, TAGS, generator=g) < 0.2).float())
    datas = [_bag_of_words(5, seed=1), dense_user, _bag_of_words(13, seed=2)]
    assert "input-column cut" in CohortTrainer(model, config, TAG_PREDICTION).describe()  # a candidate of auto
    trainer = CohortTrainer(model, config, TAG_PREDICTION, path="loop")
    results = trainer.train(params, datas, [torch.Generator().manual_seed(i) for i in range(3)], sparse_updates=True)
    assert [isinstance(r.update["0.weight"], ColumnUpdate) for r in results] == [True, False, True]
    for i, (data, result) in enumerate(zip(datas, results)):
        whole = train_client(twin, _twin_params(params), data, config, torch.Generator().manual_seed(i), TAG_PREDICTION)
        weight = result.update["0.weight"]
        dense = weight.to_dense() if isinstance(weight, ColumnUpdate) else weight
        torch.testing.assert_close(dense, whole.update["1.weight"])
        torch.testing.assert_close(result.update["0.bias"], whole.update["1.bias"])

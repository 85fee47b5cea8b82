import torch

from fedpub.clients.local_training import LocalTrainingConfig, plan_local_training, train_client
from fedpub.data.base import ClientData
from fedpub.models import build_model
from fedpub.models.seeded import model_params


def _data(n=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return ClientData(torch.rand(n, 1, 28, 28, generator=g), torch.randint(10, (n,), generator=g))


def test_the_update_is_trained_minus_global_and_the_global_params_are_untouched():
    model = build_model("emnist_small_cnn", 10)
    params = model_params(model)
    before = {k: v.clone() for k, v in params.items()}
    result = train_client(model, params, _data(), LocalTrainingConfig(epochs=2, batch_size=4, lr=0.1), torch.Generator().manual_seed(1))
    trained = model_params(model)
    for k in params:
        assert torch.equal(params[k], before[k])
        torch.testing.assert_close(result.update[k], trained[k] - params[k])
    assert result.num_examples == 10 and 0 <= result.metrics["train_accuracy"] <= 1
    assert any(float(v.abs().sum()) > 0 for v in result.update.values())


def test_the_same_generator_seed_gives_the_same_update_even_with_dropout():
    model = build_model("emnist_cnn_dropout", 10)
    params = model_params(model)
    cfg = LocalTrainingConfig(epochs=1, batch_size=5, lr=0.05)
    a = train_client(model, params, _data(), cfg, torch.Generator().manual_seed(3)).update
    b = train_client(model, params, _data(), cfg, torch.Generator().manual_seed(3)).update
    c = train_client(model, params, _data(), cfg, torch.Generator().manual_seed(4)).update
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_the_resident_model_is_reset_between_clients():
    model = build_model("emnist_small_cnn", 10)
    params = model_params(model)
    cfg = LocalTrainingConfig(epochs=1, batch_size=4, lr=0.1)
    first = train_client(model, params, _data(seed=1), cfg, torch.Generator().manual_seed(0)).update
    train_client(model, params, _data(seed=2), cfg, torch.Generator().manual_seed(0))
    again = train_client(model, params, _data(seed=1), cfg, torch.Generator().manual_seed(0)).update
    assert all(torch.equal(first[k], again[k]) for k in first)


def test_max_examples_caps_the_local_data():
    model = build_model("emnist_small_cnn", 10)
    result = train_client(
        model, model_params(model), _data(n=30), LocalTrainingConfig(max_examples=8), torch.Generator().manual_seed(0)
    )
    assert result.num_examples == 8


def test_local_sgd_takes_torch_optim_sgds_steps_with_momentum_prox_term_and_preconditioner():
    """train_client steps without torch.optim; a plain torch.optim.SGD loop over the same plan gives its update."""
    model = build_model("emnist_mlp", 10)
    params = model_params(model)
    config = LocalTrainingConfig(epochs=2, batch_size=4, lr=0.1, momentum=0.9, prox_weight=0.2)
    g = torch.Generator().manual_seed(5)
    divisors = {k: 0.5 + torch.rand(v.shape, generator=g) for k, v in params.items()}
    data = _data(n=11)
    result = train_client(model, params, data, config, torch.Generator().manual_seed(2), payloads={"preconditioner": divisors})

    reference = build_model("emnist_mlp", 10)
    reference.load_state_dict(params)
    optimizer = torch.optim.SGD(reference.parameters(), lr=config.lr, momentum=config.momentum)
    plan = plan_local_training(data, config, torch.Generator().manual_seed(2))
    for batch in plan.batches:
        optimizer.zero_grad()
        prox = sum(((p - params[n]) ** 2).sum() for n, p in reference.named_parameters())
        (torch.nn.functional.cross_entropy(reference(plan.x[batch]), plan.y[batch]) + config.prox_weight * prox).backward()
        for name, p in reference.named_parameters():
            p.grad.div_(divisors[name])
        optimizer.step()
    assert len(plan.batches) == 6
    for name, p in reference.named_parameters():
        torch.testing.assert_close(result.update[name], p.detach() - params[name], rtol=1e-5, atol=1e-7)

"""StackOverflow models: TFF's shapes and parameter counts, deterministic Embedding/LSTM init from the generator,
and that they train on what the task views produce."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedpub.data import registry
from fedpub.models import build_model
from fedpub.models.stackoverflow import NextWordLstm, TagLogisticRegression

# Keras counts one LSTM bias (4 * 670); PyTorch's LSTM has two (b_ih and b_hh), so 2,680 more than TFF's 4,050,748.
NWP_PARAMS = 10_004 * 96 + 4 * 670 * (96 + 670 + 2) + (670 * 96 + 96) + (96 * 10_004 + 10_004)


def test_registered_with_tff_sizes() -> None:
    assert {"so_tag_logreg", "so_nwp_lstm"} <= set(registry.MODEL_NAMES)
    logreg = build_model("so_tag_logreg", 500)
    assert sum(p.numel() for p in logreg.parameters()) == 5_000_500
    weight = registry.model("so_tag_logreg").bag_of_words_weight
    assert dict(logreg.named_parameters())[weight].shape == (500, 10_000)  # (tags, vocabulary)
    logits = logreg(torch.rand(3, 10_000, generator=torch.Generator().manual_seed(0)))
    assert logits.shape == (3, 500) and torch.isfinite(logits).all()
    lstm = build_model("so_nwp_lstm", 10_004)
    assert sum(p.numel() for p in lstm.parameters()) == NWP_PARAMS == 4_050_748 + 2_680
    ids = torch.randint(0, 10_004, (2, 20), generator=torch.Generator().manual_seed(0))
    logits = lstm(ids)
    assert logits.shape == (2, 20, 10_004) and torch.isfinite(logits).all()


def test_init_is_deterministic_and_pytorch_default() -> None:
    state = torch.random.get_rng_state()
    a, b, c = (build_model("so_nwp_lstm", 50, generator=torch.Generator().manual_seed(s)) for s in (3, 3, 4))
    assert torch.equal(torch.random.get_rng_state(), state)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
        assert not torch.equal(pa, pc), name
    assert isinstance(a, NextWordLstm)
    assert not a.embedding.weight[0].any()  # the padding row is zero
    assert 0.8 < a.embedding.weight[1:].std().item() < 1.2  # N(0, 1)
    bound = 1 / 670**0.5
    for name, p in a.lstm.named_parameters():
        assert p.abs().max() <= bound and p.abs().max() > 0.9 * bound, name


def test_padding_does_not_change_the_real_steps() -> None:
    model = build_model("so_nwp_lstm", 30, generator=torch.Generator().manual_seed(1))
    short = torch.tensor([[27, 3, 5, 28]])
    padded = torch.tensor([[27, 3, 5, 28, 0, 0, 0]])
    with torch.no_grad():
        torch.testing.assert_close(model(padded)[:, :4], model(short))


def test_models_train_on_task_shaped_batches() -> None:
    gen = torch.Generator().manual_seed(0)
    logreg = TagLogisticRegression(num_classes=4, vocab_size=19)
    for module in logreg.modules():
        if isinstance(module, nn.Linear):
            nn.init.zeros_(module.weight)
            nn.init.zeros_(module.bias)
    x = torch.rand(8, 19, generator=gen)
    x /= x.sum(1, keepdim=True)
    y = (torch.rand(8, 4, generator=gen) > 0.5).float()
    lstm = build_model("so_nwp_lstm", 23, generator=gen)
    seq = torch.randint(1, 23, (4, 21), generator=gen)
    seq[:, 15:] = 0
    losses = {
        "logreg": lambda: F.binary_cross_entropy_with_logits(logreg(x), y),
        "lstm": lambda: F.cross_entropy(lstm(seq[:, :-1]).flatten(0, 1), seq[:, 1:].flatten(), ignore_index=0),
    }
    for name, model in (("logreg", logreg), ("lstm", lstm)):
        opt = torch.optim.SGD(model.parameters(), lr=1.0 if name == "logreg" else 0.5)
        before = losses[name]().item()
        for _ in range(5):
            opt.zero_grad()
            losses[name]().backward()
            opt.step()
        assert losses[name]().item() < before, name


@pytest.mark.parametrize("name", ["so_tag_logreg", "so_nwp_lstm"])
def test_num_classes_is_the_output_size(name: str) -> None:
    model = build_model(name, 7)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(2, 10_000, generator=gen) if name == "so_tag_logreg" else torch.randint(0, 7, (2, 5), generator=gen)
    assert model(x).shape[-1] == 7

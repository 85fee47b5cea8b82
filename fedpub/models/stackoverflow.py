"""StackOverflow models, as TFF's baselines define them; both return logits.

- ``TagLogisticRegression`` (``so_tag_logreg``): TFF ``tag_prediction_tasks`` / GRF ``stackoverflow_models``
  ``create_logistic_model``: ``Dense(500, sigmoid)`` on the 10,000 bag-of-words features (5,000,500 parameters).
  Here without the sigmoid: train with ``binary_cross_entropy_with_logits`` on multi-hot targets (or
  ``cross_entropy`` for the AdaDPS single-label variant).
- ``NextWordLstm`` (``so_nwp_lstm``): TFF ``word_prediction_models.create_recurrent_model``:
  ``Embedding(10004, 96, mask_zero)`` -> ``LSTM(670, return_sequences)`` -> ``Dense(96)`` -> ``Dense(10004)``, output
  not tied to the embedding. Input ``(B, T)`` ids, output ``(B, T, 10004)`` logits; train with ``cross_entropy``
  over the last axis and ``ignore_index=0`` (pad). Keras masks padded steps; PyTorch runs them, which changes
  nothing for the real steps because TFF pads only at the end and the LSTM is causal.

In the registry (:func:`fedpub.models.build_model`), ``num_classes`` is the output size: the number of tags (500)
for ``so_tag_logreg``, and the number of token ids (10,004 = 10,000 words + pad, OOV, BOS, EOS) for ``so_nwp_lstm``,
which is also its input vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn

from fedpub.data.stackoverflow_tasks import WORD_VOCAB_SIZE

EMBEDDING_SIZE = 96
LSTM_SIZE = 670


class TagLogisticRegression(nn.Sequential):
    """Linear(vocab_size -> num_classes): logits of each tag."""

    def __init__(self, num_classes: int, vocab_size: int = WORD_VOCAB_SIZE) -> None:
        super().__init__(nn.Linear(vocab_size, num_classes))


class NextWordLstm(nn.Module):
    """Embedding(num_classes, 96, padding_idx=0) -> LSTM(670, batch_first) -> Linear(96) -> Linear(num_classes)."""

    def __init__(
        self, num_classes: int, embedding_size: int = EMBEDDING_SIZE, lstm_size: int = LSTM_SIZE
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(num_classes, embedding_size, padding_idx=0)
        self.lstm = nn.LSTM(embedding_size, lstm_size, batch_first=True)
        self.projection = nn.Linear(lstm_size, embedding_size)
        self.output = nn.Linear(embedding_size, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(self.embedding(ids))
        return self.output(self.projection(hidden))

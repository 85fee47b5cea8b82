"""EMNIST character-recognition models: input ``(B, 1, 28, 28)`` pixels as stored by TFF, output logits.

``SmallCNN`` is the quick-start model (about 18k parameters, fast on CPU); ``CnnDropout`` is TFF's
``cnn_dropout`` baseline (``simulation/baselines/emnist/emnist_models.py``); ``Mlp`` is the ``2nn`` 200-200
network; ``Softmax`` is multinomial logistic regression on the pixels (7,850 parameters for 10 classes), the
smallest model: the noise DP adds to a mean update grows with the square root of the parameter count. No batch
normalisation: per-example statistics would mix users under DP and federated averaging.
"""

from __future__ import annotations

from torch import nn


class SmallCNN(nn.Sequential):
    """Conv5x5(16) relu pool2 -> Conv5x5(32) relu pool2 -> Linear(512, classes)."""

    def __init__(self, num_classes: int) -> None:
        super().__init__(
            nn.Conv2d(1, 16, kernel_size=5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, kernel_size=5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 4 * 4, num_classes),
        )


class CnnDropout(nn.Sequential):
    """TFF ``cnn_dropout``: Conv3x3(32) relu -> Conv3x3(64) relu -> pool2 -> dropout .25 -> Dense128 relu
    -> dropout .5 -> Dense(classes)."""

    def __init__(self, num_classes: int) -> None:
        super().__init__(
            nn.Conv2d(1, 32, kernel_size=3),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Dropout(0.25),
            nn.Flatten(),
            nn.Linear(64 * 12 * 12, 128),
            nn.ReLU(),
            nn.Dropout(0.5),
            nn.Linear(128, num_classes),
        )


class Mlp(nn.Sequential):
    """TFF ``2nn``: 784 -> 200 relu -> 200 relu -> classes."""

    def __init__(self, num_classes: int) -> None:
        super().__init__(
            nn.Flatten(),
            nn.Linear(28 * 28, 200),
            nn.ReLU(),
            nn.Linear(200, 200),
            nn.ReLU(),
            nn.Linear(200, num_classes),
        )



class Softmax(nn.Sequential):
    """Multinomial logistic regression: 784 pixels -> classes (a linear layer; softmax in the loss)."""

    def __init__(self, num_classes: int) -> None:
        super().__init__(nn.Flatten(), nn.Linear(28 * 28, num_classes))

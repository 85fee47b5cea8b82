"""The user's own model, data and training loop, in the pattern of Flower's quickstart-pytorch: nothing
fedpub-specific. Each node makes its synthetic examples from its ``partition-id`` (8×8 one-channel images of 4
classes, a class-dependent pattern plus noise), so the app needs no download."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

CLASSES = 4
SIDE = 8


class Net(nn.Module):
    """A small CNN (one convolution, two linear layers)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc1 = nn.Linear(4 * (SIDE // 2) ** 2, 16)
        self.fc2 = nn.Linear(16, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def load_data(partition_id: int, batch_size: int) -> tuple[DataLoader, DataLoader]:
    """The train and test loaders of user ``partition_id`` (48 examples, 80 % train), the same every time."""
    patterns = torch.randn(CLASSES, 1, SIDE, SIDE, generator=torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(1_000 + partition_id)
    labels = torch.randint(CLASSES, (48,), generator=g)
    images = patterns[labels] + 0.8 * torch.randn(48, 1, SIDE, SIDE, generator=g)
    train = TensorDataset(images[:38], labels[:38])
    test = TensorDataset(images[38:], labels[38:])
    return DataLoader(train, batch_size=batch_size, shuffle=True), DataLoader(test, batch_size=batch_size)


def train(net: nn.Module, trainloader: DataLoader, epochs: int, lr: float, device: torch.device) -> float:
    """Train the model on the training set; the mean training loss."""
    net.to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    running_loss = 0.0
    for _ in range(epochs):
        for images, labels in trainloader:
            optimizer.zero_grad()
            loss = F.cross_entropy(net(images.to(device)), labels.to(device))
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
    return running_loss / (epochs * len(trainloader))


def test(net: nn.Module, testloader: DataLoader, device: torch.device) -> tuple[float, float]:
    """(loss, accuracy) of the model on the test set."""
    net.to(device)
    net.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for images, labels in testloader:
            outputs = net(images.to(device))
            loss += F.cross_entropy(outputs, labels.to(device)).item()
            correct += (outputs.argmax(1) == labels.to(device)).sum().item()
    return loss / len(testloader), correct / len(testloader.dataset)

"""How hard is the synthetic quick-start dataset? Generate a spec, train SmallCNN centrally, report test accuracy.

Run from the repository root: ``python -m fedpub.simulations.benchmarks.synthetic_emnist_difficulty [--writers 500]``.
Prints generation time, file sizes, train/test sizes, per-epoch test accuracy and the per-class test accuracy.
The target for the default spec is high but imperfect accuracy (about 90-97% after 2 epochs).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from fedpub.data.emnist import EmnistH5
from fedpub.data.synthetic_emnist import SyntheticEmnistSpec, write_synthetic_emnist
from fedpub.models import build_model
from fedpub.seeding import torch_generator


def _pooled(dataset: EmnistH5) -> tuple[torch.Tensor, torch.Tensor]:
    parts = [dataset.client_data(cid) for cid in dataset.client_ids]
    return torch.cat([p.x for p in parts]), torch.cat([p.y for p in parts])


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor]:
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(xb).argmax(1) for xb in x.split(1024)])
    correct = (pred == y).float()
    per_class = torch.stack([correct[y == c].mean() for c in range(10)])
    return correct.mean().item(), per_class


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=SyntheticEmnistSpec.num_writers)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (momentum 0.9, batch 32)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest for batch 32)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    spec = SyntheticEmnistSpec(num_writers=args.writers, seed=args.seed)

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        train_path, test_path = write_synthetic_emnist(Path(tmp), spec)
        print(f"spec: {spec}")
        print(f"generation: {time.perf_counter() - start:.2f} s")
        for path in (train_path, test_path):
            print(f"  {path.name}: {path.stat().st_size / 2**20:.2f} MiB")
        with EmnistH5(train_path) as train, EmnistH5(test_path) as test:
            start = time.perf_counter()
            x_train, y_train = _pooled(train)
            x_test, y_test = _pooled(test)
            print(f"read all clients: {time.perf_counter() - start:.2f} s")
    print(f"train: {len(y_train)} examples, test: {len(y_test)} examples, writers: {spec.num_writers}")

    model = build_model("emnist_small_cnn", 10, generator=torch_generator(args.seed, "difficulty", "init"))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    shuffle = torch_generator(args.seed, "difficulty", "shuffle")
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        model.train()
        for idx in torch.randperm(len(y_train), generator=shuffle).split(32):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x_train[idx]), y_train[idx]).backward()
            optimizer.step()
        train_acc, _ = _accuracy(model, x_train, y_train)
        test_acc, per_class = _accuracy(model, x_test, y_test)
        print(
            f"epoch {epoch}: train acc {train_acc:.4f}  test acc {test_acc:.4f}  "
            f"({time.perf_counter() - start:.1f} s)"
        )
    print("per-class test acc: " + " ".join(f"{c}:{a:.3f}" for c, a in enumerate(per_class.tolist())))


if __name__ == "__main__":
    main()

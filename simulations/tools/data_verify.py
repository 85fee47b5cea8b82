"""`fedpub data verify --config CONFIG.yaml`: a config's data opened and read as ``fedpub run`` reads it, so that a
config whose data verifies is one a run accepts (issue 44: `data verify` said `ok` for a file `run` refuses).

The same readers, in the same order as a run's build: the users (:func:`fedpub.data.users.load_data`: the source's
splits, the public, validation and evaluation users), whose examples are evaluated (:func:`evaluation_users`), the
preflight of the model on the data (:func:`~fedpub.simulations.run.preflight.preflight`), then every user of every
split read through the run's reader. Nothing is calibrated, trained or written. The report gives counts only: no
user's id, example or label.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fedpub.config import load_config
from fedpub.data.base import FederatedDataset
from fedpub.data.users import evaluation_users, load_data
from fedpub.tasks import get_task
from fedpub.simulations.run.preflight import preflight


def verify_config(path: Path, progress: Callable[[str], None] | None = None) -> list[tuple[str, str]]:
    """Open the data of the config at ``path`` as a run does and read every user's examples; the facts found
    (label, value). Raises what a run's build would raise (a ValueError naming the field or file)."""
    config = load_config(path)
    data = load_data(config)
    evaluated = evaluation_users(data, config.data.eval_users, config.data.eval_clients)
    preflight(config, data.train, get_task(config.task))
    splits: list[tuple[str, FederatedDataset]] = [("training", data.train)]
    splits += [(name, split) for name, split in (("public", data.public), ("test", data.test))
               if all(split is not seen for _, seen in splits)]
    facts = [("source", f"data.source {config.data.source} at {config.data.path}"),
             ("users", f"{len(data.private_ids)} private (N), {len(data.public_ids)} public, "
                       f"{len(data.validation_ids)} validation, {len(data.evaluation_ids)} held out for evaluation"),
             ("evaluated on", evaluated.label)]
    for name, split in splits:
        examples = 0
        for i, cid in enumerate(split.client_ids):
            if progress is not None and i % 100 == 0:
                progress(f"reading the {name} users: {i} of {len(split.client_ids)}")
            examples += len(split.client_data(cid))
        facts.append((f"{name} users read", f"{len(split.client_ids)} users, {examples} examples"))
    facts.append(("model", "builds, and runs a forward and the task's loss on the data's shapes (preflight)"))
    return facts

"""`fedpub data verify --config CONFIG.yaml`: a config's data opened and read as ``fedpub run`` reads it, so that a
config whose data verifies is one a run accepts (issue 44: `data verify` said `ok` for a file `run` refuses).

The same checks as a run's build, through the same function
(:func:`~fedpub.simulations.run.experiment.checked_data`: the users, whose examples are evaluated, the preflight of
the model on the data), then every user of every split read through the run's reader. Nothing is calibrated, trained or written. The report gives counts only: no
user's id, example or label.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fedpub.config import load_config
from fedpub.data.base import FederatedDataset
from fedpub.simulations.run.experiment import checked_data


def verify_config(path: Path, progress: Callable[[str], None] | None = None) -> list[tuple[str, str]]:
    """Open the data of the config at ``path`` as a run does and read every user's examples; the facts found
    (label, value). Raises what a run's build would raise (a ValueError naming the field or file)."""
    config = load_config(path)
    checked = checked_data(config)
    data, evaluated = checked.data, checked.eval_users
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

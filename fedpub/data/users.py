"""The users an experiment config's ``data`` section names: the source's splits opened through the dataset registry
(its look-alike files written first when the source generates them), DOPE's pooled users when configured, and the
private/public split (DESIGN.md §5: public users are never in N), with validation users held out of the private ones
(``data.validation``: never in N either).

Every backend and every node loads its users here, so the same config gives the same users everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fedpub.config import ExperimentConfig
from fedpub.data import registry
from fedpub.data.base import FederatedDataset, Splits
from fedpub.data.cache import CachedClients
from fedpub.data.public_split import UniformUsers, heldout_as_public, split_public, split_validation
from fedpub.data.spec import resolve


@dataclass(frozen=True)
class FederatedData:
    """The users of an experiment: ``train`` holds the private users, ``public`` the public ones (the
    same dataset for a public fraction of the training users, the dataset's held-out split otherwise)."""

    train: FederatedDataset
    test: FederatedDataset
    public: FederatedDataset
    private_ids: list[str]
    public_ids: list[str]
    validation_ids: list[str] = field(default_factory=list)
    """Training users held out of N for validation (``data.validation``): never sampled nor trained on."""


def open_splits(config: ExperimentConfig) -> Splits:
    """The train, test (and held-out) users ``data.source`` names, as its dataset's task sees them; a source that
    generates look-alike files writes them into ``data.path`` first (once: they are reused after)."""
    _, source = registry.source(config.data.source)
    if source.generate is not None:
        resolve(source.generate)(config)
    splits: Splits = resolve(source.splits)(config)
    return splits


def load_data(config: ExperimentConfig) -> FederatedData:
    """The training and test users, and which users are public (DESIGN.md §5: never in N); the training and
    public users are read through a :class:`~fedpub.data.cache.CachedClients` of ``data.cache_mb``. With
    ``flower.private_users: nodes`` the private users are nodes, not data: every user of the server's files is
    public (its server-held pool) and ``private_ids`` is empty."""
    public = config.data.public
    splits = open_splits(config)
    train = splits.train
    if config.data.uniform_users is not None:
        train = UniformUsers(train, config.data.uniform_users, seed=config.seed)
    cache_bytes = config.data.cache_mb * 2**20
    train = CachedClients(train, cache_bytes)
    nodes = config.flower.private_users == "nodes"  # the private users are nodes: the server's users are public
    if public.pool == "heldout":
        if splits.heldout is None:
            raise ValueError(f"data.source {config.data.source} opened no held-out split for data.public.pool heldout")
        private_ids, public_ids = heldout_as_public(train.client_ids, splits.heldout.client_ids)
        public_data: FederatedDataset = CachedClients(splits.heldout, cache_bytes)
    elif nodes:
        private_ids, public_ids, public_data = [], list(train.client_ids), train
    else:
        private_ids, public_ids = split_public(train.client_ids, public.fraction, public.seed)
        public_data = train
    if nodes:
        return FederatedData(train, splits.test, public_data, [], public_ids)
    validation = config.data.validation
    private_ids, validation_ids = split_validation(private_ids, validation.fraction, validation.seed)
    return FederatedData(train, splits.test, public_data, private_ids, public_ids, validation_ids)

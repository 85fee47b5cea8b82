"""The users an experiment config's ``data`` section names: the source's splits opened through the dataset registry
(its look-alike files written first when the source generates them), DOPE's pooled users when configured, and the
private/public split (docs/design.md §5: public users are never in N), with validation users held out of the
private ones (``data.validation``: never in N either), and evaluation users too (``data.evaluation``) when the run
evaluates on them: whose test examples evaluate the model (:func:`evaluation_users`) is decided here.

Every backend and every node loads its users here, so the same config gives the same users everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from fedpub.config import ExperimentConfig
from fedpub.data import registry
from fedpub.data.base import FederatedDataset, Splits
from fedpub.data.cache import CachedClients
from fedpub.data.public_split import (
    UniformUsers,
    heldout_as_public,
    listed_public,
    split_evaluation,
    split_public,
    split_validation,
)
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
    evaluation_ids: list[str] = field(default_factory=list)
    """Training users held out of N for evaluation (``data.evaluation``): never sampled nor trained on; their test
    examples evaluate the model."""
    test_is_train: bool = False
    """Whether the source has no test split of its own (a table, a Hugging Face folder without ``test_split``):
    a user's "test" rows are then its training rows, so only users no training touches (held out of N and never
    public) can be evaluated as a test."""


EvaluatedOn = Literal["public", "evaluation", "private"]


@dataclass(frozen=True)
class EvaluationUsers:
    """The test clients a run evaluates on, and who they are: public users, held-out evaluation users (outside N),
    or private users among them (their examples are not covered by DP)."""

    ids: list[str]
    kind: EvaluatedOn

    @property
    def private(self) -> bool:
        return self.kind == "private"

    @property
    def label(self) -> str:
        return {
            "public": "public users' test examples",
            "evaluation": "test examples of users outside N (held out, never trained on)",
            "private": "private users' test examples (not covered by DP)",
        }[self.kind]


NO_TEST_SPLIT = ("the data has no test split, so every user's rows are its training rows and a test needs users "
                 "that no training touches")


def holds_out_evaluation_users(
    setting: str, public_ids: Sequence[str], train_ids: Sequence[str], test_ids: Sequence[str], *,
    test_is_train: bool = False,
) -> bool:
    """Whether ``data.eval_users`` ``setting`` needs evaluation users held out of N: it evaluates outside N
    (``evaluation``, or ``auto`` when no public user has test examples of its own, which without a test split
    (``test_is_train``) none has) and every test client is a training user (a test client that is none, as in a
    dataset whose test users are others, is outside N already)."""
    no_public_test = test_is_train or set(public_ids).isdisjoint(test_ids)
    outside = setting == "evaluation" or (setting == "auto" and no_public_test)
    return outside and set(test_ids) <= set(train_ids)


def evaluation_users(data: FederatedData, setting: str, limit: int | None) -> EvaluationUsers:
    """The first ``limit`` test clients (all: None) of ``data`` among the public users (``setting`` ``public``, or
    ``auto`` when some public user has test examples), among the users outside N (``evaluation``, or ``auto``
    otherwise: the held-out evaluation users and test users who are no training user; never a validation user), or
    among every test client (``all``, private users' included: only when asked). Without a test split
    (:attr:`FederatedData.test_is_train`) only the users outside N are a test: ``auto`` evaluates on them and
    ``public`` and ``all``, which would call training rows test examples, are refused naming the field."""
    test_ids = data.test.client_ids
    public, private = set(data.public_ids), set(data.private_ids)
    if data.test_is_train and setting in ("public", "all"):
        raise ValueError(f"data.eval_users `{setting}`: {NO_TEST_SPLIT}; set data.eval_users: evaluation (users "
                         "held out of N, never trained on), or give the data a test split (data.table.test_split)")
    public_test = [] if data.test_is_train else [c for c in test_ids if c in public]
    if setting == "public" or (setting == "auto" and public_test):
        if not public_test:
            raise ValueError("data.eval_users `public`: no public user has test examples (set data.public, or "
                             "data.eval_users: evaluation)")
        return EvaluationUsers(public_test[:limit], "public")
    if setting in ("evaluation", "auto"):
        inside = private | public | set(data.validation_ids)
        outside = [c for c in test_ids if c not in inside][:limit]
        if not outside:
            raise ValueError(f"data.eval_users `{setting}`: no test client is outside N (held-out evaluation users: "
                             f"{len(data.evaluation_ids)}): raise data.evaluation.fraction, set data.public, or "
                             "set data.eval_users: all to evaluate on private users' test examples (not covered by DP)")
        return EvaluationUsers(outside, "evaluation")
    chosen = list(test_ids)[:limit]
    in_n = any(c in private for c in chosen)
    return EvaluationUsers(chosen, "private" if in_n else "public" if set(chosen) <= public else "evaluation")


def open_splits(config: ExperimentConfig) -> Splits:
    """The train, test (and held-out) users ``data.source`` names, as its dataset's task sees them; a source that
    generates look-alike files writes them into ``data.path`` first (once: they are reused after)."""
    _, source = registry.source(config.data.source)
    if source.generate is not None:
        resolve(source.generate)(config)
    splits: Splits = resolve(source.splits)(config)
    return splits


def load_data(config: ExperimentConfig, splits: Splits | None = None) -> FederatedData:
    """The training and test users (``splits``, the users a Python caller gives for ``data.source: python``; else
    the source's), and which users are public (docs/design.md §5: never in N); the training and
    public users are read through a :class:`~fedpub.data.cache.CachedClients` of ``data.cache_mb``. With
    ``flower.private_users: nodes`` the private users are nodes, not data: every user of the server's files is
    public (its server-held pool) and ``private_ids`` is empty."""
    public = config.data.public
    if splits is not None and config.data.source != "python":
        raise ValueError(f"users given from Python (fedpub.run(config, data=...)) need data.source: python; the "
                         f"config's data.source is {config.data.source}")
    splits = splits or open_splits(config)
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
    elif public.users is not None or splits.public_ids is not None:
        where = "data.public.users" if public.users is not None else "data.table.public"
        if public.users is not None and splits.public_ids is not None:
            raise ValueError("data.public.users and data.table.public both name the public users: keep one")
        listed = public.users if public.users is not None else splits.public_ids
        private_ids, public_ids = listed_public(train.client_ids, list(listed or ()), where)
        public_data = train
    else:
        private_ids, public_ids = split_public(train.client_ids, public.fraction, public.seed)
        public_data = train
    test_is_train = splits.test is splits.train
    if nodes:
        return FederatedData(train, splits.test, public_data, [], public_ids, test_is_train=test_is_train)
    validation = config.data.validation
    private_ids, validation_ids = split_validation(private_ids, validation.fraction, validation.seed)
    evaluation_ids: list[str] = []
    if holds_out_evaluation_users(config.data.eval_users, public_ids, train.client_ids, splits.test.client_ids,
                                  test_is_train=test_is_train):
        evaluation = config.data.evaluation
        before = len(private_ids)
        private_ids, evaluation_ids = split_evaluation(private_ids, evaluation.fraction, evaluation.seed)
        if not evaluation_ids:
            why, fix = (NO_TEST_SPLIT, "raise data.evaluation.fraction") if test_is_train else (
                "no public user has test examples", "raise data.evaluation.fraction, set data.public, or set "
                "data.eval_users: all to evaluate on private users' test examples (not covered by DP)")
            raise ValueError(
                f"data.eval_users `{config.data.eval_users}` evaluates on users held out of the private population, "
                f"but data.evaluation.fraction {evaluation.fraction:g} of {before} private users holds out none "
                f"({why}): {fix}"
            )
    return FederatedData(train, splits.test, public_data, private_ids, public_ids, validation_ids, evaluation_ids,
                         test_is_train)

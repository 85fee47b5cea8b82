"""User-level differential privacy accounting for fedpub, built on dp-accounting.

events: cohort rules and the DpEvent of a round (McMahan et al. 2018 user-level DP-FedAvg; Kairouz et al.
2021 DP-FTRL's epoch blocks; Choquette-Choo et al. 2023's cyclic Poisson sampling and its fixed-size form); accountant: PLD by default, RDP as
cross-check, and the budget; calibration:
the noise multiplier for a target epsilon over a planned run (cached); ledger: the composed event as JSON,
so anyone can recompute epsilon; empirical: the epsilon that canary statistics imply (the one-shot audit's
estimators).
"""

from fedpub.privacy.accountant import (
    AccountantKind,
    PrivacyBudget,
    UserLevelAccountant,
    check_first_round,
    cross_check,
    epsilon_for,
    make_dp_accountant,
)
from fedpub.privacy.calibration import calibrate, calibrate_noise_multiplier
from fedpub.privacy.errors import BudgetExceededError, PrivacyError
from fedpub.privacy.events import (
    CohortRule,
    CyclicFixedSizeSampling,
    CyclicPoissonSampling,
    EpochBlocks,
    FixedSizeSampling,
    PoissonSampling,
    event_from_dict,
    event_to_dict,
    neighboring_relation,
    round_event,
    run_event,
)
from fedpub.privacy.ledger import ledger_record, read_ledger_event, write_ledger

__all__ = [
    "AccountantKind",
    "BudgetExceededError",
    "CohortRule",
    "CyclicFixedSizeSampling",
    "CyclicPoissonSampling",
    "EpochBlocks",
    "FixedSizeSampling",
    "PoissonSampling",
    "PrivacyBudget",
    "PrivacyError",
    "UserLevelAccountant",
    "calibrate",
    "calibrate_noise_multiplier",
    "check_first_round",
    "cross_check",
    "epsilon_for",
    "event_from_dict",
    "event_to_dict",
    "ledger_record",
    "make_dp_accountant",
    "neighboring_relation",
    "read_ledger_event",
    "round_event",
    "run_event",
    "write_ledger",
]

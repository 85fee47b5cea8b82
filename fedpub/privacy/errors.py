"""Errors of the privacy package: invalid accounting inputs and exhausted budgets."""


class PrivacyError(ValueError):
    """An accounting input is invalid or unsupported; the message names the field and what is allowed."""


class BudgetExceededError(PrivacyError):
    """Composing the next event would spend more privacy than the configured budget."""

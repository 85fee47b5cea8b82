"""Named strategy recipes: each module's ``build`` turns its config into a StrategyCore."""

from strategies import dope, dp_fedavg

RECIPES = {"dp_fedavg": dp_fedavg.build, "dope": dope.build}
"""Recipe name (the config's ``strategy.name``) -> its ``build``."""

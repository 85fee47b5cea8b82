"""Named strategy recipes: each module's ``build`` turns its config into a StrategyCore."""

"""Named strategy recipes, one module per algorithm; ``compose.build_strategy`` turns a strategy
config (any combination of their parts) into a StrategyCore."""

"""A Flower quickstart-style PyTorch app (standard ClientApp) whose ServerApp uses fedpub's strategies."""

"""A Flower App that trains with fedpub's user-level DP strategy."""

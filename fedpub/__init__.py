"""fedpub: user-level differentially private federated learning that uses public users.

The core package is framework-free: it imports torch, numpy and dp_accounting, never flwr.
"""

__version__ = "0.1.0"

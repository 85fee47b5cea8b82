"""fedpub on Flower: the one Message-API strategy that runs any fedpub recipe over Flower nodes, by job:

- :mod:`~fedpub.strategies.flower.strategy`: :class:`FedpubStrategy` (rounds, run phases, federated evaluation);
- :mod:`~fedpub.strategies.flower.discovery`: which node holds which user, each claim checked;
- :mod:`~fedpub.strategies.flower.replies`: a reply read strictly as the round's update, and its errors;
- :mod:`~fedpub.strategies.flower.public_pools`: public users the server holds and trains itself;
- :mod:`~fedpub.strategies.flower.records`: Flower records to tensors and back.

What a Flower user's own ServerApp needs is importable from here; fedpub's own modules import from the module
that owns a name.
"""

from fedpub.strategies.flower.discovery import NodeDiscoveryError, RefusedNode
from fedpub.strategies.flower.public_pools import PublicPool, TrainFnPool, TrainFnPublicTrainer
from fedpub.strategies.flower.records import to_array_record, to_tensors
from fedpub.strategies.flower.replies import MalformedReply, ProtocolMismatch
from fedpub.strategies.flower.strategy import FedpubStrategy

__all__ = [
    "FedpubStrategy", "MalformedReply", "NodeDiscoveryError", "ProtocolMismatch", "PublicPool", "RefusedNode",
    "TrainFnPool", "TrainFnPublicTrainer", "to_array_record", "to_tensors",
]

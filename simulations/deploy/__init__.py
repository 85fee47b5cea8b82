"""A Flower deployment on this machine (:mod:`simulations.deploy.local`, ``python -m simulations.deploy.local``),
built from process supervision (:mod:`~simulations.deploy.processes`), TLS certificates and node keys
(:mod:`~simulations.deploy.tls`) and Flower's own programs (:mod:`~simulations.deploy.flwr_cli`)."""

"""A Flower deployment on this machine (:mod:`fedpub.simulations.deploy.local`, ``python -m fedpub.simulations.deploy.local``),
built from process supervision (:mod:`~fedpub.simulations.deploy.processes`), TLS certificates and node keys
(:mod:`~fedpub.simulations.deploy.tls`) and Flower's own programs (:mod:`~fedpub.simulations.deploy.flwr_cli`)."""

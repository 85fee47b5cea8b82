"""A Flower deployment on this machine (:mod:`fedpub.simulations.flower.deploy.local`, ``python -m fedpub.simulations.flower.deploy.local``),
built from process supervision (:mod:`~fedpub.simulations.flower.deploy.processes`), TLS certificates and node keys
(:mod:`~fedpub.simulations.flower.deploy.tls`) and Flower's own programs (:mod:`~fedpub.simulations.flower.deploy.flwr_cli`)."""

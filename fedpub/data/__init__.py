"""Federated datasets: the lazy per-client protocol (:mod:`fedpub.data.base`), the dataset registry
(:mod:`fedpub.data.registry`) and each registered dataset's readers, writers and declaration. Import the module you
need: this package imports nothing, so the config schema can read the registry without torch or h5py.
"""

"""``python -m fedpub.simulations``: the ``fedpub`` command line, for launchers that take a module (torchrun)."""

from fedpub.simulations.tools.cli import main

if __name__ == "__main__":
    main()

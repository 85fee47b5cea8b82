"""The ``fedpub`` command line (:mod:`.cli`) and the commands that are not a run: ``fedpub data`` (:mod:`.data_cli`,
:mod:`.data_inspect`), ``fedpub audit`` (:mod:`.audit`, :mod:`.audit_power`), ``fedpub compare`` and
``fedpub report`` (:mod:`.compare`, :mod:`.compare_report`, several runs at once in :mod:`.sweep_jobs`)."""

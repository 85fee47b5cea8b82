"""fedpub on Flower: the Simulation Engine runner (:mod:`.simulation`), the production ``ServerApp``
(:mod:`.server_app`), SecAgg+ with server noise (:mod:`.secagg_dp`), the environment of every Flower process fedpub
starts (:mod:`.environment`) and a real deployment on this machine (:mod:`.deploy`)."""

"""One run from its config, on any backend: the experiment's parts (:mod:`.experiment`), the in-process engine
(:mod:`.engine`), the bookkeeping every backend shares (:mod:`.session`), the run directory and its lock, progress,
evaluation, tracking, the summary and plot, and fedpub's Python API (:mod:`.api`)."""

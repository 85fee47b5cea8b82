"""A Flower deployment on this machine: a real SuperLink, N SuperNodes and ``flwr run``.

``python -m fedpub.simulations.flower.deploy.local --config EXP.yaml [--nodes N] [--rounds R] [--tls]`` starts
``flower-superlink`` on 127.0.0.1 (a free port), N ``flower-supernode`` processes (node i holds
``partition-id=i``, i.e. the i-th user of the training file), writes a private ``FLWR_HOME`` with a
``config.toml`` connection, runs ``flwr run <repo> <connection> --run-config "config='EXP.yaml'"
--stream`` and waits for it. Every process it started is stopped at the end, also on Ctrl-C, on
SIGTERM and on errors. Results are written by the ServerApp into ``<output_dir>/<name>/`` exactly
like ``fedpub run``. With ``--tls`` the SuperLink gets a self-signed CA and server certificate
and ``--enable-supernode-auth``; each SuperNode gets a key pair registered with ``flwr supernode
register`` before it starts.

:class:`LocalDeployment` puts together the building blocks of the other modules of this package
(:mod:`~fedpub.simulations.flower.deploy.processes`: supervision; :mod:`~fedpub.simulations.flower.deploy.tls`: certificates and keys;
:mod:`~fedpub.simulations.flower.deploy.flwr_cli`: the Flower programs), which ``tests/simulations/test_deployment.py``
also uses one by one; ``docs/deployment.md`` has the recipe for real devices.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fedpub.simulations.flower.deploy.flwr_cli import (
    FlwrRunResult,
    flwr_run,
    register_supernode,
    start_superlink,
    start_supernodes,
    write_connection,
)
from fedpub.simulations.flower.deploy.processes import (
    LOCALHOST,
    DeploymentError,
    ManagedProcess,
    ProcessRegistry,
    deployment_env,
    free_ports,
    stop_on_signals,
)
from fedpub.simulations.flower.deploy.tls import NodeKey, TlsFiles, make_node_key, make_tls_certificates

MAX_DEFAULT_NODES = 64
"""Without ``--nodes``, at most this many SuperNodes (one per user of the data) are started."""


@dataclass
class LocalDeployment:
    """A SuperLink and its SuperNodes on this machine, with a CLI ``FLWR_HOME`` that knows how to
    reach it. Use as a context manager: leaving it stops every process it started."""

    work_dir: Path
    num_nodes: int
    tls: bool = False
    cwd: Path = field(default_factory=Path.cwd)
    database: Path | None = None
    """The SuperLink's SQLite state file (``--database``); None: in memory, lost when it dies."""
    node_configs: Sequence[str] | None = None
    """One ``--node-config`` per SuperNode (e.g. ``client-id="f0000_00"``); None: node i holds ``partition-id=i``."""
    simulation: bool = False
    """A simulation SuperLink (``flower-superlink --simulation``) and ``num_nodes`` virtual SuperNodes in its
    Simulation Engine, instead of ``num_nodes`` ``flower-supernode`` processes."""
    registry: ProcessRegistry = field(default_factory=ProcessRegistry)
    superlink: ManagedProcess | None = None
    supernodes: list[ManagedProcess] = field(default_factory=list)
    superlink_port: int = 0
    tls_files: TlsFiles | None = None
    node_keys: list[NodeKey] = field(default_factory=list)
    cli_env: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{LOCALHOST}:{self.superlink_port}"

    @property
    def logs(self) -> Path:
        return self.work_dir / "logs"

    def start(self) -> LocalDeployment:
        """SuperLink, CLI connection, (with TLS: certificates, node keys registered), SuperNodes."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.cli_env = deployment_env(self.work_dir / "flwr-home", self.registry.marker)
        ports = free_ports(1 if self.simulation else self.num_nodes + 1)
        self.superlink_port, node_ports = ports[0], ports[1:]
        if self.tls:
            self.tls_files = make_tls_certificates(self.work_dir / "certs")
            self.node_keys = [make_node_key(self.work_dir / "keys", f"supernode-{i}") for i in range(self.num_nodes)]
        self.launch_superlink()
        write_connection(self.work_dir / "flwr-home", self.address,
                         root_certificates=self.tls_files.ca_cert if self.tls_files else None)
        for key in self.node_keys:
            register_supernode(key.public, env=self.cli_env)
        if self.simulation:
            return self
        self.supernodes = start_supernodes(
            self.registry, self.num_nodes, superlink=self.address, work_dir=self.work_dir, env=self.cli_env,
            ports=node_ports, node_configs=self.node_configs,
            root_certificates=self.tls_files.ca_cert if self.tls_files else None,
            auth_keys=[k.private for k in self.node_keys] if self.node_keys else None, cwd=self.cwd,
        )
        return self

    def launch_superlink(self) -> ManagedProcess:
        """Start the SuperLink on ``superlink_port``; after it died, start it again there with the same
        settings (the SuperNodes keep retrying that address)."""
        self.superlink = start_superlink(
            self.registry, port=self.superlink_port,
            env=deployment_env(self.work_dir / "superlink-home", self.registry.marker), log_dir=self.logs,
            tls=self.tls_files, enable_supernode_auth=self.tls, database=self.database, cwd=self.cwd,
            simulation=self.simulation,
        )
        return self.superlink

    def run(self, config_path: Path, *, timeout: float = 3600.0, echo: bool = True) -> FlwrRunResult:
        return flwr_run(self.registry, config_path, env=self.cli_env, log_path=self.logs / "flwr-run.log",
                        timeout=timeout, echo=echo, cwd=self.cwd,
                        num_supernodes=self.num_nodes if self.simulation else None)

    def stop(self) -> None:
        self.registry.stop_all()

    def __enter__(self) -> LocalDeployment:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()



def experiment_file(config: Path, rounds: int | None, work_dir: Path) -> Path:
    """The YAML to run: ``config``, rewritten into ``work_dir`` only when ``rounds`` overrides its
    number of rounds."""
    import yaml

    from fedpub.config import load_config
    from fedpub.strict_yaml import load_yaml

    path = Path(config).resolve()
    load_config(path)  # fail here, before anything starts
    if rounds is None:
        return path
    raw = load_yaml(path.read_text()) or {}
    raw["rounds"] = rounds
    derived = work_dir / f"{path.stem}.rounds{rounds}.yaml"
    work_dir.mkdir(parents=True, exist_ok=True)
    derived.write_text(yaml.safe_dump(raw, sort_keys=False))
    load_config(derived)
    return derived


def count_users(config_path: Path, *, simulation: bool = False) -> int:
    """How many private users (= SuperNodes the ServerApp waits for) the experiment's data has; with
    ``simulation``, the virtual SuperNodes its simulation needs (:func:`~fedpub.simulations.flower.server_app.federation_size`)."""
    from fedpub.config import load_config
    from fedpub.data.users import load_data
    from fedpub.simulations.flower.server_app import federation_size

    config = load_config(config_path)
    data = load_data(config)
    if simulation:
        return federation_size(config, data.train, data.public, data.public_ids)
    return len(data.train.client_ids)


def results_dir(config_path: Path, cwd: Path) -> Path:
    from fedpub.config import load_config

    cfg = load_config(config_path)
    return (cwd / cfg.output_dir / cfg.name).resolve()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fedpub.simulations.flower.deploy.local",
        description="Run an experiment as a real Flower deployment on this machine: flower-superlink, "
        "one flower-supernode per user, `flwr run`; every process is stopped at the end.",
    )
    parser.add_argument("--config", type=Path, required=True,
                        help="experiment YAML; relative paths in it are resolved against the current directory, "
                        "as with `fedpub run`")
    parser.add_argument("--nodes", type=int, default=None,
                        help="number of SuperNodes (default: the number of users in the training data, which "
                        f"the ServerApp waits for, at most {MAX_DEFAULT_NODES}); node i holds the i-th user "
                        "(partition-id=i)")
    parser.add_argument("--rounds", type=int, default=None, help="override the config's number of rounds")
    parser.add_argument("--simulation", action="store_true",
                        help="a local simulation, as `flwr run .` runs it: a simulation SuperLink whose Simulation "
                        "Engine holds one virtual SuperNode per user (--federation-config num-supernodes=N), no "
                        "flower-supernode processes")
    parser.add_argument("--tls", action="store_true",
                        help="TLS (self-signed CA via openssl) and SuperNode authentication (ssh-keygen EC keys "
                        "registered with `flwr supernode register`)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where certificates, keys, FLWR_HOMEs and logs go (default: a new temp dir, kept)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the run (default 3600)")
    parser.add_argument("--quiet", action="store_true", help="do not echo the run's log stream")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cwd = Path.cwd()
    from fedpub.config import ConfigError, load_config

    try:
        load_config(args.config)
        work_dir = (args.work_dir or Path(tempfile.mkdtemp(prefix="fedpub-deploy-"))).resolve()
        config_path = experiment_file(args.config, args.rounds, work_dir)
        num_nodes = args.nodes if args.nodes is not None else count_users(config_path, simulation=args.simulation)
    except (ConfigError, OSError, ValueError) as err:
        print(f"fedpub deploy: {err}", file=sys.stderr)
        return 2
    if args.simulation and args.tls:
        print("fedpub deploy: --tls is for a deployment of SuperNode processes, not --simulation", file=sys.stderr)
        return 2
    if num_nodes < 1:
        print("fedpub deploy: --nodes must be at least 1", file=sys.stderr)
        return 2
    if args.nodes is None and num_nodes > MAX_DEFAULT_NODES and not args.simulation:
        print(f"fedpub deploy: the data has {num_nodes} users, i.e. {num_nodes} SuperNode processes on this "
              f"machine; pass --nodes {num_nodes} if you mean it", file=sys.stderr)
        return 2
    kind = "virtual SuperNodes (simulation)" if args.simulation else "SuperNodes"
    print(f"fedpub deploy: {num_nodes} {kind}, {'TLS + node auth' if args.tls else 'insecure'}, "
          f"work dir {work_dir}", flush=True)
    deployment = LocalDeployment(work_dir, num_nodes, tls=args.tls, cwd=cwd, simulation=args.simulation)
    result: FlwrRunResult | None = None
    try:
        with stop_on_signals(), deployment:
            print(f"fedpub deploy: SuperLink on {deployment.address}; SuperNodes up; running {config_path}",
                  flush=True)
            result = deployment.run(config_path, timeout=args.timeout, echo=not args.quiet)
    except KeyboardInterrupt:
        print("\nfedpub deploy: interrupted; all processes stopped", file=sys.stderr)
        return 130
    except DeploymentError as err:
        print(f"fedpub deploy: {err}\nlogs: {deployment.logs}", file=sys.stderr)
        return 1
    print(f"fedpub deploy: all processes stopped; logs in {deployment.logs}")
    ok = result is not None and result.returncode == 0 and (result.status or "").endswith("completed")
    status = None if result is None else result.status
    if not ok:
        if args.quiet and result is not None:
            print("".join(result.output.splitlines(keepends=True)[-15:]), file=sys.stderr)
        print(f"fedpub deploy: the run did not complete (status {status}); see {deployment.logs}", file=sys.stderr)
        return 1
    print(f"fedpub deploy: run {result.run_id} {status} in {result.wall_time:.1f} s; "
          f"results in {results_dir(config_path, cwd)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

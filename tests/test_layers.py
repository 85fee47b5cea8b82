"""The packages import one way: fedpub < {strategies, clients} < simulations (docs/design.md §1).

The folders strategies/, clients/ and simulations/ install as ``fedpub.strategies``, ``fedpub.clients`` and
``fedpub.simulations``; every module is named and imported by its installed name, never by the bare folder name a
user's own ``strategies.py`` would shadow.

Every module of the four packages is read as a syntax tree, so an import inside a function or under
``TYPE_CHECKING`` counts as much as one at the top. A failure lists each offending module, line and import: an
import of a higher layer, an import between strategies and clients (side by side, neither above the other), or a
cycle between packages. A fresh interpreter then checks that validating a config loads neither torch nor the data
readers' libraries.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"fedpub": 0, "strategies": 1, "clients": 1, "simulations": 2}
"""Each package's layer: a package may import only packages of a lower layer (and its own modules)."""
SUBPACKAGES = ("strategies", "clients", "simulations")
"""The folders beside fedpub/ that install inside it."""


def package_of(module: str) -> str:
    """The layer package of an absolute module name: ``fedpub.clients.x`` is in clients, ``fedpub.config`` in the
    core (fedpub); anything else (a bare ``strategies``, torch) is its own top-level name."""
    top, _, rest = module.partition(".")
    if top == "fedpub" and rest.partition(".")[0] in SUBPACKAGES:
        return rest.partition(".")[0]
    return top


def installed_name(root: Path, path: Path) -> str:
    """The module name of the file at ``path`` (below ``root``) once installed: clients/x.py is fedpub.clients.x."""
    parts = path.relative_to(root).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(("fedpub", *parts) if parts[0] in SUBPACKAGES else parts)


@dataclass(frozen=True)
class Import:
    """``module`` imports ``target`` (an absolute module name) at ``line``."""

    module: str
    line: int
    target: str

    @property
    def source_package(self) -> str:
        return package_of(self.module)

    @property
    def target_package(self) -> str:
        return package_of(self.target)

    def __str__(self) -> str:
        return f"{self.module} (line {self.line}) imports {self.target}"


def module_imports(root: Path, path: Path) -> list[Import]:
    """Every import statement of the module at ``path`` (below ``root``), relative ones made absolute."""
    name = installed_name(root, path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [Import(name, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            anchor = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(anchor + ([node.module] if node.module else []))
            found.append(Import(name, node.lineno, target))
    return found


def cross_package_imports(root: Path) -> list[Import]:
    """The imports by which a module of one of the four packages under ``root`` imports another of them."""
    found = []
    for package in LAYERS:
        for path in sorted((root / package).rglob("*.py")):
            found += [
                i for i in module_imports(root, path)
                if i.target.partition(".")[0] == "fedpub" and i.target_package != package
            ]
    return found


def shadowable(root: Path) -> list[Import]:
    """The imports of a bare strategies, clients or simulations module anywhere under ``root``'s packages and
    tests: they would load the folder (or a user's file of that name) a second time beside fedpub's subpackage."""
    found = []
    for folder in (*LAYERS, "tests", "examples"):
        for path in sorted((root / folder).rglob("*.py")):
            found += [i for i in module_imports(root, path) if i.target.partition(".")[0] in SUBPACKAGES]
    return found


def upward(imports: list[Import]) -> list[Import]:
    return [i for i in imports if LAYERS[i.target_package] > LAYERS[i.source_package]]


def sideways(imports: list[Import]) -> list[Import]:
    return [i for i in imports if LAYERS[i.target_package] == LAYERS[i.source_package]]


def cycles_of(edges: dict[tuple[str, str], Import]) -> list[list[Import]]:
    """Every cycle of the graph whose edges are ``edges`` (one import making each), each once, from its first node
    in sorted order."""
    graph: dict[str, set[str]] = defaultdict(set)
    for source, target in edges:
        graph[source].add(target)
    cycles: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for following in sorted(graph[path[-1]]):
            if following == path[0]:
                cycles.append(path)
            elif following > path[0] and following not in path:
                walk(path + [following])

    for start in sorted(graph):
        walk([start])
    return [[edges[cycle[k], cycle[(k + 1) % len(cycle)]] for k in range(len(cycle))] for cycle in cycles]


def package_cycles(imports: list[Import]) -> list[list[Import]]:
    """Every cycle of the package graph, as the imports that make its edges."""
    edges: dict[tuple[str, str], Import] = {}
    for i in imports:
        edges.setdefault((i.source_package, i.target_package), i)
    return cycles_of(edges)


def module_cycles(root: Path) -> list[list[Import]]:
    """Every cycle between the modules of the four packages under ``root``: an import's target is the module it
    names (or the module holding the name it imports); importing an enclosing package is no edge (Python has
    loaded it already)."""
    files = {installed_name(root, path): path for package in LAYERS for path in sorted((root / package).rglob("*.py"))}
    edges: dict[tuple[str, str], Import] = {}
    for name, path in files.items():
        for i in module_imports(root, path):
            target = i.target
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                edges.setdefault((name, target), i)
    return cycles_of(edges)


def listing(imports: list[Import]) -> str:
    return "\n".join(f"  {i}" for i in imports)


IMPORTS = cross_package_imports(ROOT)


def test_every_package_is_read():
    for package in LAYERS:
        assert (ROOT / package / "__init__.py").is_file(), package
    assert {i.source_package for i in IMPORTS} == {"strategies", "clients", "simulations"}  # fedpub imports none


def test_every_module_is_imported_by_its_installed_name():
    found = shadowable(ROOT)
    assert not found, f"imports by the bare folder name (write fedpub.<name>):\n{listing(found)}"


def test_no_package_imports_a_higher_layer():
    found = upward(IMPORTS)
    assert not found, f"imports of a higher layer (fedpub < strategies, clients < simulations):\n{listing(found)}"


def test_strategies_and_clients_do_not_import_each_other():
    found = sideways(IMPORTS)
    assert not found, f"imports between strategies and clients (side by side, over fedpub):\n{listing(found)}"


def test_the_packages_import_each_other_without_a_cycle():
    cycles = package_cycles(IMPORTS)
    assert not cycles, "package cycles:\n" + "\n".join(
        " -> ".join([*(i.source_package for i in cycle), cycle[0].source_package]) + f":\n{listing(cycle)}"
        for cycle in cycles
    )


def test_the_modules_import_each_other_without_a_cycle():
    """A cycle inside a package too (under ``TYPE_CHECKING`` or in a function as well): it makes the two modules one
    piece that can be read, tested and moved only together."""
    cycles = module_cycles(ROOT)
    assert not cycles, "module cycles:\n" + "\n".join(listing(cycle) for cycle in cycles)


ROOMS = {
    "run": {"configs"},
    "flower": {"run", "configs"},
    "tools": {"run", "flower", "configs"},
    "reproductions": {"run", "tools", "configs"},
    "benchmarks": {"run", "flower", "tools", "configs"},
}
"""The rooms of simulations/ by job, and the rooms each may use: a run knows nothing of Flower, the CLI or the
experiments built on it, except that ``run/backends.py`` (the ``--backend`` switch) starts Flower's runner."""


def test_the_rooms_of_simulations_use_only_the_rooms_below_them():
    assert {path.name for path in (ROOT / "simulations").iterdir() if (path / "__init__.py").is_file()} == {
        *ROOMS, "configs"}
    found = []
    for room, allowed in ROOMS.items():
        for path in sorted((ROOT / "simulations" / room).rglob("*.py")):
            for i in module_imports(ROOT, path):
                used = i.target.split(".")[2:3] if i.target.startswith("fedpub.simulations.") else []
                exempt = path.name == "backends.py" and used == ["flower"]
                if used and used[0] != room and used[0] not in allowed and not exempt:
                    found.append(i)
    assert not found, f"imports of a room above (see ROOMS):\n{listing(found)}"


def test_the_checks_catch_upward_sideways_and_circular_imports_wherever_they_are(tmp_path: Path):
    files = {
        "fedpub/__init__.py": "",
        "fedpub/core.py": "def run():\n    from fedpub.simulations.app import main\n",
        "strategies/__init__.py": "import fedpub.clients.local\n",
        "clients/__init__.py": "",
        "clients/local.py": "from fedpub.strategies import recipe\nimport simulations\n",
        "simulations/__init__.py": "",
        "simulations/app.py": "from . import helpers\nfrom fedpub import core\n",
        "simulations/helpers.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .tasks import Task\n",
        "simulations/tasks.py": "from fedpub.simulations.helpers import run\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    found = cross_package_imports(tmp_path)
    assert [str(i) for i in upward(found)] == ["fedpub.core (line 2) imports fedpub.simulations.app"]
    assert [str(i) for i in sideways(found)] == [
        "fedpub.strategies (line 1) imports fedpub.clients.local",
        "fedpub.clients.local (line 1) imports fedpub.strategies",
    ]
    assert [str(i) for i in shadowable(tmp_path)] == ["fedpub.clients.local (line 2) imports simulations"]
    cycles = [[i.source_package for i in cycle] for cycle in package_cycles(found)]
    assert cycles == [["clients", "strategies"], ["fedpub", "simulations"]]
    assert [[str(i) for i in cycle] for cycle in module_cycles(tmp_path)] == [  # fedpub.core <-> app is none:
        ["fedpub.clients.local (line 1) imports fedpub.strategies",  # app imports its enclosing package fedpub
         "fedpub.strategies (line 1) imports fedpub.clients.local"],
        ["fedpub.simulations.helpers (line 3) imports fedpub.simulations.tasks",
         "fedpub.simulations.tasks (line 1) imports fedpub.simulations.helpers"],
    ]


def test_the_core_is_framework_free():
    """docs/design.md §1: fedpub/ imports torch, numpy and dp_accounting, never Flower."""
    flower = [
        str(i) for path in sorted((ROOT / "fedpub").rglob("*.py"))
        for i in module_imports(ROOT, path) if i.target_package == "flwr"
    ]
    assert not flower, "the core imports Flower:\n" + "\n".join(flower)


def test_importing_the_config_schema_loads_neither_torch_nor_the_data_libraries():
    heavy = ("torch", "h5py", "sqlite3")
    code = f"import sys, fedpub.config; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", f"import fedpub.config loaded {result.stdout.strip()}"


def test_the_api_facade_names_only_the_api_module_above_the_core_and_imports_it_lazily():
    """fedpub/__init__.py re-exports the Python API by name (``importlib`` on first use, invisible to the syntax
    tree above): the only higher-layer module it may name is simulations.run.api, and ``import fedpub`` loads none."""
    import fedpub

    above = {module for module in fedpub._API.values() if package_of(module) != "fedpub"}
    assert above == {"fedpub.simulations.run.api"}
    code = "import sys, fedpub; print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'flwr') " \
           "or m.split('.')[:2][-1] in ('simulations', 'strategies', 'clients')))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", f"import fedpub loaded {result.stdout.strip()}"

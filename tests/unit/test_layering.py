"""The layering test: every module's imports point down the pipeline

    cli -> experiments -> runtime -> compose / netem planners -> spec -> base

and analysis reads result files (and the pure parsers of experiments), never the runtime. It reads the
imports of every module of the five packages with `ast` and checks them against the table below, so the
shape the README's map describes stays the shape of the code.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("swarm", "netem", "compose", "experiments", "analysis", "flightsw")

# (folder, layer): one entry per folder, no single modules; a module takes the layer of the deepest folder that
# holds it, so where a module lives says what it may import. docs/ARCHITECTURE.md draws the same table.
LAYER_OF = [
    ("flightsw", "base"),        # the programs inside a node and their protocol with the host: standard library only
    ("swarm", "base"),           # the package root: errors, units, caps (and the package's lazy `Swarm`, PEP 562)
    ("swarm.spec", "spec"),      # the swarm spec and its sections: hosts, apps, mesh, dtn
    ("netem.spec", "spec"),      # the `links:` and `orbits:` sections (pydantic only)
    ("netem", "plan"),           # link engines, link state, the orbit planner and its exporters
    ("compose", "plan"),
    ("swarm.mesh", "plan"), ("swarm.dtn", "plan"), ("swarm.cfs", "plan"),  # each feature's pure planning
    ("netem.runtime", "runtime"),  # the link controller, the swarm-linkd driver, the live orbit driver
    ("swarm.runtime", "runtime"),  # Swarm, SwarmContext, backends, add-ons and their services (mesh, dtn, cfs_image)
    ("swarm.observe", "runtime"),  # capture, events, the live view
    ("experiments", "experiments"),
    ("analysis", "analysis"),
    ("swarm.cli", "cli"),
]
RANK = {"base": 0, "spec": 1, "plan": 2, "runtime": 3, "experiments": 4, "analysis": 4, "cli": 5}

# Arrows allowed against the ranks above, each with its reason.
ALLOWED = {
    # An experiment type's entry (experiments/<type>/entry.py) names its report in analysis/.
    ("experiments", "analysis"): lambda src, dst: src.endswith(".entry"),
    # analysis reads result files with the experiments' pure parsers (raw iperf3 JSON, the app's records).
    ("analysis", "experiments"): lambda src, dst: dst in PURE_EXPERIMENT_MODULES,
}
PURE_EXPERIMENT_MODULES = {"experiments.traffic.iperf3", "experiments.traffic.muxresult", "experiments.app.parse", "experiments.dtn.parse",
                           "experiments.orbits.bundles",  # bundles judged against the contact plan
                           "experiments.orbits.model"}  # the orbits report re-plans from the stored experiment

# Imports inside functions: only these, for the CLI's start-up time (pandas, matplotlib) and the package's
# lazy `Swarm` attribute (PEP 562).
FUNCTION_LEVEL_OK = {("swarm.cli.main", "experiments.runs"), ("swarm.cli.main", "experiments"),
                     ("swarm", "swarm.runtime.swarm"),
                     # the entry point loads the CLI inside its Ctrl-C handler (issue 29, defect 6)
                     ("swarm.cli.entry", "swarm.cli.main"),
                     # `swarm orbits`: the planner, its report and the driver load numpy/pandas/matplotlib
                     ("swarm.cli.orbits", "analysis.orbits"), ("swarm.cli.orbits", "netem.orbits.planner"),
                     ("swarm.cli.orbits", "netem.spec.orbits"), ("swarm.cli.orbits", "netem.orbits.records"),
                     ("swarm.cli.orbits", "netem.runtime.orbits"),
                     # the agent's `run` starts with the standard library only (one per node at once on `up`,
                     # issue 27); it loads the protocol module only to exec the swarm app
                     ("flightsw.agent", "flightsw")}


def layer(module: str) -> str:
    """The layer of the deepest folder in LAYER_OF that holds `module`; a package's `__main__` (the `python -m`
    entry point) is the command line wherever it lives."""
    if module.rsplit(".", 1)[-1] == "__main__":
        return "cli"
    folder = module if (REPO / module.replace(".", "/")).is_dir() else module.rsplit(".", 1)[0]
    best = max((p for p, _ in LAYER_OF if folder == p or folder.startswith(p + ".")), key=len)
    return dict(LAYER_OF)[best]


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            name = ".".join(rel.parts).removesuffix(".__init__")
            out[name] = path
    return out


def project_imports(tree: ast.Module, top_level: bool) -> set[str]:
    """The project modules imported at the top of the module (`if TYPE_CHECKING:` blocks included: an import for
    annotations is a dependency all the same, and it hid a cycle of six modules), or else inside its functions."""
    if top_level:
        nodes = [n for top in tree.body for n in ([top] + (top.body + top.orelse if isinstance(top, ast.If) else []))]
    else:
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        nodes = [n for f in funcs for n in ast.walk(f)]
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n.split(".")[0] in PACKAGES}
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return {name: project_imports(ast.parse(path.read_text()), top_level=True) for name, path in modules().items()}


def test_every_module_has_a_layer():
    assert all(layer(m) in RANK for m in modules())


def test_the_layer_table_names_folders_only():
    """A module's layer follows from where it lives: the table has no entry for a single module."""
    assert [p for p, _ in LAYER_OF if not (REPO / p.replace(".", "/") / "__init__.py").is_file()] == []
    assert len({p for p, _ in LAYER_OF}) == len(LAYER_OF)


def test_imports_point_down_the_pipeline(graph):
    wrong = []
    for src, targets in graph.items():
        for dst in targets:
            ls, ld = layer(src), layer(dst)
            downward = RANK[ld] < RANK[ls] and not (ls == "analysis" and ld == "runtime")
            if ls == ld or downward or ALLOWED.get((ls, ld), lambda s, d: False)(src, dst):
                continue
            wrong.append(f"{src} ({ls}) -> {dst} ({ld})")
    assert wrong == []


def test_analysis_never_reaches_the_runtime(graph):
    def closure(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            m = todo.pop()
            for dst in graph.get(m, ()):
                if dst not in seen:
                    seen.add(dst)
                    todo.append(dst)
        return seen

    reached = {src: sorted(d for d in closure(src) if d in graph and layer(d) in ("runtime", "cli"))
               for src in graph if layer(src) == "analysis"}
    assert {k: v for k, v in reached.items() if v} == {}


def test_no_import_cycles(graph):
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == []


def test_imports_inside_functions_only_where_said(graph):
    inside = {(name, dst) for name, path in modules().items()
              for dst in project_imports(ast.parse(path.read_text()), top_level=False)}
    assert inside - FUNCTION_LEVEL_OK == set()


def test_the_link_model_names_every_engine_of_the_registry():
    from netem.engines import ENGINES
    from netem.spec.links import ENGINE_NAMES

    assert set(ENGINE_NAMES) == set(ENGINES)


SERVICES = ("netem", "swarm.runtime", "swarm.mesh", "swarm.dtn", "swarm.cfs", "compose")


def test_no_service_imports_the_swarm_facade(graph):
    """Services receive a SwarmContext (swarm.runtime.context); only the CLI, the experiments and the package's
    lazy attribute use the `Swarm` facade, so no service can call back into it."""
    users = sorted(src for src, targets in graph.items() if "swarm.runtime.swarm" in targets
                   and src != "swarm.runtime.swarm" and src.startswith(SERVICES))
    assert users == []


def test_no_module_outside_the_backends_compares_a_backend_name():
    """What differs between backends is asked of their traits (swarm.caps.BackendTraits) or done by their own
    methods (install_binary, start_daemon(at_hop=), describe_hosts, ...), never decided by comparing names."""
    import re

    from swarm.runtime.backends import REGISTRY

    names = "|".join(REGISTRY)
    compares = re.compile(rf"""backend\w*(\.name)?\s*(==|!=|\bnot in\b|\bin\b)\s*[(\[{{]?[^\n]*["']({names})["']"""
                          rf"""|["']({names})["']\s*(==|!=)\s*[\w.]*backend""")
    # the spec's own `backend:` field, validated against its `hosts:` section (input, not a running backend)
    exempt = {"swarm.spec.model"}
    hits = [f"{name}:{i}: {line.strip()}" for name, path in modules().items()
            if not name.startswith("swarm.runtime.backends") and name not in exempt
            for i, line in enumerate(path.read_text().splitlines(), 1) if compares.search(line)]
    assert hits == []


def test_every_backend_declares_its_traits():
    from swarm.caps import BackendTraits
    from swarm.runtime.backends import REGISTRY

    assert {name: isinstance(getattr(cls, "traits", None), BackendTraits) for name, cls in REGISTRY.items()} == \
        {name: True for name in REGISTRY}

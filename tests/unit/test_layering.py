"""The layering test: every module's imports point down the pipeline

    cli -> experiments -> runtime -> compose / netem planners -> spec -> base

and analysis reads result files (and the pure parsers of experiments), never the runtime. It reads the
imports of every module of the five packages with `ast` and checks them against the table below, so the
shape the README's map describes stays the shape of the code.
"""
from __future__ import annotations

import ast
import re
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
    # DTN agent adapters (the registry, base interface, one package per agent): the swarm spec checks `dtn.agent`
    # and its CLA against the registry, so they sit with the spec and import only spec sections
    ("swarm.dtn.agents", "spec"),
    ("netem.runtime", "runtime"),  # the link controller, the live orbit driver
    ("netem.engines.drivers", "runtime"),  # each link engine's driver: applies its plans to a running swarm
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
    # The DTN agent adapters give an agent the run's contact plan (Agent.load_contacts): its model and ION's own load
    # rules live in swarm.dtn.contacts, pure and importing nothing of the project, beside the orbit exporter that
    # also uses them.
    ("spec", "plan"): lambda src, dst: src.startswith("swarm.dtn.agents") and dst == "swarm.dtn.contacts",
}
PURE_EXPERIMENT_MODULES = {"experiments.traffic.tools",  # the traffic tools' registry: their records read back
                           "experiments.app.parse", "experiments.dtn.parse",
                           "experiments.orbits.bundles",  # bundles judged against the contact plan
                           "experiments.orbits.model"}  # the orbits report re-plans from the stored experiment

# Imports inside functions: only these, for the CLI's start-up time (pandas, matplotlib) and the package's
# lazy `Swarm` attribute (PEP 562).
FUNCTION_LEVEL_OK = {("swarm.cli.experiments", "experiments.runs"), ("swarm.cli.experiments", "experiments"),
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


def test_no_module_keeps_state_in_context_variables_or_hook_lists():
    """What a swarm's services need (its owner, hooks before `down`, who caused an event) is handed to them as
    arguments or held by the SwarmContext, not set in process-wide variables a reader cannot see being passed."""
    hook_list = re.compile(r"^[A-Z_]+\s*:\s*list\[Callable")
    found = [f"{name}:{i}: {line.strip()}" for name, path in modules().items()
             for i, line in enumerate(path.read_text().splitlines(), 1)
             if "ContextVar" in line or hook_list.search(line)]
    assert found == []


def name_comparisons(subject: str, names) -> re.Pattern:
    """A line comparing the name of a `subject` (backend, engine) with one of `names`: `subject.name == "x"`,
    `subject in ("x", ...)`, `"x" != subject.name`, `getattr(subject, "name", "") == "x"`."""
    alts = "|".join(names)
    return re.compile(rf"""{subject}\w*(\.name)?\s*(==|!=|\bnot in\b|\bin\b)\s*[(\[{{]?[^\n]*["']({alts})["']"""
                      rf"""|["']({alts})["']\s*(==|!=)\s*[\w.]*{subject}"""
                      rf"""|{subject}["'][^\n]*["']name["'][^\n]*(==|!=|\bnot in\b|\bin\b)\s*[(\[{{]?\s*["']({alts})["']""")


def comparing_lines(pattern: re.Pattern, outside: str, exempt: set[str] = frozenset()) -> list[str]:
    """Lines of the packages' modules (outside the package `outside`, and not in `exempt`) matching `pattern`."""
    return [f"{name}:{i}: {line.strip()}" for name, path in modules().items()
            if not name.startswith(outside) and name not in exempt
            for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]


def test_no_module_outside_the_backends_compares_a_backend_name():
    """What differs between backends is asked of their traits (swarm.caps.BackendTraits) or done by their own
    methods (install_binary, start_daemon(at_hop=), describe_hosts, ...), never decided by comparing names."""
    from swarm.runtime.backends import REGISTRY

    assert comparing_lines(name_comparisons("backend", REGISTRY), "swarm.runtime.backends") == []


def test_no_module_outside_the_engines_compares_an_engine_name():
    """What differs between link engines is asked of their traits (netem.engines.base.Engine: schedules,
    plans_ahead, owns_nft_table, runs_processes) or done by their drivers (netem.engines.drivers: hold, apply,
    placement, notes), never decided by comparing names outside netem/engines/."""
    from netem.engines import ENGINES

    assert comparing_lines(name_comparisons("engine", ENGINES), "netem.engines") == []


def test_the_name_rules_see_the_comparisons_they_forbid():
    """The rules above match the forms of comparison they forbid (so an empty list means none, not a blind regex),
    and not a record's key that happens to be an engine's name."""
    from netem.engines import ENGINES

    engine = name_comparisons("engine", ENGINES)
    for line in ('if self.engine.name == "userspace":', 'if ctl.engine.name != "nft":', 'engine == "nft"',
                 'skip = engine.name in ("userspace", "nft")', '"netem" == self.engine.name',
                 'if getattr(getattr(self.ctl, "engine", None), "name", "") != "userspace":'):
        assert engine.search(line), line
    for line in ('if not engine.plans_ahead or "nft" not in rec:', 'self.counts = {"nft": 0}',
                 'engine_names = ("netem", "userspace", "nft")'):
        assert not engine.search(line), line
    assert name_comparisons("backend", ["netns"]).search('if swarm.backend.name == "netns":')


def test_every_backend_declares_its_traits():
    from swarm.caps import BackendTraits
    from swarm.runtime.backends import REGISTRY

    assert {name: isinstance(getattr(cls, "traits", None), BackendTraits) for name, cls in REGISTRY.items()} == \
        {name: True for name in REGISTRY}


def agent_name_uses(source: str, names: set[str], keys: int = 1) -> list[int]:
    """Lines where a DTN agent's name (a string literal) is compared (==, !=, in, not in, also inside a tuple,
    list or set on the right of `in`) or used as a dict key (`keys`: in a dict with at least that many such keys,
    i.e. a registry of its own where one name as a key is a record's field)."""
    def named(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
            parts += [e for c in node.comparators if isinstance(c, (ast.Tuple, ast.List, ast.Set)) for e in c.elts]
            if any(named(p) for p in parts):
                hits.append(node.lineno)
        elif isinstance(node, ast.Dict) and sum(named(k) for k in node.keys) >= keys:
            hits.append(node.lineno)
    return hits


def test_the_agent_name_rule_sees_comparisons_keys_and_membership():
    snippet = ('a = piece.agent == "dtn7"\nb = "dtn7" != x\nc = x in ("dtn7", "hardy")\nd = {"dtn7": 1}\n'
               'e = x not in ["dtn7"]\nf = "dtn7-rs"\ng = {"agent": "dtn7"}\n')
    assert agent_name_uses(snippet, {"dtn7"}) == [1, 2, 3, 4, 5]


def test_no_module_outside_the_agents_compares_an_agent_name():
    """What differs between DTN agents is asked of their adapters (swarm.dtn.agents.base.Agent), never decided by
    comparing `dtn.agent` with a name, as for backends."""
    from swarm.dtn.agents import REGISTRY

    hits = [f"{name}:{line}" for name, path in modules().items() if not name.startswith("swarm.dtn.agents")
            for line in agent_name_uses(path.read_text(), set(REGISTRY))]
    assert hits == []


def test_the_spec_takes_its_agents_and_their_clas_from_the_registry():
    """No list of agent names in the spec: `dtn.agent` and the CLA it carries are checked against the registry."""
    import swarm.spec.dtn as spec_dtn
    from swarm.dtn.agents import REGISTRY

    source = Path(spec_dtn.__file__).read_text()
    assert not hasattr(spec_dtn, "AGENTS") and agent_name_uses(source, set(REGISTRY)) == []


def test_no_module_outside_the_traffic_tools_compares_a_tool_name():
    """What differs between traffic tools (iperf3, mux) is asked of the tool (experiments.traffic.tools.base.Tool:
    uses_options, stamps_start, owns_raw, read_raw) or done by its runner (tools/runners.py), never decided by
    comparing `engine:` with a name, nor by a dict keyed by the tools' names outside experiments/traffic/tools/.
    flightsw/ holds the tools' in-node programs (agent.py starts iperf3 and knows its process by name,
    trafficd.py is the mux engine), which run with the standard library only and cannot import the registry;
    a host fact naming one program's version (`"iperf3": caps.iperf3_version`) is a record's field."""
    from experiments.traffic.tools import TOOLS

    hits = [f"{name}:{line}" for name, path in modules().items()
            if not name.startswith(("experiments.traffic.tools", "flightsw"))
            for line in agent_name_uses(path.read_text(), set(TOOLS), keys=2)]
    assert hits == []


def test_the_tool_name_rule_sees_comparisons_and_registries_of_its_own():
    snippet = ('a = exp.engine == "mux"\nb = doc.get("engine") != "iperf3"\nc = RUNNERS = {"iperf3": A, "mux": B}\n'
               'd = {"iperf3": caps.iperf3_version, "docker": v}\ne = engine in ("mux",)\n')
    assert agent_name_uses(snippet, {"iperf3", "mux"}, keys=2) == [1, 2, 3, 5]


def test_the_experiment_takes_its_tools_from_the_registry():
    """`engine:` is checked against experiments.traffic.tools.TOOLS, not a list of names of the model's own."""
    import experiments.traffic.model as model
    from experiments.traffic.tools import TOOLS
    from experiments.traffic.tools.runners import RUNNERS

    assert agent_name_uses(Path(model.__file__).read_text(), set(TOOLS)) == []
    assert set(RUNNERS) == set(TOOLS) and all(RUNNERS[n].tool.name == n for n in TOOLS)


def test_no_module_outside_the_mesh_implementations_compares_an_implementation_name():
    """What differs between batman-adv and batmand is asked of the implementation
    (swarm.mesh.implementations.base.MeshImplementation: unavailable, start_plan, routes, originators, how),
    never decided by comparing `mesh.implementation` with a name outside swarm/mesh/implementations/."""
    from swarm.mesh.implementations import IMPLEMENTATIONS

    hits = [f"{name}:{line}" for name, path in modules().items() if not name.startswith("swarm.mesh.implementations")
            for line in agent_name_uses(path.read_text(), set(IMPLEMENTATIONS))]
    assert hits == []


def test_the_mesh_spec_names_every_implementation_of_the_registry():
    """`mesh.implementation` offers `auto` and exactly the registry's implementations (the spec names them instead
    of importing the registry, which plans from the spec, as netem/spec/links.py names the link engines)."""
    from typing import get_args

    from swarm.mesh.implementations import IMPLEMENTATIONS, PREFERENCE
    from swarm.spec.mesh import MeshSpec

    assert get_args(MeshSpec.model_fields["implementation"].annotation) == ("auto", *IMPLEMENTATIONS)
    assert sorted(PREFERENCE) == sorted(IMPLEMENTATIONS)

#!/usr/bin/env python3
"""Architecture figures (issue 25) of a checkout, as JSON: modules and lines, the largest modules, import cycles
(TYPE_CHECKING imports counted), entries of the layering table that name a single module instead of a folder,
modules importing the Swarm facade (and which of them are services), reaches through a facade into its
backend/runner, backend-name comparisons outside backends/, lines over 120 characters, and the functions radon
rates above cyclomatic complexity 20 (when radon is installed: it is in the test extras).

usage: python bench/arch_metrics.py [REPO]     (REPO: a checkout, default the current directory)

Repeated blocks are counted apart, with the `duplicates` tool over the checkout (see the report of issue 25).
"""
import ast
import json
import re
import sys
from pathlib import Path

REPO = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
PACKAGES = ("swarm", "netem", "compose", "experiments", "analysis")
SERVICES = ("netem", "swarm.runtime", "swarm.mesh", "swarm.dtn", "swarm.cfs", "swarm.observe", "compose")
FACADE = "swarm.runtime.swarm"


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            if "bench" in rel.parts:  # experiments/bench/ before it moved to the top-level bench/
                continue
            out[".".join(rel.parts).removesuffix(".__init__")] = path
    return out


def imports(name: str, tree: ast.Module) -> set[str]:
    """Project modules imported at the top (if-blocks such as TYPE_CHECKING included; relative ones resolved)."""
    nodes = [n for top in tree.body for n in ([top] + (top.body + top.orelse if isinstance(top, ast.If) else []))]
    out = set()
    for n in nodes:
        if isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                parts = name.split(".")[:-n.level] if not MODS[name].name == "__init__.py" else \
                    name.split(".")[:len(name.split(".")) - n.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in n.names]
        elif isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        else:
            continue
        out |= {x for x in names if x.split(".")[0] in PACKAGES}
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def layer_table_single_modules() -> list[str]:
    """Entries of tests/unit/test_layering.py's LAYER_OF that name a module, not a folder (package)."""
    test = REPO / "tests" / "unit" / "test_layering.py"
    if not test.exists():
        return []
    for node in ast.parse(test.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "LAYER_OF" for t in node.targets):
            entries = ast.literal_eval(node.value)
            return [p for p, _ in entries if not (REPO / p.replace(".", "/") / "__init__.py").exists()]
    return []


def over_complexity(limit: int = 20) -> list[str] | str:
    try:
        from radon.complexity import cc_visit
        from radon.visitors import Function
    except ImportError:
        return "radon not installed"
    out = []
    for path in MODS.values():
        for f in cc_visit(path.read_text()):  # functions and methods (each once), and classes
            if isinstance(f, Function) and f.complexity > limit:
                out.append(f"{path.relative_to(REPO)}:{(f.classname + '.') if f.classname else ''}{f.name} {f.complexity}")
    return sorted(out)


MODS = modules()
texts = {m: p.read_text() for m, p in MODS.items()}
graph = {m: {d for d in imports(m, ast.parse(texts[m])) if d in MODS and d != m} for m in MODS}
lines = {m: len(t.splitlines()) for m, t in texts.items()}
facade_users = sorted(m for m in MODS if FACADE in graph[m] or re.search(r"from swarm\.runtime\.swarm import [^\n]*\bSwarm\b", texts[m]))
facade_users = [m for m in facade_users if m != FACADE]
reach = r"\bswarm\.(backend|runner)\."
names = "compose|netns|swarm"  # the backends' names (as tests/unit/test_layering.py matches them)
compares = re.compile(rf"""backend\w*(\.name)?\s*(==|!=|\bnot in\b|\bin\b)\s*[(\[{{]?[^\n]*["']({names})["']"""
                      rf"""|["']({names})["']\s*(==|!=)\s*[\w.]*backend""")
name_cmp = [f"{m}:{i}" for m, t in texts.items() if ".backends" not in m
            for i, line in enumerate(t.splitlines(), 1) if compares.search(line)]
print(json.dumps({
    "modules": len(MODS), "total_lines": sum(lines.values()),
    "largest": sorted(lines.items(), key=lambda kv: -kv[1])[:5],
    "modules_over_500": sum(1 for v in lines.values() if v >= 500),
    "cycles_incl_type_checking": cycles(graph),
    "layer_table_single_module_entries": layer_table_single_modules(),
    "modules_importing_Swarm": facade_users,
    "services_importing_Swarm": [m for m in facade_users if m.startswith(SERVICES)],
    # `swarm.backend.` / `swarm.runner.`: in a facade user it reaches through the Swarm; in a service `swarm` is
    # the SwarmContext it was handed (counted apart: the context is meant to be read)
    "backend_runner_reaches_via_facade": sum(len(re.findall(reach, texts[m])) for m in facade_users),
    "backend_runner_reads_of_context": sum(len(re.findall(reach, texts[m])) for m in MODS
                                           if m not in facade_users and m != FACADE),
    "backend_name_comparisons_outside_backends": name_cmp,  # swarm.spec.model: the spec's own `backend:` field
    "lines_over_120": sum(1 for t in texts.values() for line in t.splitlines() if len(line) > 120),
    "functions_over_complexity_20_radon": over_complexity(),
}, indent=1))

#!/usr/bin/env python3
"""Architecture figures (issue 25): modules, lines, the largest modules, import cycles counting TYPE_CHECKING
imports, modules importing the Swarm facade, backend-name comparisons outside backends/, lines over 120.

usage: python bench/arch_metrics.py [REPO]     (REPO: a checkout, default the current directory; JSON out)

Complexity is measured apart: `ruff check --select C901` (mccabe, the limit in pyproject.toml) and
`radon cc -s -n D swarm netem compose experiments analysis` (radon also counts boolean operators).
"""
import ast, re, sys, json
from pathlib import Path
REPO = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
PK = ("swarm", "netem", "compose", "experiments", "analysis")
mods = {}
for pkg in PK:
    for p in sorted((REPO / pkg).rglob("*.py")):
        rel = p.relative_to(REPO).with_suffix("")
        if "bench" in rel.parts: continue
        mods[".".join(rel.parts).removesuffix(".__init__")] = p
def imports(tree):
    out = set()
    nodes = list(tree.body)
    for n in tree.body:
        if isinstance(n, ast.If):
            nodes += n.body + n.orelse
    for n in nodes:
        if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            names = [n.module] + [f"{n.module}.{a.name}" for a in n.names]
        elif isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        else: continue
        out |= {x for x in names if x.split(".")[0] in PK}
    return out
g = {m: {d for d in imports(ast.parse(p.read_text())) if d in mods and d != m} for m, p in mods.items()}
idx, low, st, on, cyc = {}, {}, [], set(), []
sys.setrecursionlimit(10000)
def visit(v):
    idx[v] = low[v] = len(idx); st.append(v); on.add(v)
    for w in g[v]:
        if w not in idx: visit(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        c = []
        while True:
            w = st.pop(); on.discard(w); c.append(w)
            if w == v: break
        if len(c) > 1: cyc.append(sorted(c))
for v in g:
    if v not in idx: visit(v)
lines = {m: len(p.read_text().splitlines()) for m, p in mods.items()}
big = sorted(lines.items(), key=lambda kv: -kv[1])[:5]
imp_swarm = sorted(m for m, p in mods.items() if re.search(r"from swarm\.runtime\.swarm import [^\n]*\bSwarm\b", p.read_text()) and m != "swarm.runtime.swarm")
backref = sum(len(re.findall(r"\bswarm\.(backend|runner)\.", p.read_text())) for m, p in mods.items() if m != "swarm.runtime.swarm")
namecmp = [f"{m}:{i}" for m, p in mods.items() if ".backends" not in m for i, l in enumerate(p.read_text().splitlines(), 1)
           if re.search(r"""(backend(\.name)?|backend_name|\.backend)\s*(==|!=|in|not in)\s*[("'{\[]""", l) or re.search(r"""["'](compose|netns|swarm)["']\s*(==|!=)\s*\w*backend""", l)]
long_lines = sum(1 for p in mods.values() for l in p.read_text().splitlines() if len(l) > 120)
print(json.dumps({"modules": len(mods), "total_lines": sum(lines.values()), "largest": big, "modules_over_500": sum(1 for v in lines.values() if v >= 500),
                  "cycles_incl_type_checking": cyc, "modules_importing_Swarm": imp_swarm, "n_importing_Swarm": len(imp_swarm),
                  "swarm.backend./swarm.runner. outside swarm.py": backref, "backend_name_comparisons_outside_backends": namecmp,
                  "lines_over_120": long_lines}, indent=1))

"""`swarm probe`'s answer for a person: what this host can run, in a few lines, from the probe's facts (pure).

The facts themselves (every capability, versions, paths) stay available as JSON (`swarm probe --json`) for
scripts; this says what they mean: which backends start, which link engines apply which conditions (and which
one `links:` uses), which mesh implementation runs, which DTN agents are built.
"""
from __future__ import annotations


def _yes(ok: bool, why_not: str) -> str:
    return "yes" if ok else f"no ({why_not})"


def _backends(f: dict) -> str:
    compose = " ".join(f.get("compose") or [])
    netns = _yes(f["root"] and f["netns"], "needs root" if not f["root"] else "network namespaces do not work")
    comp = (f"yes ({compose} {f['compose_version']})" if f["docker"] and compose else
            "no (no Docker daemon answers)" if not f["docker"] else "no (no docker compose / docker-compose)")
    multi = "yes (list the hosts in the spec)" if f["docker"] else "no (no Docker daemon answers)"
    return f"netns {netns}; compose {comp}; swarm (several hosts) {multi}"


def _engines(f: dict) -> str:
    parts = []
    for name, e in f.get("link_engines", {}).items():
        if not e["available"]:
            parts.append(f"{name} no (lacks {', '.join(e['lacks'])})")
            continue
        what = "every condition" if not e["lacks"] else ("no delay" if not e["delay"] else
                                                        f"no {', '.join(e['unsupported'])}")
        default = ", the default" if name == f.get("impairment_engine") else ""
        parts.append(f"{name} yes ({what}{default})")
    return "; ".join(parts) or "none"


def _dtn(f: dict) -> str:
    parts = [f"{name} {'built' if path else 'not built (built at the first DTN up, or make setup)'}"
             for name, path in f.get("dtn_agents", {}).items()]
    parts.append(f"cla: ltp {'built' if f.get('ltpcla') else 'not built (make ltpcla)'}")
    return "; ".join(parts)


def probe_verdict(f: dict) -> list[str]:
    """Lines saying what this host can run, from the facts `swarm probe --json` prints."""
    mesh = f.get("mesh_batman") or "none"
    lines = [
        f"backends      {_backends(f)}",
        f"link engines  {_engines(f)}",
        f"mesh          {mesh} (batman-adv kernel module: {'yes' if f['batman_adv'] else 'no'})",
        f"DTN agents    {_dtn(f)}",
        f"traffic       iperf3 {_yes(bool(f['iperf3_version']), 'not installed')}; "
        f"ddsperf {_yes(f['ddsperf'], 'not installed')}",
    ]
    if f.get("compose_note"):
        lines.append(f"compose       {f['compose_note']}")
    if not f["root"]:
        lines.append("not root: netns swarms, host link engines and kernel features need root")
    lines.append("every fact, for scripts: swarm probe --json")
    return lines

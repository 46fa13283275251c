"""`swarm probe` and `swarm schema`: what this host can run, and the spec's JSON Schema."""
from __future__ import annotations

import json
from pathlib import Path

import click

from netem.engines import ENGINES, choose_engine
from netem.engines.drivers import engine_for
from swarm.caps import Capabilities
from swarm.cli.console import out
from swarm.cli.verdict import probe_verdict
from swarm.dtn.agents import REGISTRY as AGENTS
from swarm.mesh.implementations import choose_implementation
from swarm.runtime.backends import REGISTRY
from swarm.runtime.backends.compose import ComposeBackend
from swarm.runtime.dtn_image import built_programs, ltpcla_built
from swarm.runtime.probe import capabilities
from swarm.runtime.runner import Runner
from swarm.spec.mesh import MeshSpec
from swarm.spec.model import json_schema


def register(cli: click.Group) -> None:
    """Add probe and schema to the `swarm` command group."""
    for command in (probe, schema):
        cli.add_command(command)


@click.command()
def schema() -> None:
    """Print the JSON Schema of the swarm spec."""
    click.echo(json.dumps(json_schema(), indent=1))


BRIDGE_NF_SYSCTL = "/proc/sys/net/bridge/bridge-nf-call-iptables"


def engine_placement_facts(caps: Capabilities) -> dict:
    """Per one-host backend: the engine `links:` runs with, and where the userspace engine runs there; and the
    host's net.bridge.bridge-nf-call-iptables (the compose host engine needs 1; Docker sets it for its bridges,
    and the engine sets it, recording that in the swarm's state, where it is not)."""
    facts: dict = {}
    for name in ("netns", "compose"):
        backend = REGISTRY[name](Runner(), caps, Path("."))
        hop = backend.hop() if caps.bridge_nf else None
        facts[f"impairment_engine_{name}"] = engine_for(caps, backend).name
        facts[f"userspace_engine_{name}"] = hop.placement if hop else ("inside each node, only when pinned (the binary copied in)"
                                                    if backend.traits.containers else "in each node's namespace")
    try:
        facts["host_bridge_nf_call_iptables"] = Path(BRIDGE_NF_SYSCTL).read_text().strip()
    except OSError:
        facts["host_bridge_nf_call_iptables"] = "absent (br_netfilter not loaded; Docker loads it)"
    return facts


def link_engine_facts(caps: Capabilities) -> dict:
    """Per link engine, in the order the probe prefers them: usable here, what it lacks, whether it can delay."""
    facts = {}
    for name, cls in ENGINES.items():
        engine = cls(caps)
        needs = engine.needs()
        facts[name] = {"available": engine.available(), "lacks": sorted(set(needs.values())),
                       "unsupported": sorted(needs), "delay": "delay" not in needs}
    return facts


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Every fact the probe found, as JSON (for scripts).")
def probe(as_json: bool) -> None:
    """What this host can run: backends, link engines, mesh, DTN agents built (--json: every fact)."""
    caps = capabilities()
    facts = caps.as_dict()
    facts["mesh_batman"] = choose_implementation(MeshSpec(protocol="batman"), caps, ComposeBackend.traits)  # what `mesh: batman` runs
    facts["impairment_engine"] = choose_engine(caps).name  # what `links:` runs with on netns
    facts.update(engine_placement_facts(caps))  # per backend, and where the userspace engine runs
    facts["link_engines"] = link_engine_facts(caps)
    facts["dtn_agents"] = {name: str(built_programs(agent.install) or "") for name, agent in AGENTS.items()}
    facts["ltpcla"] = str(ltpcla_built() or "")
    if as_json:
        click.echo(json.dumps(facts, indent=1))
        return
    for line in probe_verdict(facts):
        out.print(line, markup=False, highlight=False, soft_wrap=True)

"""ION's adapter, pure parts: the configuration a node gets (golden), the user's file split per admin program,
span sizing, what is read back from ION's tools, and the install-tree checks."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import golden
from swarm.cli.dtn import config_text
from swarm.dtn.agents import REGISTRY, check_agent
from swarm.dtn.agents.base import AgentPlan, LinkView, Peer
from swarm.dtn.agents.ion.agent import PROGRAMS, describe_sent, parse_count, parse_stats, plan_peers, readiness
from swarm.dtn.agents.ion.plan import IonConfigError, plan_ion, span_sessions, split_user_config
from swarm.errors import SpecError
from swarm.runtime.dtn_image import check_install_tree, tree_image_tag
from swarm.spec.dtn import DtnSpec
from swarm.spec.model import spec_from_dict

ION = REGISTRY["ion"]
USER = """# my own lines
## begin bpadmin
a endpoint ipn:1.7 q
## end bpadmin

## begin ionadmin
m production 1000000
## end ionadmin
"""
LINKS = {("sat01", "sat02"): LinkView(0.5, 10_000_000), ("sat02", "sat01"): LinkView(0.5, 10_000_000),
         ("sat01", "ground"): LinkView(2.0, 100_000_000), ("ground", "sat01"): LinkView(2.0, 1_000_000)}


def link_of(a: str, b: str) -> LinkView:
    return LINKS.get((a, b), LinkView())


def sat01(piece: DtnSpec, user: str = "") -> AgentPlan:
    peers = [Peer("sat02", "10.9.0.3", 2), Peer("ground", "10.9.0.4", 3)]
    return plan_ion("sat01", 1, "10.9.0.2", piece, peers, "/var/lib/swarm-dtn", link_of, user, "/home/me/my.rc")


def test_golden_ltp_node_with_a_static_route_and_the_users_lines():
    piece = DtnSpec(agent="ion", cla="ltp", routing="static", routes=[{"to": "*", "via": "ground"}],
                    storage={"limit": "64m"})
    text = config_text(sat01(piece, USER))
    assert text == golden("ion_sat01_ltp.txt", text)


def test_golden_udp_node():
    text = config_text(sat01(DtnSpec(agent="ion", cla="udp")))
    assert text == golden("ion_sat01_udp.txt", text)


def test_each_peer_has_one_duct_on_its_ipn_plan_and_its_dtn_name_goes_through_it():
    bprc = sat01(DtnSpec(agent="ion", cla="ltp", ltp={"rate": "1Mbit"})).files["node.bprc"].splitlines()
    assert [ln for ln in bprc if ln.startswith("a planduct")] == ["a planduct ipn:2.0 ltp 2", "a planduct ipn:3.0 ltp 3"]
    assert "g plan dtn://sat02/ ipn:2.0" in bprc and "g plan dtn://ground/ ipn:3.0" in bprc


def test_spans_follow_each_links_rate_and_round_trip():
    ltprc = sat01(DtnSpec(agent="ion", cla="ltp")).files["node.ltprc"].splitlines()
    # sat02: 10 Mbit/s x (1 s + 2 s) / 1 MB blocks = 3.75 -> 4 + 1; ground: 100 Mbit/s x (4 s + 2 s) / 1 MB = 75 -> 76
    assert "a span 2 5 5 1360 1000000 1 'udplso 10.9.0.3:1113'" in ltprc
    assert "a span 3 76 76 1360 1000000 1 'udplso 10.9.0.4:1113'" in ltprc
    assert ltprc[1] == "1 81" and ltprc[-1] == "s 'udplsi 10.9.0.2:1113'"
    assert span_sessions(1e3, 0) == 2 and span_sessions(1e12, 10) == 1000


def test_contacts_carry_each_directions_rate_and_ranges_round_up_the_light_time():
    ionrc = sat01(DtnSpec(agent="ion", cla="ltp")).files["node.ionrc"]
    assert "a contact +0 +2592000 1 3 12500000\n" in ionrc and "a contact +0 +2592000 3 1 125000\n" in ionrc
    assert "a range +0 +2592000 1 3 2\n" in ionrc and "a range +0 +2592000 1 2 1\n" in ionrc


def test_ltp_without_a_rate_names_the_field():
    with pytest.raises(ValueError, match=r"^dtn.ltp.rate: link sat01->x has no rate"):
        plan_ion("sat01", 1, "10.9.0.2", DtnSpec(agent="ion", cla="ltp"), [Peer("x", "10.9.0.9", 9)], "/w",
                 lambda a, b: LinkView())


def test_users_file_goes_to_each_program_with_its_line_numbers():
    assert split_user_config(USER, "f") == {"bpadmin": [(3, "a endpoint ipn:1.7 q")],
                                            "ionadmin": [(7, "m production 1000000")]}
    files = sat01(DtnSpec(agent="ion", cla="ltp", ltp={"rate": "1Mbit"}), USER).files
    assert files["user.bpadmin"] == "3\ta endpoint ipn:1.7 q\n"
    assert "for admin in bpadmin ionadmin; do" in files["start.sh"] and "/home/me/my.rc: line $n" in files["start.sh"]


@pytest.mark.parametrize("text, message", [
    ("a endpoint ipn:1.7 q\n", "line 1: outside any '## begin <program>'"),
    ("## begin hdtnadmin\n", "line 1: unknown program 'hdtnadmin'"),
    ("## begin bpadmin\nx\n## begin ltpadmin\n", "line 3: '## begin ltpadmin' inside the bpadmin section"),
    ("## begin bpadmin\nx\n", "line 1: '## begin bpadmin' is never ended"),
    ("## end bpadmin\n", "line 1: '## end bpadmin' without"),
    ("## begin bpadmin\na plan 'x\n## end bpadmin\n", "line 2: unbalanced quote"),
])
def test_a_malformed_users_file_is_one_line_naming_file_and_line(text, message):
    with pytest.raises(IonConfigError) as err:
        split_user_config(text, "/home/me/my.rc")
    assert str(err.value).startswith("dtn.config /home/me/my.rc: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_tcp_is_not_offered_ion_speaks_tcpclv3():
    with pytest.raises(ValueError, match=r"^dtn.cla 'tcp': agent 'ion' does not carry it"):
        check_agent(DtnSpec(agent="ion", cla="tcp"))


def test_install_and_config_are_for_agents_the_user_builds():
    with pytest.raises(SpecError, match=r"dtn.install '/opt/x': agent 'dtn7' is built by the framework"):
        spec_from_dict({"name": "x", "nodes": 2, "defaults": {"dtn": {"install": "/opt/x"}}})
    spec = spec_from_dict({"name": "x", "nodes": 2, "defaults": {"dtn": {"agent": "ion", "cla": "ltp",
                                                                         "install": "rel/ion"}}})
    assert spec.defaults.dtn.install == os.path.abspath("rel/ion")


def test_what_ions_tools_say_is_read_back():
    listing = (": ipn:1.1  -1\trule: q  script: \ndtn://sat01/in  -1\trule: q  script: \n"
               ": dtn://sat02/\tpid: 265 xmit rate: 0\nipn:2.0\tpid: 266 xmit rate: 0\n")
    assert plan_peers(listing) == ["sat02"]
    plan = AgentPlan(node="sat01", argv=[], workdir="/w", expected_peers=("sat02",))
    assert readiness(plan, listing) is None
    assert readiness(AgentPlan(node="sat01", argv=[], workdir="/w", expected_peers=("sat03",)), listing) == \
        "plans missing: sat03"
    assert readiness(AgentPlan(node="sat09", argv=[], workdir="/w"), listing) == "endpoint dtn://sat09/in not listed yet"
    stats = ("[2026/11/26-09:51:17] [x] src from 1970/01/01-00:00:00 to 2026/11/26-09:51:17: (0) 0 0 (1) 1 10 (2) 0 0 (+) 1 10\n"
             "[2026/11/26-09:51:17] [x] dlv from 1970/01/01-00:00:00 to 2026/11/26-09:51:17: (0) 0 0 (1) 3 30 (2) 0 0 (+) 3 30\n")
    assert parse_stats(stats) == {"src": 1, "dlv": 3}
    assert parse_count("Reporting count of all bundles.\n\nReport count is 4.") == 4 and parse_count("") == 0
    assert describe_sent("dtn://sat01/src 1795686899 b.x\n", "dtn://sat03/in", 20) == \
        "dtn://sat01/src -> dtn://sat03/in at 1795686899 (20 bytes, spool/b.x)"


def make_tree(root: Path, skip: str = "") -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    for p in PROGRAMS:
        if p != skip:
            (root / "bin" / p).write_text("#!/bin/sh\n")
            (root / "bin" / p).chmod(0o755)
    for lib in ION.install.libraries:
        if lib != skip:
            (root / "lib" / f"{lib}.0").write_text("")
    return root


def test_install_tree_checks_name_what_is_missing(tmp_path):
    assert check_install_tree(ION.install, str(make_tree(tmp_path / "ok")), "ION") == tmp_path / "ok"
    with pytest.raises(SpecError, match=r"^dtn.install: ION is built by you; .*SWARM_ION_INSTALL"):
        check_install_tree(ION.install, None, "ION")
    with pytest.raises(SpecError, match=r"^dtn.install '.*/none': no such folder$"):
        check_install_tree(ION.install, str(tmp_path / "none"), "ION")
    with pytest.raises(SpecError, match=r"^dtn.install '.*/nobp': bin/bpadmin is missing"):
        check_install_tree(ION.install, str(make_tree(tmp_path / "nobp", "bpadmin")), "ION")
    with pytest.raises(SpecError, match=r"^dtn.install '.*/noltp': lib/libltp.so is missing"):
        check_install_tree(ION.install, str(make_tree(tmp_path / "noltp", "libltp.so")), "ION")


def test_the_image_tag_follows_the_trees_content(tmp_path):
    root = make_tree(tmp_path / "t")
    repo = Path(__file__).resolve().parents[2]
    first = tree_image_tag(repo, "swarm-emu/node:x", root, ION.install)
    assert first == tree_image_tag(repo, "swarm-emu/node:x", root, ION.install) and first.startswith("swarm-emu/ion:")
    (root / "bin" / "bpadmin").write_text("#!/bin/sh\n# rebuilt\n")
    assert tree_image_tag(repo, "swarm-emu/node:x", root, ION.install) != first
    assert tree_image_tag(repo, "swarm-emu/node:y", root, ION.install) != first


@pytest.mark.parametrize("spec, env, needle", [
    ("backend: netns\ndefaults: {dtn: {agent: ion, cla: ltp, ltp: {rate: 1Mbit}}}\n", {"SWARM_ION_INSTALL": "/x"},
     "dtn.agent 'ion': needs a container backend (compose or swarm): each ION node needs its own UTS name"),
    ("backend: compose\ndefaults: {dtn: {agent: ion, cla: ltp, ltp: {rate: 1Mbit}}}\n", {"SWARM_ION_INSTALL": ""},
     "dtn.install: ION (the user's build) is built by you; give the install prefix of your build (dtn.install, or "
     "$SWARM_ION_INSTALL)"),
    ("backend: compose\ndefaults: {dtn: {agent: ion, cla: ltp, ltp: {rate: 1Mbit}, install: /nonexistent/ion}}\n", {},
     "dtn.install '/nonexistent/ion': no such folder"),
    ("backend: compose\ndefaults: {dtn: {agent: ion, cla: tcp}}\n", {},
     "dtn.cla 'tcp': agent 'ion' does not carry it"),
])
@pytest.mark.parametrize("check", [False, True], ids=["up", "check"])
def test_ion_bad_input_is_one_line_exit_2_nothing_created(spec, env, needle, check, tmp_path):
    import subprocess
    import sys
    (tmp_path / "s.yaml").write_text("name: x\nnodes: 2\n" + spec)
    res = subprocess.run([sys.executable, "-m", "swarm", "up", *(["--check"] if check else []), "s.yaml"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60,
                         env={**os.environ, "SWARM_WORKDIR": str(tmp_path), **env})
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_the_ipn_number_is_the_one_every_agent_uses_and_must_match_the_ltp_engine():
    """ION's node number is dtn.number (else ltp.engine, else the index), as for dtn7 and Hardy on ipn; its plan
    uses one number for node and LTP engine, so a dtn.number that differs from the engine is refused by name."""
    ion = REGISTRY["ion"]
    args = ("10.9.0.2", [Peer("sat02", "10.9.0.3", 2)], "/w", "10.9.0.0/24", 0.01, link_of)
    plan = ion.plan("sat01", 1, args[0], DtnSpec(agent="ion", cla="udp", number=7, ltp={"engine": 7}), *args[1:])
    assert "1 7 " in plan.files["node.ionrc"]
    with pytest.raises(ValueError, match=r"^dtn.number 7: .*dtn.ltp.engine is 1"):
        ion.plan("sat01", 1, args[0], DtnSpec(agent="ion", cla="udp", number=7), *args[1:])


CHAIN = """a contact +0 +60 sat01 sat02 125000000
a contact +0 +60 sat02 sat01 125000000
a contact +0 +5 sat02 ground 125000000
a contact +0 +5 ground sat02 125000000
a contact +15 +60 sat02 ground 125000000
a contact +15 +60 ground sat02 125000000
"""
NUMBERS = {"sat01": 1, "sat02": 2, "ground": 3}
RELEASE = 1_764_316_800.4  # 2025/11/28-08:00:00.4 UTC


def chain_load(text: str = CHAIN, others: str = "down") -> tuple[list[str], list[str]]:
    from swarm.dtn.agents.base import ContactLoad
    from swarm.dtn.agents.ion.plan import contact_plan_rc
    from swarm.dtn.contacts import parse_contact_plan
    ionrc = sat01(DtnSpec(agent="ion", cla="ltp")).files["node.ionrc"]
    load = ContactLoad(parse_contact_plan(text), RELEASE, NUMBERS, others, lambda a, b: 0.5 if "ground" in (a, b) else 0.0)
    rc, refused = contact_plan_rc(ionrc, load)
    return rc.splitlines(), refused


def test_a_runs_contact_plan_replaces_the_contacts_ion_started_with_times_from_the_release():
    lines, refused = chain_load()
    assert refused == []
    assert lines[1] == "@ 2025/11/28-08:00:00"  # whole seconds: the release's 0.4 s shifts each time, rounded
    # sat01's generated contacts go: sat02 is in the plan, ground is not but others: down cuts it
    assert sorted(ln for ln in lines if ln.startswith("d ")) == [
        "d contact * 1 2", "d contact * 1 3", "d contact * 2 1", "d contact * 3 1"]
    contacts = [ln for ln in lines if ln.startswith("a contact")]
    assert contacts[0] == "a contact +0 +60 1 2 125000000" and "a contact +15 +60 3 2 125000000" in contacts
    assert len(contacts) == 6  # the whole plan on every node: CGR plans sat01 -> ground over sat02's contacts
    # sat02-ground has no range in the plan nor from sat01's start: the link's 0.5 s, in whole light seconds
    assert [ln for ln in lines if ln.startswith("a range")] == [
        "a range +0 +5 2 3 1", "a range +0 +5 3 2 1", "a range +15 +60 2 3 1", "a range +15 +60 3 2 1"]


def test_with_others_kept_a_pair_the_plan_does_not_name_keeps_its_contacts():
    lines, _ = chain_load(others="keep")
    assert sorted(ln for ln in lines if ln.startswith("d ")) == ["d contact * 1 2", "d contact * 2 1"]


def test_the_plans_ranges_replace_the_ranges_ion_started_with():
    lines, _ = chain_load(CHAIN + "a range +0 +60 sat01 sat02 3\n")
    assert "d range * 1 2" in lines and "a range +0 +60 1 2 3" in lines
    assert "d range * 1 3" not in lines  # ground: no range in the plan, the start's stays


def test_what_ion_would_refuse_is_named_not_sent():
    text = CHAIN + ("a contact +60 +70 sat01 sat02 125000000\n"  # shares second 60 with +0 +60: ION refuses it
                    "a contact +0 +10 sat01 moon 1000\n"  # not a node of the swarm
                    "a contact +70 +80 sat02 sat01 99999999999\n")  # above ION's 32-bit rate: the most it keeps
    lines, refused = chain_load(text)
    assert refused == ["line 8: contact sat01 -> moon: not two DTN nodes of the swarm",
                       "line 7: contact 1 -> 2 +60 +70: Overlapping contact ignored"]
    assert "a contact +60 +70 1 2 125000000" not in lines and "a contact +70 +80 2 1 4294967295" in lines


def test_only_agents_that_route_by_contacts_take_a_plan():
    assert sorted(name for name, agent in REGISTRY.items()
                  if type(agent).load_contacts is not type(REGISTRY["dtn7"]).load_contacts) == ["hdtn", "ion"]


def test_routes_handed_over_by_node_id_plan_as_routes_by_name():
    """The framework gives adapters routes by node ID (swarm.dtn.plan); ION's plans name nodes (a chain with
    `routing: static` crashed with KeyError 'dtn://sat02/' before)."""
    by_name = DtnSpec(agent="ion", cla="ltp", routing="static", routes=[{"to": "*", "via": "ground"}])
    by_id = DtnSpec(agent="ion", cla="ltp", routing="static", routes=[{"to": "*", "via": "dtn://ground/"}])
    by_ipn = DtnSpec(agent="ion", cla="ltp", routing="static", routes=[{"to": "*", "via": "ipn:3.0"}])
    assert sat01(by_id).files == sat01(by_name).files == sat01(by_ipn).files


def test_a_chain_with_static_routes_plans_through_the_framework():
    spec = spec_from_dict({"name": "ionchain", "backend": "compose", "node_list": [
        {"name": "sat01", "dtn": {"agent": "ion", "cla": "ltp", "routing": "static", "static_peers": ["sat02"],
                                  "routes": [{"to": "*", "via": "sat02"}]}},
        {"name": "sat02", "dtn": {"agent": "ion", "cla": "ltp"}}], "links": {"default": {"rate": "10Mbit"}}})
    from swarm.dtn.plan import plan_agents
    from swarm.spec.model import plan_nodes
    plans = plan_agents([(n.name, f"10.9.0.{i + 2}", n.spec.dtn) for i, n in enumerate(plan_nodes(spec))],
                        "10.9.0.0/24", lambda n: "/var/lib/swarm-dtn", link_of=lambda a, b: LinkView(0, 10_000_000))
    assert "g plan dtn://* ipn:2.0" in plans[0].files["node.bprc"]
    assert "a exit 1 4294967295 ipn:2.0" in plans[0].files["node.ipnrc"]


def test_a_host_buffer_too_small_for_ions_ltp_at_the_links_rate_is_said_with_what_to_set():
    from swarm.dtn.agents.ion.plan import host_notes
    ltp = DtnSpec(agent="ion", cla="ltp")
    (note,) = host_notes(ltp, 1_000_000_000, 212_992)  # BENCHMARKS.md: 0.17 of the 0 s goodput at 4 s one-way
    assert "1.7 ms of a 1000 Mbit/s link" in note and "sysctl -w net.core.rmem_default=4194304" in note
    assert host_notes(ltp, 1_000_000_000, 4 * 1024 * 1024) == []  # 33 ms: kept 0.98
    assert len(host_notes(DtnSpec(agent="ion", cla="ltp", ltp={"rate": "100Mbit"}), 0, 212_992)) == 1  # 17 ms
    assert host_notes(DtnSpec(agent="ion", cla="udp"), 1_000_000_000, 212_992) == []
    assert "rmem_default=8388608" in host_notes(ltp, 2_000_000_000, 212_992)[0]  # 2 Gbit/s x 30 ms = 7.5 MB
    assert [a for a, agent in REGISTRY.items() if agent.host_notes(ltp, 10**9, 1) != []] == ["ion"]


def test_the_ion_client_names_the_nodes_own_endpoints_in_its_scheme(tmp_path, monkeypatch):
    """The traffic program's ion-tools client: dtn://<host>/<service> by default, ipn:<N>.<service> with `eid: ipn`
    (N from the node's ionrc, as ION read it), and the ipn source ipn:<N>.2 is an endpoint the node registers."""
    from flightsw.dtn_traffic import IonTools
    plan = sat01(DtnSpec(agent="ion", cla="ltp", eid="ipn"))
    (tmp_path / "node.ionrc").write_text(plan.files["node.ionrc"])
    monkeypatch.setattr("socket.gethostname", lambda: "sat01")
    assert IonTools({"workdir": str(tmp_path)})._own("in") == "dtn://sat01/in"
    ipn = IonTools({"workdir": str(tmp_path), "eid": "ipn"})
    assert (ipn._own("1"), ipn._own("2")) == ("ipn:1.1", "ipn:1.2")
    assert "a endpoint ipn:1.2 q" in plan.files["node.bprc"].splitlines()

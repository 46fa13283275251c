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

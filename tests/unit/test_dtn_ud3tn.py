"""µD3TN's adapter, pure parts: the command and configuration a node gets (golden), the user's file, what is read
back from µD3TN and its helper, the registry entry, and the install-tree checks; bad input through `swarm up`.
The in-node helper (flightsw/ud3tn_aap.py) is tested here where it needs no µD3TN: its time conversion and its
inbox; talking to a running µD3TN is tests/integration/test_dtn_ud3tn_live.py's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import golden
from flightsw import ud3tn_aap
from swarm.cli.dtn import config_text
from swarm.dtn.agents import REGISTRY, carriers, check_agent
from swarm.dtn.agents.base import AgentPlan, LinkView, Peer
from swarm.dtn.agents.ud3tn.agent import PATHS, PROGRAMS, parse_counters, readiness
from swarm.dtn.agents.ud3tn.plan import CONFIG_LINE, Ud3tnConfigError, contact_rate, plan_ud3tn, user_lines
from swarm.dtn.plan import plan_agents
from swarm.errors import SpecError
from swarm.runtime.dtn_image import check_install_tree, tree_files, tree_image_tag
from swarm.spec.dtn import DtnSpec

UD3TN = REGISTRY["ud3tn"]
USER = """# my own contacts
1(dtn://relay/):(mtcp:192.0.2.7:4224)::[{+0,+600,1000}];

1(dtn://moon/):(mtcp:192.0.2.8:4224):[(dtn://farside/)]:[{+60,+120,500},{+300,+400,500}];
"""
LINKS = {("sat01", "ground"): LinkView(2.0, 100_000_000), ("sat01", "sat02"): LinkView(0.5, 10_000_000)}
PEERS = [Peer("sat02", "10.9.0.3", 2, "dtn://sat02/"), Peer("ground", "10.9.0.4", 3, "dtn://ground/")]


def link_of(a: str, b: str) -> LinkView:
    return LINKS.get((a, b), LinkView())


def sat01(piece: DtnSpec, user: str = "", node_id: str = "dtn://sat01/", peers=PEERS) -> AgentPlan:
    return plan_ud3tn("sat01", node_id, "10.9.0.2", piece, peers, "/var/lib/swarm-dtn", link_of, user,
                      "/home/me/mine.ud3tnrc")


def test_golden_mtcp_node_with_a_route_and_the_users_lines():
    piece = DtnSpec(agent="ud3tn", cla="mtcp", routing="static", routes=[{"to": "dtn://sat03/", "via": "dtn://sat02/"}])
    text = config_text(sat01(piece, USER))
    assert text == golden("ud3tn_sat01_mtcp.txt", text)


def test_golden_ipn_node():
    peers = [Peer("sat02", "10.9.0.3", 2, "ipn:2.0"), Peer("ground", "10.9.0.4", 3, "ipn:3.0")]
    text = config_text(sat01(DtnSpec(agent="ud3tn", cla="mtcp", eid="ipn"), node_id="ipn:1.0", peers=peers))
    assert text == golden("ud3tn_sat01_ipn.txt", text)


def test_the_command_is_ud3tns_own_options():
    plan = sat01(DtnSpec(agent="ud3tn", cla="mtcp"))
    start = plan.files["start.sh"]
    assert ("ud3tn -e dtn://sat01/ -c mtcp:10.9.0.2,16162 -s /var/lib/swarm-dtn/ud3tn.socket "
            "-S /var/lib/swarm-dtn/ud3tn.aap2.socket -l 86400 -L 3 -b 7 &") in start
    assert plan.argv == ["sh", "/var/lib/swarm-dtn/start.sh"] and plan.node_id == "dtn://sat01/"
    assert plan.expected_peers == ("dtn://sat02/", "dtn://ground/") and plan.agent == "ud3tn"


def test_each_peer_is_a_contact_at_its_links_rate():
    rc = sat01(DtnSpec(agent="ud3tn", cla="mtcp")).files["node.ud3tnrc"].splitlines()
    assert rc[1:] == ["1(dtn://sat02/):(mtcp:10.9.0.3:16162)::[{+0,+2592000,1250000}];",
                      "1(dtn://ground/):(mtcp:10.9.0.4:16162)::[{+0,+2592000,12500000}];"]
    assert all(CONFIG_LINE.match(line) for line in rc[1:])
    assert contact_rate(LinkView()) == 125_000_000 and contact_rate(LinkView(0, 10**12)) == 2**32 - 1


def test_a_static_route_is_what_the_next_hops_contact_reaches():
    piece = DtnSpec(agent="ud3tn", cla="mtcp", routing="static",
                    routes=[{"to": "dtn://sat04/", "via": "dtn://ground/"}, {"to": "dtn://sat05/", "via": "dtn://ground/"}])
    rc = sat01(piece).files["node.ud3tnrc"]
    assert "1(dtn://ground/):(mtcp:10.9.0.4:16162):[(dtn://sat04/),(dtn://sat05/)]:[{+0,+2592000,12500000}];" in rc


def test_routes_by_node_name_through_the_swarm_planner():
    piece = DtnSpec(agent="ud3tn", cla="mtcp", routing="static", static_peers=["sat02"],
                    routes=[{"to": "sat03", "via": "sat02"}])
    nodes = [("sat01", "10.9.0.2", piece), ("sat02", "10.9.0.3", DtnSpec(agent="ud3tn", cla="mtcp")),
             ("sat03", "10.9.0.4", DtnSpec(agent="dtn7", cla="mtcp"))]
    plans = plan_agents(nodes, "10.9.0.0/24", lambda n: "/w")
    assert "1(dtn://sat02/):(mtcp:10.9.0.3:16162):[(dtn://sat03/)]:" in plans[0].files["node.ud3tnrc"]
    assert [p.agent for p in plans] == ["ud3tn", "ud3tn", "dtn7"]


@pytest.mark.parametrize("piece, message", [
    (DtnSpec(agent="ud3tn", cla="mtcp", routing="static", routes=[{"to": "*", "via": "dtn://sat02/"}]),
     "dtn.routes to '*': µD3TN has no default route"),
    (DtnSpec(agent="ud3tn", cla="mtcp", routing="static", routes=[{"to": "dtn://x/", "via": "dtn://sat09/"}]),
     "dtn.routes via 'dtn://sat09/': not a peer of sat01"),
    (DtnSpec(agent="ud3tn", cla="mtcp", peers="auto"), "dtn.peers 'auto': agent 'ud3tn' needs static peers"),
    (DtnSpec(agent="ud3tn", cla="ltp"), "dtn.cla 'ltp': agent 'ud3tn' carries mtcp"),
])
def test_what_ud3tn_cannot_run_is_one_line_naming_the_field(piece, message):
    with pytest.raises(ValueError) as err:
        sat01(piece)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("cla", ["tcp", "ltp", "udp", "http"])
def test_clas_it_lacks_are_refused_by_the_registry(cla):
    with pytest.raises(ValueError, match=rf"^dtn.cla '{cla}': agent 'ud3tn' does not carry it \(it carries mtcp;"):
        check_agent(DtnSpec(agent="ud3tn", cla=cla))


def test_the_registry_knows_ud3tn_and_what_it_carries():
    assert UD3TN.clas == ("mtcp",) and "ud3tn" in carriers("mtcp") and "dtn7" in carriers("mtcp")
    assert UD3TN.install.user_tree and UD3TN.install.cache_env == "SWARM_UD3TN_INSTALL"
    assert UD3TN.install.dockerfile == "images/ud3tn/Dockerfile" and Path(UD3TN.install.dockerfile).exists()
    assert UD3TN.needs_containers and UD3TN.client(DtnSpec(agent="ud3tn", cla="mtcp"))["client"] == "ud3tn-aap"
    from flightsw.dtn_traffic import CLIENTS
    assert "ud3tn-aap" in CLIENTS


def test_users_file_is_sent_line_by_line_with_its_line_numbers():
    assert user_lines(USER, "f") == [(2, "1(dtn://relay/):(mtcp:192.0.2.7:4224)::[{+0,+600,1000}];"),
                                     (4, "1(dtn://moon/):(mtcp:192.0.2.8:4224):[(dtn://farside/)]:"
                                         "[{+60,+120,500},{+300,+400,500}];")]
    files = sat01(DtnSpec(agent="ud3tn", cla="mtcp"), USER).files
    assert files["user.ud3tnrc"].startswith("2\t1(dtn://relay/)")
    assert "--user user.ud3tnrc --source /home/me/mine.ud3tnrc" in files["start.sh"]
    assert "user.ud3tnrc" not in sat01(DtnSpec(agent="ud3tn", cla="mtcp")).files


@pytest.mark.parametrize("line", ["a contact +0 +10 1 2 100", "1(dtn://x/):(mtcp:1.2.3.4:5)::[{+0,+10,100}]",
                                  "1(dtn://x/:(mtcp:1.2.3.4:5)::;", "9(dtn://x/);"])
def test_a_line_that_is_no_configuration_message_names_file_and_line(line):
    with pytest.raises(Ud3tnConfigError) as err:
        user_lines(f"# mine\n{line}\n", "/home/me/mine.ud3tnrc")
    assert str(err.value).startswith("dtn.config /home/me/mine.ud3tnrc: line 2: ") and "\n" not in str(err.value)


def test_what_ud3tn_and_its_helper_say_is_read_back():
    plan = AgentPlan(node="sat01", argv=[], workdir="/w", node_id="dtn://sat01/")
    assert readiness(plan, "dtn://sat01/\n") is None
    assert readiness(plan, "dtn://other/\n") == "AAP answers 'dtn://other/', not 'dtn://sat01/'"
    log = ('[Fri Nov 27 13:58:09 2026] [INFO] ContactManager: Scheduled contact with "dtn://sat02/" started (0x1).\n'
           '[Fri Nov 27 13:58:09 2026] [INFO] ContactManager: Scheduled contact with "ipn:3.0" started (0x2).\n'
           '[Fri Nov 27 13:58:19 2026] [INFO] BundleProcessor: Deleting bundle 0x3: Lifetime Expired\n'
           '[Fri Nov 27 13:58:20 2026] [INFO] BundleProcessor: Received bundle not destined for any registered EID '
           '(from = dtn://a/x, to = dtn://sat01/y), dropping.\n')
    c = parse_counters(f"dtn://sat01/\n---\n4\n---\n2\n---\n{log}", "sat01", DtnSpec(agent="ud3tn", cla="mtcp"))
    assert (c.eid, c.peers, c.delivered, c.failed, c.stored, c.forwarded, c.clas) == \
        ("dtn://sat01/", ["3", "sat02"], 4, 2, 0, 0, ["mtcp"])
    warn = "[Fri Nov 27 14:00:02 2026] [WARNING] Router: Command (T = 1) is invalid! [components/ud3tn/router_task.c:53]"
    assert UD3TN.failure_lines(f"ok\n{warn}\nµD3TN start: x\n") == [(None, warn), (None, "µD3TN start: x")]


def test_the_helper_makes_contact_times_absolute_and_names_the_config_agent():
    now = 946_684_800 + 1000
    assert ud3tn_aap.absolute("1(dtn://b/):(mtcp:1.2.3.4:5)::[{+0,+60,100},{+5,+6,7}];", now) == \
        "1(dtn://b/):(mtcp:1.2.3.4:5)::[{1000,1060,100},{1005,1006,7}];"
    assert ud3tn_aap.absolute("1(dtn://b/):(mtcp:x:1)::[{5,6,7}];", now).endswith("[{5,6,7}];")
    assert ud3tn_aap.config_eid("dtn://sat01/") == "dtn://sat01/config" and ud3tn_aap.config_eid("ipn:4.0") == "ipn:4.9000"
    assert ud3tn_aap.source_id("ipn:4.0").isdigit() and ud3tn_aap.source_id("dtn://a/").startswith("src-")


def test_the_inbox_hands_out_each_bundle_once_oldest_first(tmp_path):
    box = tmp_path / ud3tn_aap.INBOX
    box.mkdir()
    for i, text in ((2, b"second\nline"), (1, b"first")):
        (box / f"{i:017d}-{i:08d}.b").write_bytes(json.dumps({"src": f"dtn://s{i}/x", "dst": "dtn://me/in"}).encode()
                                                   + b"\n" + text)
    (box / "00000000000000003-00000003.tmp").write_bytes(b"being written")
    assert ud3tn_aap.take_bundle(str(tmp_path)) == ({"src": "dtn://s1/x", "dst": "dtn://me/in"}, b"first")
    assert ud3tn_aap.take_bundle(str(tmp_path)) == ({"src": "dtn://s2/x", "dst": "dtn://me/in"}, b"second\nline")
    assert ud3tn_aap.take_bundle(str(tmp_path)) is None and ud3tn_aap.take_bundle(str(tmp_path / "none")) is None
    assert ud3tn_aap.count(str(tmp_path), "n") == 1 and ud3tn_aap.count(str(tmp_path), "n") == 2


def make_tree(root: Path, skip: str = "") -> Path:
    (root / "bin").mkdir(parents=True)
    if skip != "ud3tn":
        (root / "bin" / "ud3tn").write_text("#!/bin/sh\n")
        (root / "bin" / "ud3tn").chmod(0o755)
    site = root / "lib" / "python3.11" / "site-packages"
    for pkg in ("ud3tn_utils/aap", "pyd3tn", "google/protobuf"):
        if not pkg.startswith(skip or "-"):
            (site / pkg).mkdir(parents=True)
            (site / pkg / "__init__.py").write_text("")
    return root


def test_install_tree_checks_name_what_is_missing(tmp_path):
    assert PROGRAMS == ("ud3tn",) and PATHS
    assert check_install_tree(UD3TN.install, str(make_tree(tmp_path / "ok")), "µD3TN") == tmp_path / "ok"
    with pytest.raises(SpecError, match=r"^dtn.install: µD3TN is built by you; .*SWARM_UD3TN_INSTALL"):
        check_install_tree(UD3TN.install, None, "µD3TN")
    with pytest.raises(SpecError, match=r"^dtn.install '.*/none': no such folder$"):
        check_install_tree(UD3TN.install, str(tmp_path / "none"), "µD3TN")
    with pytest.raises(SpecError, match=r"^dtn.install '.*/nod': bin/ud3tn is missing"):
        check_install_tree(UD3TN.install, str(make_tree(tmp_path / "nod", "ud3tn")), "µD3TN")
    with pytest.raises(SpecError, match=r"^dtn.install '.*/nopy': lib/python3\*/site-packages/ud3tn_utils/aap is "
                                       r"missing"):
        check_install_tree(UD3TN.install, str(make_tree(tmp_path / "nopy", "ud3tn_utils")), "µD3TN")


def test_the_image_takes_bin_and_the_whole_site_packages_and_its_tag_follows_them(tmp_path):
    root = make_tree(tmp_path / "t")
    (root / "lib" / "python3.11" / "site-packages" / "pyd3tn" / "__pycache__").mkdir()
    (root / "lib" / "python3.11" / "site-packages" / "pyd3tn" / "__pycache__" / "x.pyc").write_text("")
    rel = [str(p.relative_to(root)) for p in tree_files(root, UD3TN.install)]
    assert rel == ["bin/ud3tn", "lib/python3.11/site-packages/google/protobuf/__init__.py",
                   "lib/python3.11/site-packages/pyd3tn/__init__.py",
                   "lib/python3.11/site-packages/ud3tn_utils/aap/__init__.py"]
    repo = Path(__file__).resolve().parents[2]
    first = tree_image_tag(repo, "swarm-emu/node:x", root, UD3TN.install)
    assert first.startswith("swarm-emu/ud3tn:")
    (root / "lib" / "python3.11" / "site-packages" / "google" / "protobuf" / "__init__.py").write_text("# other\n")
    assert tree_image_tag(repo, "swarm-emu/node:x", root, UD3TN.install) != first


@pytest.mark.parametrize("spec, env, needle", [
    ("backend: netns\ndefaults: {dtn: {agent: ud3tn, cla: mtcp}}\n", {"SWARM_UD3TN_INSTALL": "/x"},
     "dtn.agent 'ud3tn': needs a container backend (compose or swarm)"),
    ("backend: compose\ndefaults: {dtn: {agent: ud3tn, cla: mtcp}}\n", {"SWARM_UD3TN_INSTALL": ""},
     "dtn.install: µD3TN (the user's build) is built by you; give the install prefix of your build (dtn.install, or "
     "$SWARM_UD3TN_INSTALL)"),
    ("backend: compose\ndefaults: {dtn: {agent: ud3tn, cla: mtcp, install: /nonexistent/ud3tn}}\n", {},
     "dtn.install '/nonexistent/ud3tn': no such folder"),
    ("backend: compose\ndefaults: {dtn: {agent: ud3tn, cla: mtcp, install: TREE_WITHOUT_DAEMON}}\n", {},
     "bin/ud3tn is missing"),
    ("backend: compose\ndefaults: {dtn: {agent: ud3tn, cla: ltp}}\n", {},
     "dtn.cla 'ltp': agent 'ud3tn' does not carry it"),
    ("backend: compose\ndefaults: {dtn: {agent: ud3tn}}\n", {},
     "dtn.cla 'tcp': agent 'ud3tn' does not carry it (it carries mtcp; tcp is carried by dtn7, hardy, hdtn)"),
])
@pytest.mark.parametrize("check", [False, True], ids=["up", "check"])
def test_ud3tn_bad_input_is_one_line_exit_2_nothing_created(spec, env, needle, check, tmp_path):
    tree = make_tree(tmp_path / "tree", "ud3tn")
    (tmp_path / "s.yaml").write_text("name: x\nnodes: 2\n" + spec.replace("TREE_WITHOUT_DAEMON", str(tree)))
    res = subprocess.run([sys.executable, "-m", "swarm", "up", *(["--check"] if check else []), "s.yaml"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60,
                         env={**os.environ, "SWARM_WORKDIR": str(tmp_path), **env})
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml", "tree"]

"""Link impairments (pure): units, the model's merge, link resolution, profiles, engine plans (golden tc and
nft commands), engine choice and its errors, the executor against a recording runner, the fault timeline."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
import os
import time
from dataclasses import dataclass, field, replace

import pytest

from netem.engines import choose_engine

from netem.engines.kernel import NetemEngine, NftEngine
from netem.tc import netem_args, plan_netem, plan_nft, plan_rate
from swarm.errors import SpecError
from netem.state import LinkState, check_partition
from experiments.timeline import FaultEvent, FaultTimeline, check_timeline
from netem.spec.links import Impairment, LinksSpec, impairment, load_profiles, resolve_links, round_trip_ms
from swarm.units import parse_link_rate, parse_percent, parse_time_ms
from swarm.caps import Capabilities
from swarm.runtime.runner import RecordingRunner, Result
from swarm.spec.model import spec_from_dict

from conftest import golden

CAPS = Capabilities(kernel="x", root=True, docker=False, docker_version="", compose=[], compose_version="",
                    netns=True, sch_netem=False, batman_adv=False, nftables=True, tbf=True,
                    iperf3_version="iperf 3.12", batmand=True, ddsperf=True, htb=True)
NETEM_CAPS = replace(CAPS, sch_netem=True)
NODES = ["sat01", "sat02", "sat03", "sat04"]


def links(data: dict) -> LinksSpec:
    return LinksSpec.model_validate(data)


def text(cmds: list[list[str]]) -> str:
    return "\n".join(shlex.join(c) for c in cmds) + "\n"


# ------------------------------------------------------------------------------------------- units
@pytest.mark.parametrize("value,ms", [("250ms", 250), ("1.3s", 1300), ("500us", 0.5), (250, 250), ("0", 0)])
def test_time_units(value, ms):
    assert parse_time_ms(value) == ms


@pytest.mark.parametrize("value,bps", [("10Mbit", 10**7), ("10M", 10**7), ("10Mbps", 10**7), ("500k", 500_000),
                                       ("1.5G", 1_500_000_000), ("2mbit/s", 2 * 10**6), ("0", 0), (1000, 1000)])
def test_rate_units_are_bits(value, bps):
    assert parse_link_rate(value) == bps


@pytest.mark.parametrize("value,pct", [("1%", 1.0), ("0.5%", 0.5), (2, 2.0), ("100%", 100.0)])
def test_percent_units(value, pct):
    assert parse_percent(value) == pct


# --------------------------------------------------------------------------------------- the model
def test_changing_one_parameter_keeps_the_others():
    """StarryNet's `tc ... change` with only a delay reset the loss; a merge must not."""
    link = impairment(delay="100ms", loss="2%", rate="10M")
    changed = link.merge(impairment(delay="250ms"))
    assert (changed.delay, changed.loss, changed.rate) == (250, 2.0, 10**7)


def test_neutral_values_switch_a_parameter_off():
    link = impairment(delay="100ms", loss="2%", rate="10M").merge(impairment(loss=0, rate=0))
    assert link.effective().values() == {"delay": 100.0}
    assert impairment(up=True).empty and not impairment(up=False).empty


def test_a_links_delay_is_one_way_so_symmetric_100ms_gives_200ms_rtt():
    """CORE once applied a link's delay where it showed as round-trip time; here each direction gets it once."""
    resolved = resolve_links(links({"default": {"delay": "100ms"}}), NODES)
    assert resolved[("sat01", "sat02")].delay == 100 and resolved[("sat02", "sat01")].delay == 100
    assert round_trip_ms(resolved, "sat01", "sat02") == 200


def test_overrides_apply_in_order_per_parameter_and_direction():
    resolved = resolve_links(links({
        "default": {"loss": "1%"},
        "overrides": [{"between": ["sat01", "sat02"], "delay": "250ms"},
                      {"between": ["sat01", "sat02"], "direction": "a->b", "loss": "5%"},
                      {"node": "sat04", "direction": "out", "rate": "2Mbit"},
                      {"node": "sat03", "up": False}]}), NODES)
    assert resolved[("sat01", "sat02")].values() == {"delay": 250.0, "loss": 5.0}
    assert resolved[("sat02", "sat01")].values() == {"delay": 250.0, "loss": 1.0}
    assert resolved[("sat04", "sat01")].values() == {"loss": 1.0, "rate": 2_000_000}
    assert resolved[("sat01", "sat04")].values() == {"loss": 1.0}
    assert all(resolved[p].down for p in [("sat03", "sat01"), ("sat02", "sat03")])
    assert len(resolved) == 12


BAD = {
    "loss above 100 %": ({"default": {"loss": "150%"}}, "loss '150%': must be between 0 and 100 %"),
    "negative delay": ({"default": {"delay": "-5ms"}}, "delay '-5ms': must not be negative"),
    "rate fast": ({"default": {"rate": "fast"}}, "rate 'fast': expected a rate like 10Mbit"),
    "unknown node": ({"overrides": [{"between": ["sat01", "sat09"], "loss": "1%"}]},
                     "links.overrides[0].between: node 'sat09': no such node"),
    "unknown profile": ({"default": {"profile": "iss-kuu"}}, "links.default.profile 'iss-kuu': unknown profile"),
    "jitter without delay": ({"default": {"jitter": "5ms"}}, "jitter 5ms needs a delay"),
    "unknown parameter": ({"default": {"lost": "1%"}}, "unknown field 'lost'"),
    "bad direction": ({"overrides": [{"between": ["sat01", "sat02"], "direction": "up"}]}, "direction 'up'"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_link_input_is_one_line_naming_field_and_value(case):
    data, needle = BAD[case]
    with pytest.raises(SpecError) as exc:
        spec_from_dict({"name": "x", "nodes": 4, "links": data}, "s.yaml")
    msg = str(exc.value)
    assert needle in msg and "\n" not in msg and msg.startswith("s.yaml: "), msg


# ----------------------------------------------------------------------------------------- profiles
def test_every_profile_cites_its_source_and_loads():
    profiles = load_profiles()
    for name in ("iss-ku", "lcrd-optical", "lunar-relay", "sband-crosslink", "jaxa-rtt500", "jaxa-rtt1000",
                 "jaxa-loss1", "jaxa-loss5", "jaxa-loss10"):
        assert name in profiles, name
    for prof in profiles.values():
        assert len(prof.source) > 40 and prof.description
    assert profiles["iss-ku"].impairment.rate == 517_000_000 and profiles["lcrd-optical"].impairment.rate == 10**9
    assert profiles["lunar-relay"].impairment.delay == 1300
    assert "seeds/003_" in profiles["jaxa-loss5"].source and "seeds/002_" in profiles["iss-ku"].source


def test_jaxa_rtt_profiles_give_their_round_trip():
    for name, rtt in (("jaxa-rtt500", 500), ("jaxa-rtt1000", 1000)):
        resolved = resolve_links(links({"default": {"profile": name}}), NODES[:2])
        assert round_trip_ms(resolved, "sat01", "sat02") == rtt


def test_inline_values_go_over_a_profile():
    resolved = resolve_links(links({"default": {"profile": "iss-ku", "loss": "1%"}}), NODES[:2])
    assert resolved[("sat01", "sat02")].values() == {"delay": 300.0, "loss": 1.0, "rate": 517_000_000}


# ------------------------------------------------------------------------------------ golden plans
PER_DST = {
    "02:42:0a:4d:00:05": impairment(delay="1.3s", rate="2Mbit"),
    "02:42:0a:4d:00:03": impairment(delay="250ms", jitter="10ms", jitter_distribution="normal", loss="1%",
                            loss_correlation="25%"),
    "02:42:0a:4d:00:04": impairment(loss="5%", corrupt="0.1%", duplicate="1%", reorder="5%", delay="10ms"),
    "02:42:0a:4d:00:06": impairment(up=False, delay="5ms"),
    "02:42:0a:4d:00:07": impairment(rate="10M"),
    "02:42:0a:4d:00:08": impairment(loss=0),  # nothing in effect: no class
}


def test_golden_netem_plan():
    out = text(plan_netem("eth1", PER_DST))
    assert out == golden("impair_netem_eth1.txt", out)


def test_segmentation_only_for_lossy_egress():
    from netem.engines.base import needs_segmentation

    assert needs_segmentation({"a": impairment(loss="1%")}) and needs_segmentation({"a": impairment(reorder="1%", delay="5ms")})
    assert not needs_segmentation({"a": impairment(rate="1M", delay="5ms")}) and not needs_segmentation({"a": impairment(up=False)})


def test_golden_nft_engine_plan():
    engine = NftEngine(CAPS)
    per = {"02:42:0a:4d:00:03": impairment(loss="10%"), "02:42:0a:4d:00:04": impairment(up=False, loss="3%"),
           "02:42:0a:4d:00:05": impairment(loss="30%", rate="20Mbit"), "02:42:0a:4d:00:06": impairment(rate="500k"),
           "02:42:0a:4d:00:07": impairment(loss="0.0001%")}
    labels = {mac: f"sat0{int(mac.rsplit(':', 1)[1], 16) - 1}->sat01" for mac in per}
    cmds = engine.plan_node("eth0", egress=per, ingress=per, labels=labels)
    out = text(cmds.tc) + "--- nft -f -\n" + cmds.nft
    assert out == golden("impair_nft_eth0.txt", out)


def test_netem_options_follow_tc_syntax():
    assert netem_args(impairment(delay="250ms", jitter="10ms")) == ["limit", "32500", "delay", "250ms", "10ms"]
    assert netem_args(impairment(delay="1.5ms")) == ["limit", "1000", "delay", "1500us"]
    assert netem_args(impairment(up=False, loss="1%")) == ["loss", "100%"]
    assert netem_args(impairment(rate="10M")) == []  # rate alone: the HTB class, no netem leaf


def test_nothing_to_do_plans_nothing():
    assert plan_netem("eth1", {}) == [] and plan_rate("eth1", {"02:42:0a:00:00:02": impairment(loss="1%")}) == []
    assert plan_nft("eth1", {"02:42:0a:00:00:02": impairment(rate="1M")}) is None


# ----------------------------------------------------------------------------------------- engines
def test_engine_choice_follows_the_probe():
    assert choose_engine(NETEM_CAPS).name == "netem"
    assert choose_engine(CAPS).name == "nft"
    with pytest.raises(SpecError, match="engine 'netem': this kernel lacks NetEm \\(sch_netem\\)"):
        choose_engine(CAPS, "netem")


@pytest.mark.parametrize("param,value,shown", [("delay", "250ms", "delay 250ms"), ("jitter", "5ms", "jitter 5ms"),
                                               ("corrupt", "1%", "corrupt 1%"), ("duplicate", "1%", "duplicate 1%"),
                                               ("reorder", "5%", "reorder 5%")])
def test_nft_engine_refuses_what_needs_netem_naming_parameter_and_feature(param, value, shown):
    values = {param: value}
    if param in ("jitter", "reorder"):
        values["delay"] = "0"  # consistency is not what is tested here
    link = Impairment.model_validate(values)
    with pytest.raises(SpecError) as exc:
        NftEngine(CAPS).check({("sat01", "sat02"): link})
    msg = str(exc.value)
    assert shown in msg and "sch_netem" in msg and "sat01->sat02" in msg and "\n" not in msg, msg


def test_netem_engine_accepts_everything_where_sch_netem_exists():
    NetemEngine(NETEM_CAPS).check({("a", "b"): impairment(delay="1s", jitter="10ms", loss="1%", loss_correlation="5%",
                                                          rate="1M", corrupt="1%", duplicate="1%", reorder="1%")})
    NftEngine(CAPS).check({("a", "b"): impairment(loss="30%", rate="20M", up=False)})


def test_netem_refuses_a_duplicating_link_beside_other_netem_links_of_its_sender():
    """Linux refuses a duplicating netem in a tree with other netems (seen in the kernel lab: "netem: cannot mix
    duplicating netems with other netems in tree"); the engine says so in one line before applying anything."""
    engine = NetemEngine(NETEM_CAPS)
    engine.check({("a", "b"): impairment(duplicate="10%", delay="5ms"), ("a", "c"): impairment(rate="10M"),
                  ("b", "a"): impairment(delay="50ms")})  # rate alone has no netem leaf; other senders do not count
    for other in (impairment(delay="50ms"), impairment(up=False)):  # a cut link's leaf is `loss 100%`
        with pytest.raises(SpecError) as exc:
            engine.check({("a", "b"): impairment(duplicate="10%"), ("a", "c"): other}, "cut")
        msg = str(exc.value)
        assert msg.startswith("cut: link a->b: duplicate 10%") and "a->c" in msg and "\n" not in msg, msg


# ------------------------------------------------------------------------------------------- faults
def test_partition_groups_must_not_overlap_or_leave_nodes_out():
    check_partition([["sat01", "sat02"], ["sat03", "sat04"]], NODES, "p")
    with pytest.raises(SpecError, match="'sat02' is in groups 1 and 2"):
        check_partition([["sat01", "sat02"], ["sat02", "sat03", "sat04"]], NODES, "p")
    with pytest.raises(SpecError, match="sat04 in no group"):
        check_partition([["sat01", "sat02"], ["sat03"]], NODES, "p")
    with pytest.raises(SpecError, match="two or more"):
        check_partition([NODES], NODES, "p")


def test_timeline_validation():
    events = [FaultEvent.model_validate(e) for e in (
        {"at": "5s", "cut": ["sat01", "sat03"]}, {"at": "8s", "partition": [["sat01", "sat02"], ["sat03", "sat04"]]},
        {"at": "12s", "heal": "all"}, {"at": "15s", "node": "sat02", "action": "restart"},
        {"at": "2s", "impair": {"between": ["sat01", "sat02"], "loss": "2%"}})]
    check_timeline(events, NODES, 20)
    with pytest.raises(SpecError, match=r"faults\[2\]\.at 12s: at or after the experiment's end \(duration 10 s\)"):
        check_timeline(events, NODES, 10)
    with pytest.raises(SpecError, match=r"faults\[0\]\.cut: node 'sat03': no such node"):
        check_timeline(events[:1], NODES[:2], 20)
    assert [e.kind for e in events] == ["cut", "partition", "heal", "node", "impair"]
    assert events[4].args == "between sat01 sat02 (both): loss 2%"


def test_experiment_takes_links_and_faults():
    from experiments.traffic.model import experiment_from_dict

    exp = experiment_from_dict({"name": "e", "sizes": [4], "protocols": ["udp"], "rates": ["1M"], "duration": "20s",
                                "links": {"default": {"loss": "1%"}},
                                "faults": [{"at": "5s", "cut": ["sat01", "sat03"]}, {"at": "12s", "heal": "all"}]})
    assert exp.swarm_spec(4).links.default.loss == 1.0
    with pytest.raises(SpecError, match=r"faults\[0\]\.at 25s"):
        experiment_from_dict({"name": "e", "sizes": [4], "protocols": ["tcp"], "duration": "20s",
                              "faults": [{"at": "25s", "heal": "all"}]}, "e.yaml")


# ---------------------------------------------------------------------------------------- executor
@dataclass
class InputRunner(RecordingRunner):
    """Records (argv, stdin) and answers like a netns swarm of 3 nodes on 10.77.0.0/16."""

    inputs: list = field(default_factory=list)
    root_qdisc: str = '[{"kind":"noqueue","handle":"0:","root":true}]'
    listed: bool = True  # the swarm's namespaces exist

    def __post_init__(self):
        self.answers = [
            (lambda a: a[:3] == ["ip", "netns", "list"],
             lambda a: Result(a, 0, "".join(f"swarm-emu_t_{n} (id: 1)\n" for n in ("sat01", "sat02", "sat03")
                                            if self.listed))),
            (lambda a: "addr" in a and "to" in a,
             lambda a: Result(a, 0, f"3: eth1    inet {a[-1].split('/')[0]}/16 brd + scope global eth1\n")),
            (lambda a: a[-6:-2] == ["-j", "qdisc", "show", "dev"], lambda a: Result(a, 0, self.root_qdisc)),
        ]

    def pids_by_namespace(self, namespaces):
        """The backend's walk of /proc, answered like the host: one process (4242) in every namespace."""
        return {ns: [4242] for ns in namespaces}

    def run(self, argv, *, check=True, input=None, timeout=None, capture=True, env_extra=None):
        self.inputs.append(([str(x) for x in argv], input))
        return super().run(argv, check=check, input=input, timeout=timeout)

    def in_node(self, what: str) -> list[tuple[str, list[str], str]]:
        """(node, argv inside it, stdin) of the commands run in nodes whose argv starts with `what`."""
        out = []
        for argv, stdin in self.inputs:
            if argv[:3] == ["ip", "netns", "exec"] and argv[4] == what:
                out.append((argv[3].rsplit("_", 1)[1], argv[4:], stdin))
        return out


def make_swarm(tmp_path, links_data=None, caps=CAPS):
    from swarm.runtime.swarm import Swarm

    data = {"name": "t", "nodes": 3, "backend": "netns"}
    if links_data:
        data["links"] = links_data
    runner = InputRunner()
    swarm = Swarm(spec_from_dict(data), runner=runner, caps=caps, workdir=tmp_path)
    swarm.backend._pids_by_namespace = runner.pids_by_namespace  # type: ignore[attr-defined]
    return swarm, runner


def test_executor_applies_per_node_and_only_touches_changed_nodes(tmp_path):
    swarm, runner = make_swarm(tmp_path, {"default": {"loss": "10%"}})
    swarm.links.apply_spec()
    nft = runner.in_node("nft")
    assert sorted(n for n, _, _ in nft) == ["sat01", "sat02", "sat03"]
    sat02 = next(stdin for n, _, stdin in nft if n == "sat02")
    assert 'ether saddr 02:42:0a:4d:00:02 numgen random mod 1000000 < 100000 counter drop comment "sat01->sat02 loss 10%"' in sat02
    runner.inputs.clear()
    swarm.links.impair(impairment(rate="20Mbit"), between=["sat01", "sat03"], direction="a->b")
    touched = {n for n, argv, _ in runner.in_node("tc") if argv[1] == "-batch"}
    assert touched == {"sat01"} and not runner.in_node("nft")  # the loss did not change
    batch = next(stdin for n, argv, stdin in runner.in_node("tc") if argv[1] == "-batch")
    assert "class add dev eth1 parent 5eed: classid 5eed:1 htb rate 20mbit ceil 20mbit quantum 200000" in batch
    state = json.loads((tmp_path / ".swarm" / "t" / "links.json").read_text())
    assert {"src": "sat01", "dst": "sat03", "loss": 10.0, "rate": 20_000_000} in state["links"]


def test_lossy_senders_segment_and_get_their_setting_back(tmp_path):
    swarm, runner = make_swarm(tmp_path, {"overrides": [{"between": ["sat01", "sat02"], "direction": "a->b", "loss": "1%"}]})
    swarm.links.apply_spec()
    ip_set = lambda: [(n, argv[-1]) for n, argv, _ in runner.in_node("ip") if "gso_max_segs" in argv]  # noqa: E731
    assert ip_set() == [("sat01", "1")]  # only the sender of the lossy link
    runner.inputs.clear()
    swarm.links.impair(impairment(rate="5M"), between=["sat01", "sat02"], direction="a->b")
    assert ip_set() == []  # still lossy: left as it is
    swarm.links.clear()
    assert ip_set() == [("sat01", "65535")]


def test_unsupported_parameter_applies_nothing(tmp_path):
    swarm, runner = make_swarm(tmp_path, {"default": {"loss": "1%"}})
    swarm.links.apply_spec()
    runner.inputs.clear()
    with pytest.raises(SpecError, match="delay 100ms: impairment engine 'nft' cannot apply it because this kernel lacks"):
        swarm.links.impair(impairment(delay="100ms", loss="2%"), between=["sat01", "sat02"])
    assert not runner.in_node("tc") and not runner.in_node("nft")
    assert all(r.configured == "loss 1%" for r in swarm.links.rows())


def test_up_refuses_links_the_engine_cannot_apply_before_creating_anything(tmp_path):
    swarm, runner = make_swarm(tmp_path, {"default": {"profile": "iss-ku"}})
    runner.listed = False
    with pytest.raises(SpecError, match="delay 300ms: .*sch_netem"):
        swarm.up()
    assert not [a for a, _ in runner.inputs if a[:3] == ["ip", "netns", "add"]]


def test_cut_heal_keep_configured_conditions(tmp_path):
    swarm, runner = make_swarm(tmp_path, {"overrides": [{"between": ["sat01", "sat02"], "loss": "5%"}]})
    ctl = swarm.links
    ctl.apply_spec()
    ctl.cut("sat01", "sat02")
    assert {(r.src, r.dst): r.effective for r in ctl.rows()}[("sat02", "sat01")] == "down"
    ctl.partition([["sat01"], ["sat02", "sat03"]])
    assert sum(r.cut for r in ctl.rows()) == 4
    ctl.heal()
    assert [(r.src, r.dst, r.effective) for r in ctl.rows()] == [("sat01", "sat02", "loss 5%"), ("sat02", "sat01", "loss 5%")]


def test_clear_removes_only_the_frameworks_qdisc(tmp_path):
    swarm, runner = make_swarm(tmp_path, {"default": {"rate": "1M"}})
    swarm.links.apply_spec()
    runner.root_qdisc = '[{"kind":"htb","handle":"5eed:","root":true}]'
    runner.inputs.clear()
    swarm.links.clear()
    batches = [stdin for _, argv, stdin in runner.in_node("tc") if argv[1] == "-batch"]
    assert batches == ["qdisc del dev eth1 root\n"] * 3
    assert all(stdin == "table netdev swarm_emu\ndelete table netdev swarm_emu\n" for _, _, stdin in runner.in_node("nft"))
    runner.root_qdisc = '[{"kind":"tbf","handle":"8001:","root":true}]'  # someone else's: left alone
    runner.inputs.clear()
    swarm.links.clear()
    assert not [1 for _, argv, _ in runner.in_node("tc") if argv[1] == "-batch"]
    with pytest.raises(Exception, match="did not make; not replacing it"):
        swarm.links.impair(impairment(rate="2M"), all_links=True)


def test_link_state_round_trips_through_json():
    state = LinkState(engine="nft", base={("a", "b"): impairment(loss="1%", rate="1M")}, cuts={("b", "a")})
    again = LinkState.from_json(json.loads(json.dumps(state.to_json())))
    assert again.base == state.base and again.cuts == state.cuts
    assert again.effective()[("b", "a")].down


# ------------------------------------------------------------------------------------------ timeline
class FakeController:
    def __init__(self):
        self.calls = []
        self.causes = set()  # who the timeline said its changes came from (LinkController.caused_by)

    def caused_by(self, cause):
        self.causes.add(cause)
        return self

    def cut(self, a, b):
        self.calls.append(("cut", a, b, time.time()))

    def heal(self, *pair):
        self.calls.append(("heal", *pair, time.time()))

    def node_action(self, node, action):
        if action == "kill":
            raise RuntimeError("boom")
        self.calls.append((action, node, time.time()))

    def restore(self):
        self.calls.append(("restore",))


def test_timeline_applies_at_offsets_and_records_actual_times():
    ctl = FakeController()
    events = [FaultEvent.model_validate(e) for e in (
        {"at": "0.2s", "heal": "all"}, {"at": "100ms", "cut": ["sat01", "sat02"]}, {"at": "0.3s", "node": "sat02", "action": "kill"})]
    tl = FaultTimeline(ctl, events, test_id="t1", run_id="r")
    t0 = time.time() + 0.05
    tl.start(t0)
    rows = tl.finish()
    assert [c[0] for c in ctl.calls] == ["cut", "heal", "restore"]
    assert ctl.causes == {"fault timeline"}
    assert [r["kind"] for r in rows] == ["heal", "cut", "node"]
    assert [r["ok"] for r in rows] == [True, True, False] and rows[2]["error"] == "boom"
    for r in rows:
        assert 0 <= r["offset_s"] - r["at_s"] < 0.1, r


def test_timeline_that_never_started_records_why():
    rows = FaultTimeline(FakeController(), [FaultEvent.model_validate({"at": "1s", "heal": "all"})]).finish(restore=False)
    assert rows[0]["ok"] is False and "never started" in rows[0]["error"]


# ---------------------------------------------------------------------------------------------- CLI
@pytest.mark.parametrize("args,needle", [
    (["impair", "nosuch", "--all", "--loss", "1%"], "swarm 'nosuch': not up"),
    (["fault", "nosuch", "cut", "sat01", "sat02"], "swarm 'nosuch': not up"),
    (["fault", "nosuch", "explode"], "Invalid value for '{cut|heal|partition|node}'"),
])
def test_cli_bad_input_exit_2(args, needle, tmp_path):
    res = subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "SWARM_WORKDIR": str(tmp_path)}, timeout=60)
    assert res.returncode == 2 and needle in res.stderr, res.stderr


def test_a_refused_fault_changes_no_state(tmp_path):
    swarm, runner = make_swarm(tmp_path, caps=replace(CAPS, nftables=False))
    with pytest.raises(SpecError, match="up down: .*this kernel lacks nftables"):
        swarm.links.cut("sat01", "sat02")
    assert swarm.links.rows() == [] and not runner.in_node("nft")


def test_up_with_link_delay_resolves_the_links_once_and_builds_one_link_controller(tmp_path, monkeypatch):
    """One `up` with a delay on every link: the spec's links are resolved once and one link controller checks and
    applies them (preflight, the links add-on's check and its start share it). Counted by wrapping the resolver
    and the controller's constructor; the backend's node phase is skipped (no nodes are made here)."""
    import netem.runtime.links as links_module
    import swarm.runtime.swarm as swarm_module

    swarm, runner = make_swarm(tmp_path, {"default": {"delay": "10ms"}}, caps=NETEM_CAPS)
    resolved, built = [], []
    resolve, init = links_module.resolve_links, links_module.LinkController.__init__
    monkeypatch.setattr(links_module, "resolve_links", lambda *a: resolved.append(a) or resolve(*a))
    monkeypatch.setattr(links_module.LinkController, "__init__",
                        lambda self, *a, **kw: built.append(self) or init(self, *a, **kw))
    monkeypatch.setattr(links_module, "_RESOLVED", {})  # nothing resolved by an earlier test in this process
    monkeypatch.setenv("SWARM_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(swarm, "_check_conflicts", lambda: None)  # the recording runner lists the namespaces
    monkeypatch.setattr(swarm, "_nodes", lambda timeout: None)
    monkeypatch.setattr(swarm_module, "ensure_neighbour_capacity", lambda *a: {})
    swarm.owner = "/runs/r1"  # an experiment run's swarm: its state names the run (for `--resume`)
    swarm.up()
    assert len(resolved) == 1 and len(built) == 1
    assert json.loads((tmp_path / ".swarm" / "t" / "state.json").read_text())["owner"] == "/runs/r1"
    assert {n for n, argv, _ in runner.in_node("tc") if argv[1] == "-batch"} == {"sat01", "sat02", "sat03"}
    assert swarm.links is built[0]  # what `impair` and the mesh use afterwards: the controller `up` used


def test_a_swarms_services_are_built_once_and_again_when_its_context_changes(tmp_path):
    swarm, _runner = make_swarm(tmp_path)
    first = swarm.links
    assert swarm.links is first and swarm.dtn is swarm.dtn and swarm.mesh is swarm.mesh and swarm.mesh.links is first
    swarm.runner = InputRunner()  # something the services use was replaced: they are built again, with it
    assert swarm.links is not first and swarm.links.swarm.runner is swarm.runner


def test_a_controller_caused_by_someone_says_so_in_the_events_it_logs(tmp_path):
    from swarm.observe.events import EVENTS_FILE

    swarm, _runner = make_swarm(tmp_path)
    swarm.links.caused_by("fault timeline").cut("sat01", "sat02")
    swarm.links.heal()
    events = [json.loads(line) for line in (tmp_path / ".swarm" / "t" / EVENTS_FILE).read_text().splitlines()]
    causes = {(e["type"], e.get("kind"), e["cause"]) for e in events}
    assert ("fault", "cut", "fault timeline") in causes and ("link", None, "fault timeline") in causes
    assert [e["cause"] for e in events if e.get("kind") == "heal"] != ["fault timeline"]
    assert swarm.links.cause is None  # the swarm's own controller was not changed

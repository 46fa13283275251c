"""The userspace link engine's planner (pure): golden configuration and iptables rules, the same meaning as
the kernel engine's plan (queue limit, distributions, loss models), the bound on held data, engine choice
and its refusals, the runtime's argv builders, and the engine's own parser against the planner's output."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import replace

import pytest

from netem.engines import choose_engine

from netem.engines.base import tcp_buffer_bytes, tcp_buffer_sysctls

from netem.engines.hold import LINKD_MAX_BYTES, LinkdHold

from netem.engines.userspace import UserspaceEngine, UserspacePlan, linkd_line, plan_ipt, plan_linkd
from netem.tc import netem_args, netem_limit
from netem.spec.links import Impairment, LinksSpec, impairment, links_with_engine, resolve_links
from swarm.caps import Capabilities
from swarm.errors import SpecError
from swarm.runtime.backends.netns.backend import switch_port
from netem.engines.drivers.linkd import (KERNEL_HOLD, KERNEL_HOLD_ENV, cache_dir, ctl_argv, ctl_body, ctl_socket, engine_argv,
                                 instance_spec, jump_argv, kernel_hold_setting, linkd_binary,
                                 parse_kv, swarm_engine_argv)

from conftest import REPO, golden

CAPS = Capabilities(kernel="x", root=True, docker=False, docker_version="", compose=[], compose_version="",
                    netns=True, sch_netem=False, batman_adv=False, nftables=True, tbf=True,
                    iperf3_version="iperf 3.12", batmand=True, ddsperf=True, htb=True, nfqueue=True,
                    linkd="/opt/swarm-linkd")
NODES = ["sat01", "sat02", "sat03"]
MAC = {"sat01": "02:42:0A:C8:00:02", "sat02": "02:42:0a:c8:00:03", "sat03": "02:42:0a:c8:00:04"}


def node_plan(spec: dict, node: str) -> UserspacePlan:
    eff = resolve_links(LinksSpec.model_validate(spec), NODES)
    ingress = {MAC[s]: imp for (s, d), imp in eff.items() if d == node}
    egress = {MAC[d]: imp for (s, d), imp in eff.items() if s == node}
    labels = {MAC[s]: f"{s}->{d}" for (s, d) in eff if d == node}
    return UserspaceEngine(CAPS).plan_node("eth1", egress, ingress, labels)


def test_golden_plan_every_condition():
    spec = {"overrides": [
        {"between": ["sat01", "sat02"], "delay": "1300ms", "jitter": "10ms", "loss": "1%"},
        {"between": ["sat03", "sat02"], "direction": "a->b", "delay": "250ms", "jitter": "20ms",
         "jitter_distribution": "paretonormal", "jitter_correlation": "25%", "loss_gemodel": "1%,10%,50%,0%",
         "rate": "10Mbit", "corrupt": "0.1%", "duplicate": "1%", "reorder": "5%"},
    ]}
    cmds = node_plan(spec, "sat02")
    text = f"# linkd\n{cmds.linkd}# iptables-restore --noflush\n{cmds.ipt}# tc\n{cmds.tc}\n# nft\n{cmds.nft}\n"
    assert text == golden("impair_userspace_sat02.txt", text)
    assert cmds.tc == [] and not cmds.segment  # rate is shaped in the engine; NFQUEUE segments GSO itself


def test_a_cut_link_is_down_in_the_engine_and_at_the_ingress_hook():
    cmds = node_plan({"overrides": [{"between": ["sat01", "sat02"], "up": False}]}, "sat02")
    assert cmds.linkd == "link 02:42:0a:c8:00:02 down  # sat01->sat02\n"
    assert "ether saddr 02:42:0A:C8:00:02 counter drop" in cmds.nft  # also stops ARP, which iptables never sees


def test_no_conditions_no_engine_and_no_rules():
    cmds = node_plan({"overrides": [{"between": ["sat01", "sat03"], "delay": "10ms"}]}, "sat02")
    assert cmds.linkd is None and cmds.ipt is None and cmds.nft is None


def test_same_meaning_as_the_kernel_engine():
    imp = impairment(delay="100ms", jitter="10ms", jitter_distribution="normal", jitter_correlation="25%",
                     loss_gemodel="1%", rate="1Gbit")
    line = linkd_line("aa:bb:cc:dd:ee:ff", imp)
    assert f"limit={netem_limit(imp)}" in line  # the queue limit netem gets
    assert "ge=1%,99%,100%,0%" in line  # NetEm's gemodel defaults for missing r, 1-h, 1-k
    assert netem_args(imp)[2:] == ["delay", "100ms", "10ms", "25%", "distribution", "normal",
                                  "loss", "gemodel", "1%", "99%", "100%", "0%"]


def test_the_engine_parses_what_the_planner_writes():
    binary = linkd_binary()
    if not binary:
        pytest.skip("swarm-linkd not built (make setup)")
    cfg = plan_linkd({"02:00:00:00:00:01": impairment(delay="4s", jitter="1ms", jitter_distribution="pareto",
                                                      loss="2%", loss_correlation="10%", rate="100Mbit",
                                                      duplicate="1%", corrupt="1%", reorder="2%"),
                      "02:00:00:00:00:02": Impairment(up=False)})
    res = subprocess.run([binary, "check"], input=cfg, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([binary, "check"], input="link 02:00:00:00:00:01 dist=gamma\n", capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 2 and 'dist "gamma"' in res.stderr


def test_held_data_above_the_bound_is_refused_before_anything_runs():
    links = resolve_links(LinksSpec.model_validate(
        {"overrides": [{"between": ["sat01", "sat02"], "direction": "a->b", "delay": "4s", "rate": "10Gbit"}]}), NODES)
    with pytest.raises(SpecError, match=r"link sat01->sat02: delay 4s at rate 10Gbit: sat02's userspace engine "
                                        r"would hold 5.00 GB, above its bound of 1.07 GB"):
        UserspaceEngine(CAPS).check(links)
    ok = resolve_links(LinksSpec.model_validate(
        {"overrides": [{"between": ["sat01", "sat02"], "delay": "4s", "rate": "1Gbit"}]}), NODES)
    UserspaceEngine(CAPS).check(ok)  # 500 MB: fits
    assert LINKD_MAX_BYTES == 1 << 30


def test_engine_choice():
    assert choose_engine(replace(CAPS, sch_netem=True)).name == "netem"
    assert choose_engine(CAPS).name == "userspace"
    assert choose_engine(replace(CAPS, nfqueue=False)).name == "nft"
    assert choose_engine(replace(CAPS, linkd="")).name == "nft"
    assert choose_engine(CAPS, "nft").name == "nft"
    with pytest.raises(SpecError, match=r"engine 'userspace': this host lacks the swarm-linkd binary .*usable here: nft"):
        choose_engine(replace(CAPS, linkd=""), "userspace")
    with pytest.raises(SpecError, match=r"engine 'userspace': this kernel lacks the iptables NFQUEUE target"):
        choose_engine(replace(CAPS, nfqueue=False), "userspace")


def test_nothing_runs_here_names_every_engine():
    none = choose_engine(replace(CAPS, nfqueue=False, nftables=False))
    links = {("sat01", "sat02"): impairment(delay="10ms")}
    with pytest.raises(SpecError, match=r"link sat01->sat02: delay 10ms: no impairment engine runs here: this kernel "
                                        r"lacks nftables and NetEm \(sch_netem\), and the userspace engine needs the "
                                        r"iptables NFQUEUE target"):
        none.check(links)


@pytest.mark.parametrize("values,needle", [
    ({"delay": "-5ms"}, "delay"),
    ({"delay": "abc"}, "delay"),
    ({"delay": "10ms", "jitter": "1ms", "jitter_distribution": "gamma"}, "jitter_distribution"),
    ({"loss_gemodel": "1%,2%,3%,4%,5%"}, "loss_gemodel"),
])
def test_bad_values_name_the_parameter(values, needle):
    with pytest.raises(SpecError, match=needle):
        impairment(**values)


def test_jitter_without_delay_names_the_link():
    with pytest.raises(SpecError, match=r"links: link sat01->sat02: jitter 10ms needs a delay"):
        resolve_links(LinksSpec.model_validate({"overrides": [{"between": ["sat01", "sat02"], "jitter": "10ms"}]}),
                      NODES)


def test_engine_pin_from_the_command_line():
    assert links_with_engine(None, "userspace").engine == "userspace"
    with pytest.raises(SpecError, match="unknown impairment engine"):
        links_with_engine(None, "tc")


def test_runtime_argv():
    argv = engine_argv("/bin/swarm-linkd")
    assert argv[:2] == ["sh", "-c"] and argv[4:6] == ["/bin/swarm-linkd", "run"]
    assert "--state" in argv and "--realtime" in argv and "--queue" in argv
    assert ctl_argv("L", "set", "link a delay=1ms\n\nlink b down\n") == [
        "L", "ctl", "--control", "/run/swarm-linkd.sock", "set", "link a delay=1ms", "link b down"]
    assert ctl_argv("L", "set", None)[-1] == "# no links"  # an empty configuration is an argument, not stdin
    assert parse_kv("ok gen=3 set_at_ns=12\n") == {"gen": "3", "set_at_ns": "12"}
    # what ctl writes to the socket, and what the runtime writes itself when it can reach the socket
    assert ctl_body("set", "link a delay=1ms\n\nlink b down\n") == "set\nlink a delay=1ms\nlink b down\n"
    assert ctl_body("set", None) == "set\n# no links\n" and ctl_body("ping") == "ping\n"


@pytest.mark.skipif(not os.access(linkd_binary() or "/nonexistent", os.X_OK), reason="swarm-linkd not built")
def test_control_socket_speaks_the_engines_protocol(tmp_path):
    """The runtime's direct socket requests against the real engine (no queue traffic needed): ping, a set the
    engine takes, one it refuses (exit 2, as `ctl`), and no engine (exit 1)."""
    sock = str(tmp_path / "c.sock")
    eng = subprocess.Popen(["unshare", "--net", "--", linkd_binary(), "run", "--queue", "0", "--control", sock],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        assert ctl_socket(sock, ctl_body("ping"), 5).stdout.startswith("ok pid=")
        res = ctl_socket(sock, ctl_body("set", "link 02:00:00:00:00:01 delay=5ms\n"), 5)
        assert res.returncode == 0 and "gen=" in res.stdout, res
        res = ctl_socket(sock, ctl_body("set", "link 02:00:00:00:00:01 delay=banana\n"), 5)
        assert res.returncode == 2 and "banana" in res.stderr, res
    finally:
        eng.kill()
        eng.wait()
    assert ctl_socket(sock, ctl_body("ping"), 1).returncode == 1


@pytest.mark.skipif(not os.access(linkd_binary() or "/nonexistent", os.X_OK), reason="swarm-linkd not built")
def test_one_engine_serves_every_nodes_queue(tmp_path):
    """A swarm's engine (`--instance`, one per node) answers on each node's control socket with its own
    configuration, one process for all; a queue given twice is refused with one line, exit 2."""
    usage = subprocess.run([linkd_binary(), "--help"], capture_output=True, text=True, timeout=10).stderr
    if "--instance" not in usage:
        pytest.skip(f"{linkd_binary()} was built before --instance: run `make setup`")
    socks = [str(tmp_path / f"n{i}.sock") for i in (1, 2)]
    specs = [instance_spec(i + 1, socks[i], str(tmp_path / f"n{i}.conf"), None) for i in range(2)]
    argv = swarm_engine_argv(linkd_binary(), specs)
    assert argv[:3] == ["sh", "-c", argv[2]] and argv.count("--instance") == 2 and "--realtime" in argv
    run = argv[argv.index("run"):]
    eng = subprocess.Popen(["unshare", "--net", "--", linkd_binary(), *run[1:-1]], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            if all(os.path.exists(s) for s in socks):
                break
            time.sleep(0.05)
        pids = {parse_kv(ctl_socket(s, ctl_body("ping"), 5).stdout)["pid"] for s in socks}
        assert pids == {str(eng.pid)}
        assert ctl_socket(socks[0], ctl_body("set", "link 02:00:00:00:00:01 delay=5ms\n"), 5).returncode == 0
        stats = [ctl_socket(s, ctl_body("stats"), 5).stdout for s in socks]
        assert "link 02:00:00:00:00:01" in stats[0] and "link 02:00:00:00:00:01" not in stats[1], stats
        assert (tmp_path / "n0.conf").exists() and not (tmp_path / "n1.conf").exists()  # each node's own state
    finally:
        eng.kill()
        eng.wait()
    twice = [instance_spec(3, socks[0], str(tmp_path / "a.conf")), instance_spec(3, socks[1], str(tmp_path / "b.conf"))]
    res = subprocess.run([linkd_binary(), "run", *[a for s in twice for a in ("--instance", s)]],
                         capture_output=True, text=True, timeout=10)
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and "queue 3 is given twice" in res.stderr
    res = subprocess.run([linkd_binary(), "run", "--instance", "queue=1 colour=red"], capture_output=True, text=True,
                         timeout=10)
    assert res.returncode == 2 and 'unknown key "colour"' in res.stderr


def test_plan_ipt_has_no_queue_bypass():
    script = plan_ipt({"02:00:00:00:00:01": impairment(delay="1ms")})
    assert "--queue-bypass" not in script and "NFQUEUE --queue-num 0" in script


def test_hold_at_a_hop_gives_each_node_its_own_chain_queue_and_port_match():
    """At the switch every node's engine shares one namespace: chain and queue per node, jump per bridge port."""
    hold = LinkdHold.at_hop(7)
    assert hold == LinkdHold(chain="SWARM_EMU_LINKS_7", queue=8)
    assert plan_ipt({"02:00:00:00:00:01": impairment(delay="1ms")}, hold) == (
        "*mangle\n:SWARM_EMU_LINKS_7 - [0:0]\n"
        "-A SWARM_EMU_LINKS_7 -m mac --mac-source 02:00:00:00:00:01 -j NFQUEUE --queue-num 8\nCOMMIT\n")
    assert jump_argv("-I", "eth1", hold, "i7") == [
        "iptables", "-t", "mangle", "-I", "FORWARD", "-m", "physdev", "--physdev-out", "i7", "-j", "SWARM_EMU_LINKS_7"]
    assert jump_argv("-C", "eth1", LinkdHold()) == [
        "iptables", "-t", "mangle", "-C", "PREROUTING", "-i", "eth1", "-j", "SWARM_EMU_LINKS"]
    argv = engine_argv("/bin/swarm-linkd", hold.queue, ("i7", "02:42:0A:C8:00:08"))
    assert argv[argv.index("--queue") + 1] == "8"
    assert argv[argv.index("--inject-dev") + 1] == "i7" and argv[argv.index("--inject-mac") + 1] == "02:42:0a:c8:00:08"
    assert "--inject-dev" not in engine_argv("/bin/swarm-linkd")
    assert "--kernel-hold" not in engine_argv("/bin/swarm-linkd")  # the engine's own default
    argv = engine_argv("/bin/swarm-linkd", 3, None, 100)
    assert argv[argv.index("--kernel-hold") + 1] == "100"
    assert switch_port(7, "eth1") == "i7" and switch_port(7, "eth0") == "g7"
    # the userspace engine's node plan follows the hold it is given
    cmds = UserspaceEngine(CAPS).plan_node("eth1", {}, {"02:00:00:00:00:01": impairment(delay="1ms")},
                                                     None, hold)
    assert cmds.ipt == plan_ipt({"02:00:00:00:00:01": impairment(delay="1ms")}, hold)


@pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo not installed")
def test_engine_unit_tests_pass():
    """The engine's own unit tests (model.rs: shares, distributions, rate composition) through cargo."""
    res = subprocess.run(["cargo", "test", "-q", "--release", "--locked", "--manifest-path",
                          str(REPO / "netem" / "linkd" / "Cargo.toml")], capture_output=True, text=True, timeout=900,
                         env={**os.environ, "CARGO_TARGET_DIR": str(cache_dir() / "linkd-target")})
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


def test_tcp_buffers_from_the_bandwidth_delay_product():
    links = resolve_links(LinksSpec.model_validate({"tcp_buffers": "bdp", "overrides": [
        {"between": ["sat01", "sat02"], "profile": "iss-ku"},  # 517 Mbit/s, 300 ms each way
        {"between": ["sat02", "sat03"], "delay": "1ms"}]}), NODES)
    # 517e6 bit/s x 0.6 s / 8 = 38.8 MB; twice that
    assert tcp_buffer_bytes(links, "sat01") == int(2 * 517e6 * 0.6 / 8)
    assert tcp_buffer_bytes(links, "sat03") == 6 * 2**20  # 2 ms x 1 Gbit/s is below Linux's default
    assert tcp_buffer_bytes({}, "sat01") == 0
    lunar = resolve_links(LinksSpec.model_validate({"default": {"profile": "lunar-relay"}}), NODES)
    assert tcp_buffer_bytes(lunar, "sat01") == int(2 * 1e9 * 2.6 / 8)  # no rate: 1 Gbit/s assumed
    assert tcp_buffer_sysctls(1000)["net.ipv4.tcp_rmem"] == "4096 131072 1000"


def test_without_netem_and_nfqueue_the_refusal_names_both():
    nft = choose_engine(replace(CAPS, nfqueue=False))
    with pytest.raises(SpecError, match=r"delay 10ms: impairment engine 'nft' cannot apply it because this kernel lacks "
                                        r"NetEm \(sch_netem\) and the userspace engine needs the iptables NFQUEUE "
                                        r"target \(xt_NFQUEUE\); possible here: loss, rate, link up/down"):
        nft.check({("sat01", "sat02"): impairment(delay="10ms")})


def test_kernel_hold_setting(monkeypatch):
    monkeypatch.delenv(KERNEL_HOLD_ENV, raising=False)
    assert kernel_hold_setting() == KERNEL_HOLD
    monkeypatch.setenv(KERNEL_HOLD_ENV, "100")
    assert kernel_hold_setting() == 100
    for bad in ("0", "x", "70000", "-5"):
        monkeypatch.setenv(KERNEL_HOLD_ENV, bad)
        with pytest.raises(SpecError, match=f"SWARM_LINKD_KERNEL_HOLD '{bad}'"):
            kernel_hold_setting()


def _swarm_macs(n: int) -> list[str]:
    return [f"02:42:0a:40:00:{i:02x}" for i in range(2, n + 2)]


def test_a_condition_most_senders_share_is_one_default_line_and_one_rule():
    """Issue 39: 40 senders with one delay (a `links: default:`) and two exceptions are held as `link *` plus the
    exceptions, behind a RETURN for the sender with no condition and one catch-all NFQUEUE rule."""
    macs = _swarm_macs(40)
    ingress = {m: impairment(delay="10ms") for m in macs[:37]}
    ingress[macs[37]] = impairment(delay="50ms")
    ingress[macs[38]] = Impairment(up=False)
    hold = replace(LinkdHold.at_hop(40), senders=frozenset(macs))
    cmds = UserspaceEngine(CAPS).plan_node("eth1", {}, ingress, {}, hold)
    assert cmds.linkd.splitlines() == [linkd_line("*", impairment(delay="10ms"), "default: 37 senders"),
                                       linkd_line(macs[37], impairment(delay="50ms")), f"link {macs[38]} down"]
    assert cmds.linkd.startswith("link * delay=10000us ")
    assert cmds.ipt == ("*mangle\n:SWARM_EMU_LINKS_40 - [0:0]\n"
                        f"-A SWARM_EMU_LINKS_40 -m mac --mac-source {macs[39]} -j RETURN\n"
                        "-A SWARM_EMU_LINKS_40 -j NFQUEUE --queue-num 41\nCOMMIT\n")


def test_without_a_shared_condition_or_the_swarm_s_senders_each_sender_keeps_its_line():
    macs = _swarm_macs(40)
    ingress = {m: impairment(delay="10ms") for m in macs}
    plain = UserspaceEngine(CAPS).plan_node("eth1", {}, ingress, {}, LinkdHold())  # senders not known
    assert plain.linkd.count("\n") == 40 and plain.ipt.count("NFQUEUE") == 40 and "link *" not in plain.linkd
    few = {m: impairment(delay="10ms") for m in macs[:15]}  # below DEFAULT_MIN_SENDERS: as before
    cmds = UserspaceEngine(CAPS).plan_node("eth1", {}, few, {}, LinkdHold(senders=frozenset(macs)))
    assert "link *" not in cmds.linkd and cmds.ipt.count("--mac-source") == 15
    half = {m: impairment(delay="10ms") for m in macs[:18]}  # more senders with no condition than with it
    cmds = UserspaceEngine(CAPS).plan_node("eth1", {}, half, {}, LinkdHold(senders=frozenset(macs)))
    assert "link *" not in cmds.linkd and "RETURN" not in cmds.ipt


def test_pre_armed_senders_keep_a_pass_through_line_beside_a_default():
    macs = _swarm_macs(20)
    ingress = {m: Impairment(up=False) for m in macs[:19]} | {macs[19]: Impairment()}
    hold = LinkdHold(senders=frozenset(macs), passthrough=frozenset([macs[19]]))
    cmds = UserspaceEngine(CAPS).plan_node("eth1", {}, ingress, {}, hold)
    assert cmds.linkd.splitlines() == ["link * down  # default: 19 senders", f"link {macs[19]}"]
    assert "RETURN" not in cmds.ipt and cmds.ipt.count("NFQUEUE") == 1


def test_the_engine_parses_a_default_with_exceptions():
    binary = linkd_binary()
    if not binary:
        pytest.skip("swarm-linkd not built (make setup)")
    macs = _swarm_macs(20)
    cfg = plan_linkd({m: impairment(delay="10ms", rate="10Mbit") for m in macs[:19]} | {macs[19]: Impairment(up=False)},
                     hold=LinkdHold(senders=frozenset(macs)))
    assert cfg.startswith("link * ")
    res = subprocess.run([binary, "check"], input=cfg, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr

"""The iperf3 client command of one flow (pure, golden-tested like the other planners)."""
from __future__ import annotations

from experiments.traffic.model import ExperimentSpec, Flow, TestCase, flow_ips


def client_argv(flow: Flow, exp: ExperimentSpec, test: TestCase) -> list[str]:
    """The iperf3 client command of one flow (runs on flow.src)."""
    src_ip, dst_ip = flow_ips(flow, exp.network)
    argv = ["iperf3", "-c", dst_ip, "-p", str(flow.port), "-B", src_ip, "-t", f"{exp.duration:g}",
            "-i", f"{exp.iperf3.interval:g}", "-J", "--get-server-output"]
    if test.protocol == "udp":
        argv += ["-u", "-b", str(test.rate_bps)]
    if exp.iperf3.length:
        argv += ["-l", exp.iperf3.length]
    if exp.iperf3.window:
        argv += ["-w", exp.iperf3.window]
    if exp.iperf3.parallel > 1:
        argv += ["-P", str(exp.iperf3.parallel)]
    if exp.iperf3.pacing_timer_us:
        argv += ["--pacing-timer", str(exp.iperf3.pacing_timer_us)]
    return argv

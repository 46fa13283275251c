"""batman-adv, for real: tests/kernel_lab/guest_mesh.py brings up a 4-node netns swarm with `mesh:
{implementation: batman-adv}` inside the kernel lab (Debian's kernel under qemu has the module), and these tests
judge what it saw: convergence after up, after a cut (sat01 reaches sat02 over a third node) and after the heal
(direct again), each with its resolution as for batmand; `swarm mesh` reading batman-adv's originator table;
bridge loop avoidance off; IP over bat0; nothing left after `down`. One guest boot for the module.

OGM interval 200 ms: batman-adv switches a route once the lost neighbour's TQ falls below the detour's, which
takes a number of OGM intervals, so a short interval keeps the module's guest time to about a minute.
"""
from __future__ import annotations

import json
import sys

import pytest

from conftest import REPO
from klab import save_figures

pytestmark = [pytest.mark.kernel_lab, pytest.mark.root, pytest.mark.slow]


@pytest.fixture(scope="module")
def bat(kernel_lab):
    res = kernel_lab.run([sys.executable, "tests/kernel_lab/guest_mesh.py", "kl-bat", "222", "4", "200", "1",
                          "batman-adv"], cwd=str(REPO), env={"PYTHONPATH": str(REPO)}, timeout=1200, echo=True)
    lines = [line for line in res.stdout.splitlines() if line.startswith("KL-RESULT ")]
    assert res.rc == 0 and lines, f"guest run failed (rc {res.rc}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    figures = json.loads(lines[-1].removeprefix("KL-RESULT "))[0]
    save_figures("batman-adv", figures)
    return figures


def test_batman_adv_converges_after_up_and_swarm_mesh_reads_it(bat):
    assert bat["implementation"] == "batman-adv" and "kernel module" in bat["describe"]
    assert bat["up"]["converged"], bat["up"]
    assert bat["up"]["resolution_s"] is not None and bat["up"]["resolution_s"] < bat["up"]["converge_s"] + 1e-6
    assert bat["mesh_cli_rc"] == 0  # `swarm mesh`: every node converged
    sat01 = bat["report_sat01"]
    assert sat01["converged"] and sat01["next_hop"] == {"sat02": "sat02", "sat03": "sat03", "sat04": "sat04"}, sat01
    assert all(0 < (tq or 0) <= 255 for tq in sat01["neighbours"].values()), sat01["neighbours"]
    assert bat["bla"] == "disabled", bat["bla"]
    assert bat["ping_after_up"]


def test_batman_adv_cut_goes_two_hop_and_heal_comes_back(bat):
    cut, heal = bat["events"]
    assert cut["converged"], cut
    assert cut["sat01_to_sat02_via"] in ("sat03", "sat04"), cut  # over a third node
    assert cut["ping_sat01_sat02"], cut
    assert heal["converged"] and heal["sat01_to_sat02_via"] == "sat02" and heal["ping_sat01_sat02"], heal
    for ev in (cut, heal):
        assert 0 < ev["converge_s"] and 0 < ev["resolution_s"] <= ev["converge_s"] + 1e-6, ev


def test_batman_adv_down_leaves_nothing(bat):
    assert bat["down"] and bat["namespaces_left"] == [], bat

"""The DTN report on a recorded run (experiments/dtn-contacts.yaml on the compose backend, 2026-11-22:
tests/data/dtn/run-contacts, without raw/)."""
import shutil
from pathlib import Path

import yaml

from analysis.dtn import one_way_delay_s, write_dtn_report

RUN = Path(__file__).resolve().parents[1] / "data" / "dtn" / "run-contacts"


def test_report_pages_tables_and_figures(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    paths = write_dtn_report(run)
    md = paths["report_md"].read_text()
    assert "Seed 001 Table 1 shape" in md and "HDTN TCPCL (seed 001, RPi 4)" in md and "dtn7 tcp (ours)" in md
    assert (run / "report" / "goodput_vs_delay.png").stat().st_size > 10_000
    assert list((run / "report").glob("timeline_*.png"))
    assert "store held" not in md


def test_store_above_the_storage_limit_is_a_warning(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    exp = yaml.safe_load((run / "experiment.yaml").read_text())
    exp["dtn"] = {"storage": {"limit": "100kB"}}
    (run / "experiment.yaml").write_text(yaml.safe_dump(exp))
    md = write_dtn_report(run)["report_md"].read_text()
    assert "above dtn.storage.limit 100kB (dtn7-rs enforces no quota" in md


def test_one_way_delay_of_a_profile():
    assert one_way_delay_s("none") == 0 and one_way_delay_s("delay=2s,rate=100Mbit") == 2.0
    assert one_way_delay_s("lunar-relay") == 1.3

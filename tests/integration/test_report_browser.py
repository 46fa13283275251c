"""The report in a real browser (issue 11): headless Chromium (the Debian package) loads report.html, every
image decodes, no table runs out of the page at 1400 px, no table cell is blank; and it takes the screenshot.

The page is checked by a script appended to a copy of it, which writes its findings into an attribute of
<body>; `chromium --dump-dom` prints the DOM after the load, so no driver (Selenium, CDP) is needed.
SWARM_REPORT=path/to/report.html checks a real run's report too (e.g. `make demo`'s);
SWARM_SCREENSHOT_DIR keeps the screenshots.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))

WIDTH = 1400
CHECK = """<script>
window.addEventListener('load', () => {
  const images = [...document.images];
  const broken = images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt);
  const page = document.body.getBoundingClientRect();
  const over = [...document.querySelectorAll('table')].filter(t => {
    const r = t.getBoundingClientRect();
    return r.right > page.right + 1 || r.left < page.left - 1 || t.scrollWidth > t.clientWidth + 1;
  }).map(t => (t.previousElementSibling || {}).textContent || 'table');
  const blank = [...document.querySelectorAll('td')].filter(td => td.textContent.trim() === '').length;
  document.body.setAttribute('data-check', JSON.stringify({images: images.length, broken, over, blank,
    height: document.documentElement.scrollHeight, width: document.documentElement.scrollWidth}));
});
</script>"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def browse(page: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--window-size={WIDTH},1000", "--virtual-time-budget=10000", *extra, page.as_uri()],
                          capture_output=True, text=True, timeout=180)


def check_in_browser(report: Path, shots: Path, name: str) -> dict:
    probe = shots / f"{name}-check.html"
    probe.write_text(report.read_text().replace("</body>", CHECK + "</body>"))
    res = browse(probe, "--dump-dom")
    assert res.returncode == 0, res.stderr[-2000:]
    found = re.search(r'data-check="([^"]*)"', res.stdout)
    assert found, f"the page's check did not run: {res.stderr[-1000:]}"
    facts = json.loads(html.unescape(found.group(1)))
    # the whole page as one image: a window as tall as the page
    height = min(int(facts["height"]) + 20, 30000)
    shot = shots / f"{name}.png"
    res = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--window-size={WIDTH},{height}", "--virtual-time-budget=10000", f"--screenshot={shot}",
                          report.resolve().as_uri()], capture_output=True, text=True, timeout=180)
    assert res.returncode == 0 and shot.read_bytes()[:4] == b"\x89PNG", res.stderr[-2000:]
    facts["screenshot"] = str(shot)
    return facts


@pytest.fixture
def shots(tmp_path):
    require("chromium", chromium() is not None, "no chromium (apt-get install chromium)")
    keep = os.environ.get("SWARM_SCREENSHOT_DIR")
    out = Path(keep) if keep else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    return out


def assert_page_ok(facts: dict) -> None:
    assert facts["images"] > 0 and facts["broken"] == [], facts
    assert facts["over"] == [], f"tables wider than the page at {WIDTH} px: {facts['over']}"
    assert facts["width"] <= WIDTH, facts
    assert facts["blank"] == 0, f"{facts['blank']} blank table cells"


def test_demo_like_report_renders_in_chromium(shots, tmp_path):
    from analysis.traffic import write_report
    from test_report_honesty import demo_like

    host = {"cpus": 2, "kernel": "6.1", "iperf3": "3.12", "traffic_engine": "iperf3", "backend": "netns"}
    paths = write_report(tmp_path, demo_like(), host)
    facts = check_in_browser(paths["report_html"], shots, "demo-like-report")
    assert_page_ok(facts)
    page = paths["report_html"].read_text()
    assert "not measured: no concurrent window" in page


@pytest.mark.skipif(not os.environ.get("SWARM_REPORT"), reason="SWARM_REPORT names no real report to check")
def test_a_real_report_renders_in_chromium(shots):
    facts = check_in_browser(Path(os.environ["SWARM_REPORT"]), shots, "real-report")
    assert_page_ok(facts)

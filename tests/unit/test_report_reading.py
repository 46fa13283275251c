"""The report reads as well as it computes: sweep plots tick only the sizes run and keep the legend off the data;
HTML tables keep header words and numbers whole and group thousands; the DTN tests table says a setting every
test shares once instead of a column of it. (How the pages render in a real browser: tests/integration/
test_report_browser.py.)"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg

import analysis.dtn as dtn
from analysis.pages import format_value, html_table
from analysis.traffic import sweep_figure

RUN = Path(__file__).resolve().parents[1] / "data" / "dtn" / "run-contacts"


def drawn(fig):
    FigureCanvasAgg(fig).draw()
    return fig


def test_sweep_plot_ticks_only_the_sizes_run_and_its_legend_covers_no_data():
    nan = float("nan")
    ours = [("median", [2, 4, 8], [0.5, 0.25, nan], "C0", "o")]
    refs = [("thesis, median", [2, 3, 4, 5, 6, 7, 8], [17, 16, 14, 12, 11, 10, 9], "C0")]
    for secondary in (None, "thesis (Gbit/s)"):
        fig = drawn(sweep_figure("t", "Gbit/s", ours, refs, secondary=secondary))
        ax = fig.axes[0]
        assert list(ax.get_xticks()) == [2, 4, 8]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "4", "8"]
        legend = fig.legends[0].get_window_extent()
        for axes in fig.axes:  # the data area of both y axes
            assert not legend.overlaps(axes.get_window_extent())
        assert "size tested, not measured (1 point(s)" in " ".join(t.get_text() for t in fig.legends[0].get_texts())


def test_html_table_marks_numbers_keeps_header_words_whole_and_groups_thousands():
    table = pd.DataFrame({"bundle B": [100000, 1400], "rate /s": [10.5, 2048.0], "links": ["delay=1.3s,loss=1%", "none"],
                          "ok": [True, False]})
    page = html_table(table)
    assert '<th><span class="word">bundle</span> <span class="word">B</span></th>' in page
    assert '<td class="num">100,000</td>' in page and '<td class="num">1400</td>' in page
    assert '<td class="num">2,048.0</td>' in page and '<td class="num">10.5</td>' in page
    assert '<td class="text">delay=1.3s,<wbr>loss=1%</td>' in page and '<td class="text">True</td>' in page
    assert page.startswith('<div class="table">')  # a table wider than the page scrolls in its own box
    assert format_value(123456789) == "123,456,789" and format_value(5201) == "5201" and format_value(-20000) == "-20,000"


def test_the_dtn_tests_table_says_shared_settings_once():
    """(analysis.dtn is imported as a module: its `test_table` is no test.)"""
    tests = pd.read_csv(RUN / "tests.csv")
    two = pd.concat([tests, tests.assign(test_id="other", cla="ltp", bundle_size=100000)], ignore_index=True)
    items = dtn.shown_tests(dtn.test_table(two))
    assert items[0] == ("text", "Every test: routing epidemic, links none, 10 bundles/s.")
    shown = items[1][1]
    assert {"CLA", "bundle B"} <= set(shown.columns) and not {"routing", "links", "rate /s"} & set(shown.columns)
    assert len(shown.columns) == len(dtn.test_table(two).columns) - 3
    assert dtn.shown_tests(dtn.test_table(two.assign(routing=["epidemic", "spray"])))[0][1].startswith(
        "Every test: links none")


def test_worst_links_of_a_flow_with_only_its_senders_intervals(tmp_path):
    """A UDP flow whose receiver's report is missing (iperf3 without `server_output_json`) has the sender's
    intervals: packets counted, losses not. Its series shows throughput and no loss figure (mypy found the
    `lost_packets * 100` on None that raised here)."""
    import json
    import math

    from analysis.links import _worst_series

    doc = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "iperf3" / "udp.json").read_text())
    del doc["server_output_json"]
    (tmp_path / "raw" / "t1").mkdir(parents=True)
    (tmp_path / "raw" / "t1" / "sat01__sat02.json").write_text(json.dumps(doc))
    worst = pd.DataFrame([{"src": "sat01", "dst": "sat02", "protocol": "udp", "release_ts": 100.0}])
    [(label, t, mbps, loss)] = _worst_series(tmp_path, "t1", worst, 10.0, 1.0, 100.0)
    assert label == "sat01->sat02" and len(mbps) == len(loss) > 0 and all(m > 0 for m in mbps)
    assert all(math.isnan(v) for v in loss)

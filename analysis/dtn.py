"""Report of a `dtn` run: per-test figures, a table in the shape of seed 001's Table 1 (HDTN on Raspberry Pi 4),
goodput against one-way delay in the shape of seed 002 (HDTN to DTNME over LTP, 0/2/4 s) with the seeds' numbers
overlaid (analysis/reference/dtn/), and per test with faults or contacts a timeline: bundles by creation time
and latency, the UDP probe's losses, store occupancy per node, the contacts and faults marked.

Reads only the run folder's files (tests.csv, bundles.csv, store.csv, ip.csv, faults.csv, experiment.yaml).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib
import matplotlib.patches
import pandas as pd
import yaml
from matplotlib.figure import Figure

from analysis.pages import format_value, write_report_pages
from netem.spec.links import load_profiles
from swarm.dtn.contacts import link_schedule, parse_contact_plan
from swarm.dtn.agents import get_agent
from swarm.spec.dtn import DtnSpec, parse_size
from swarm.errors import SpecError
from swarm.units import parse_time_ms

REFERENCE = Path(__file__).resolve().parent / "reference" / "dtn"
SEED001 = REFERENCE / "seed001_hdtn_rpi4_table1.csv"
SEED002 = REFERENCE / "seed002_hdtn_ltp_delay.csv"
SEED004 = REFERENCE / "seed004_hdtn_segment_factors.csv"
BUNDLE_OVERHEAD = 87  # BPv7 header bytes dtn7-rs's /send adds to a payload (experiments.dtn.run)
DEFAULT_AGENT: str = DtnSpec.model_fields["agent"].default


def run_agent(exp: dict) -> str:
    """The agent a stored experiment ran (its `dtn.agent`, else the spec's default)."""
    return ((exp.get("dtn") or {}).get("agent")) or DEFAULT_AGENT


def _read(run_dir: Path, name: str) -> pd.DataFrame:
    path = run_dir / name
    return pd.read_csv(path) if path.exists() and path.stat().st_size else pd.DataFrame()


def one_way_delay_s(profile: str) -> float:
    """The one-way delay a test's profile label names ('delay=1.3s,...' or 'none'), in seconds; 0 if none."""
    for part in str(profile).split(","):
        key, _, value = part.partition("=")
        if key.strip() == "delay" and value:
            return parse_time_ms(value.strip()) / 1000.0
    if profile and profile != "none" and "=" not in str(profile):
        try:
            prof = load_profiles().get(str(profile))
            if prof is not None and prof.impairment.delay is not None:
                return prof.impairment.delay / 1000.0  # milliseconds in the model
        except (SpecError, ValueError):
            pass
    return 0.0


def test_table(tests: pd.DataFrame) -> pd.DataFrame:
    cols = {"test_id": "test", "src_agent": "from agent", "dst_agent": "to agent", "cla": "CLA", "routing": "routing",
            "profile": "links", "bundle_size": "bundle B",
            "rate": "rate /s", "bundles_sent": "sent", "bundles_delivered": "delivered", "delivery_ratio": "ratio",
            "latency_p50_s": "lat p50 s", "latency_p95_s": "lat p95 s", "latency_max_s": "lat max s",
            "goodput_bps": "goodput Mbit/s", "bundle_rate": "bundles/s", "store_peak_bundles": "store peak",
            "ip_lost": "IP lost", "cpu_busy_pct": "CPU %"}
    t = tests[[c for c in cols if c in tests.columns]].rename(columns=cols).copy()
    if "goodput Mbit/s" in t:
        t["goodput Mbit/s"] = t["goodput Mbit/s"] / 1e6
    return t


# what a test was set to (the other columns are what it measured), as a line says a setting every test shares
SETTINGS = {"CLA": "CLA {}", "routing": "routing {}", "links": "links {}", "bundle B": "bundles of {} B",
            "rate /s": "{} bundles/s"}


def shown_tests(t: pd.DataFrame) -> list[tuple[str, object]]:
    """The tests table as the report shows it: a setting every test shares leaves the table for one line above
    it, so that the measured columns fit the page (17 columns did not)."""
    shared = [c for c in SETTINGS if c in t and t[c].nunique(dropna=False) == 1]
    if not shared:
        return [("table", t)]
    said = ", ".join(SETTINGS[c].format(format_value(t[c].iloc[0])) for c in shared)
    return [("text", f"Every test: {said}."), ("table", t.drop(columns=shared))]


def rate_bins(bundles: pd.DataFrame, test_id: str) -> pd.Series:
    """Payload Mbit/s delivered per whole second of a test's active span (first and last second dropped, as
    seed 001 drops its first and last data points)."""
    b = bundles[(bundles["test_id"] == test_id) & (bundles["delivered"].astype(str) == "True")]
    if b.empty:
        return pd.Series(dtype=float)
    t = pd.to_numeric(b["delivered_ts"])
    start = float(pd.to_numeric(bundles[bundles["test_id"] == test_id]["created_ts"]).min())
    sec = ((t - start) // 1).astype(int)
    per = b.groupby(sec)["size"].sum() * 8 / 1e6
    return per.iloc[1:-1] if len(per) > 2 else per


def table1(tests: pd.DataFrame, bundles: pd.DataFrame, agent: str = DEFAULT_AGENT) -> pd.DataFrame:
    """Seed 001's Table 1 shape, one column per CLA of this run (its fastest max-rate test, else its fastest
    test), beside seed 001's TCPCL / STCP / LTP columns."""
    ours = {}
    for cla, group in tests.groupby("cla"):
        pick = group[group["rate"].astype(str) == "max"]
        pick = pick if len(pick) else group
        best = pick.sort_values("goodput_bps").iloc[-1]
        bins = rate_bins(bundles, best["test_id"])
        pair = (best.get("src_agent"), best.get("dst_agent"))  # a matrix run: the pair that ran it
        who = f"{pair[0]}→{pair[1]}" if all(isinstance(x, str) and x for x in pair) and pair[0] != pair[1] else (
            pair[0] if isinstance(pair[0], str) and pair[0] else agent)
        ours[f"{who} {cla} (ours)"] = {
            "Payload Only Rate (Mbits/sec)": best["goodput_bps"] / 1e6,
            "Total Rate (Mbits/sec)": best["total_rate_bps"] / 1e6,
            "Highest Rate (Mbits/sec)": bins.max() if len(bins) else math.nan,
            "Lowest Rate (Mbits/sec)": bins.min() if len(bins) else math.nan,
            "Bundle Count": best["bundles_delivered"],
            "Bundle Rate (Bundles/sec)": best["bundle_rate"],
            "Bundle size (bytes)": best["bundle_size"],
        }
    seed = pd.read_csv(SEED001)
    for r in seed.itertuples():
        ours[f"HDTN {r.cla} (seed 001, RPi 4)"] = {
            "Payload Only Rate (Mbits/sec)": r.payload_mbps, "Total Rate (Mbits/sec)": r.total_mbps,
            "Highest Rate (Mbits/sec)": r.highest_mbps, "Lowest Rate (Mbits/sec)": r.lowest_mbps,
            "Bundle Count": r.bundle_count, "Bundle Rate (Bundles/sec)": r.bundle_rate_per_s,
            "Bundle size (bytes)": "~100,000"}
    table = pd.DataFrame(ours)
    table.index.name = "Convergence Layer"
    return table.reset_index()


def delay_figure(tests: pd.DataFrame, path: Path, agent: str = DEFAULT_AGENT) -> tuple[Path, str]:
    """Goodput (Mbit/s) against one-way delay (s), per CLA, with seed 002's HDTN-to-DTNME LTP figures."""
    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    t = tests.copy()
    t["delay_s"] = [one_way_delay_s(p) for p in t["profile"]]
    for cla, g in t.groupby("cla"):
        g = g.groupby("delay_s")["goodput_bps"].max().reset_index()
        ax.plot(g["delay_s"], g["goodput_bps"] / 1e6, "o-", label=f"{get_agent(agent).title} {cla} (this run)")
    seed = pd.read_csv(SEED002)
    s400 = seed[seed["ltp_sessions"] == 400]
    ax.errorbar(s400["one_way_delay_s"], s400["rate_mbps"], yerr=s400["plus_minus_mbps"], fmt="s--", color="grey",
                capsize=4, label="HDTN→DTNME LTP, 400 sessions (seed 002)")
    s5000 = seed[seed["ltp_sessions"] == 5000]
    ax.plot(s5000["one_way_delay_s"], s5000["rate_mbps"], "^", color="black", label="… 5000 sessions (seed 002)")
    ax.set_xlabel("one-way delay (s)")
    ax.set_ylabel("goodput (Mbit/s, payload)")
    if t["delay_s"].max() > 5:  # a sweep out to 10 s: the short delays (where TCPCL and LTP cross) spread out
        ax.set_xscale("symlog", linthresh=0.1)
    positive = t["goodput_bps"][t["goodput_bps"] > 0]
    if len(positive) and positive.max() > 100 * positive.min():  # TCPCL at seconds of delay: orders below LTP
        ax.set_yscale("log")
    ax.set_xticks(sorted(set([0, 2, 4] + [float(x) for x in t["delay_s"]])))
    ax.set_xticklabels([f"{x:g}" for x in ax.get_xticks()])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path, ("Goodput against one-way delay. Ours: the fastest test per CLA and delay of this run (100 kB "
                  "bundles where the run used them); seed 002: HDTN to DTNME over LTP with 100,000-byte bundles.")


def segment_factors(tests: pd.DataFrame, ltp: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per ISL MTU and LTP segment size: goodput and its ratio to the MTU's smallest segment size (the sweep of
    `ltp_segments` x `isl_mtus`; the fastest test per point); with ltp.csv also the LTP programs' cost, payload
    bits carried per CPU-second of both ends (sender + receiver swarm-ltpcla), and its ratio: the capacity an
    LTP program bound by its CPU would have, which is what a segment size changes (seed 004)."""
    t = tests[tests["cla"] == "ltp"].dropna(subset=["ltp_segment", "isl_mtu"]).copy()
    if ltp is not None and not ltp.empty and "cpu_s" in ltp.columns:
        per = ltp.groupby("test_id").agg(cpu_s=("cpu_s", "sum"), carried=("bytes_received", "sum"))
        t = t.join(per, on="test_id")
        t["ltp_mbit_per_cpu_s"] = t["carried"] * 8 / t["cpu_s"] / 1e6
    cols = {"goodput_bps": "max", **({"ltp_mbit_per_cpu_s": "max"} if "ltp_mbit_per_cpu_s" in t else {})}
    g = t.groupby(["isl_mtu", "ltp_segment"]).agg(cols).reset_index()
    g["factor"] = g["goodput_bps"] / g.groupby("isl_mtu")["goodput_bps"].transform("first")
    if "ltp_mbit_per_cpu_s" in g:
        g["cpu_factor"] = g["ltp_mbit_per_cpu_s"] / g.groupby("isl_mtu")["ltp_mbit_per_cpu_s"].transform("first")
    g["fragments"] = [math.ceil((s + 8) / ((m - 20) // 8 * 8)) for s, m in zip(g["ltp_segment"], g["isl_mtu"])]
    return g.astype({"isl_mtu": int, "ltp_segment": int})


def segment_figure(factors: pd.DataFrame, path: Path) -> tuple[Path, str]:
    """Goodput ratio to the smallest segment size against segment size, per MTU, beside seed 004's HDTN factors."""
    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    for i, (mtu, g) in enumerate(factors.groupby("isl_mtu")):
        ax.plot(g["ltp_segment"], g["factor"], "o-", color=f"C{i}", label=f"goodput, MTU {mtu} (this run)")
        if "cpu_factor" in g:
            ax.plot(g["ltp_segment"], g["cpu_factor"], "^:", color=f"C{i}", label=f"bits per LTP CPU-s, MTU {mtu}")
    seed = pd.read_csv(SEED004)
    for i, (mtu, g) in enumerate(seed.groupby("mtu")):
        ax.plot(g["segment"], g["factor"], "s--", color=f"C{i}", alpha=0.6, label=f"HDTN, MTU {mtu} (seed 004)")
    ax.set_xscale("log")
    ax.set_xlabel("LTP segment size (bytes; above the MTU IP-fragmented)")
    ax.set_ylabel("ratio to the smallest segment size")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path, ("LTP goodput per segment size as a ratio to the run's smallest segment size at the same ISL MTU "
                  "(circles), and the payload carried per CPU-second of the two swarm-ltpcla programs as the same ratio "
                  "(triangles). Seed 004 (HDTN, 100 Gbit/s NICs): its stated factors over sub-MTU ('conventional') "
                  "segments (squares).")


def _contact_spans(exp: dict, nodes: list[str]) -> list[tuple[str, float, float]]:
    """(pair label, down from, down to) from the stored experiment's contact plan text (if any)."""
    c = exp.get("contacts") or {}
    if not c.get("text"):
        return []
    try:  # pairs the plan names (a pair never in contact is down throughout: not shaded)
        events = link_schedule(parse_contact_plan(c["text"]), nodes, "keep")
    except ValueError:
        return []
    spans, down = [], {}
    for e in events:
        key = f"{e.a}-{e.b}"
        if e.action == "down":
            down[key] = e.at
        elif key in down:
            spans.append((key, down.pop(key), e.at))
    horizon = float(exp.get("duration", 10)) + float(exp.get("drain", 30))
    spans += [(k, t, horizon) for k, t in down.items() if t > 0]  # down at 0 for good: never in contact
    return spans


def timeline_figure(run_dir: Path, test: pd.Series, bundles: pd.DataFrame, store: pd.DataFrame, ip: pd.DataFrame,
                    faults: pd.DataFrame, exp: dict, path: Path) -> tuple[Path, str]:
    tid, release = test["test_id"], float(test["release_ts"])
    b = bundles[bundles["test_id"] == tid].copy()
    fig = Figure(figsize=(9, 7.5))
    ax1, ax2, ax3 = fig.subplots(3, 1, sharex=True)
    got = b[b["delivered"].astype(str) == "True"]
    lost = b[b["delivered"].astype(str) != "True"]
    ax1.scatter(pd.to_numeric(got["created_ts"]) - release, pd.to_numeric(got["latency_s"]), s=6,
                label="bundle: latency by creation time")
    ax1.scatter(pd.to_numeric(got["delivered_ts"]) - release, [0] * len(got), s=4, marker="|", color="green",
                label="delivered at")
    if len(lost):
        ax1.scatter(pd.to_numeric(lost["created_ts"]) - release, [0] * len(lost), s=12, marker="x", color="red",
                    label="never delivered")
    ax1.set_ylabel("latency (s)")
    ax1.legend(fontsize=7, loc="upper right")
    if len(ip):
        i = ip[ip["test_id"] == tid].groupby("second")[["sent", "lost"]].sum().reset_index()
        ax2.bar(i["second"] + 0.5, i["lost"], width=0.9, color="tab:red", label="UDP probe datagrams lost")
        ax2.plot(i["second"] + 0.5, i["sent"], color="grey", lw=1, label="sent")
        ax2.legend(fontsize=7, loc="upper right")
    ax2.set_ylabel("IP per second")
    s = store[store["test_id"] == tid]
    for node, g in s.groupby("node"):
        ax3.plot(g["t_s"], g["bundles"], label=node, lw=1)
    ax3.set_ylabel("bundles stored")
    ax3.set_xlabel("seconds since release")
    if s["node"].nunique() <= 8:
        ax3.legend(fontsize=7, loc="upper left")
    nodes = sorted(set(s["node"])) if len(s) else []
    end = max([float(s["t_s"].max()) if len(s) else 0.0,
               float((pd.to_numeric(got["delivered_ts"]) - release).max()) if len(got) else 0.0, float(exp.get("duration", 0))])
    for ax in (ax1, ax2, ax3):
        ax.set_xlim(-2.5, end + 2)
    for label, lo, hi in _contact_spans(exp, nodes):
        if lo >= end:
            continue
        for ax in (ax1, ax2, ax3):
            ax.axvspan(lo, hi, color="grey", alpha=0.12)
        ax3.text(lo, ax3.get_ylim()[1] * 0.92, f" {label} down", fontsize=7)
    f = faults[faults["test_id"] == tid] if len(faults) else faults
    for r in f.itertuples():
        if isinstance(r.applied_ts, float) and not math.isnan(r.applied_ts):
            for ax in (ax1, ax2, ax3):
                ax.axvline(r.applied_ts - release, color="black", lw=0.6, ls=":")
            ax1.text(r.applied_ts - release, ax1.get_ylim()[1] * 0.95, f"{r.kind} {r.args}", fontsize=6, rotation=90, va="top")
    fig.suptitle(f"{tid}: bundles delivered late vs IP lost (contacts shaded, faults dotted)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path, (f"{tid}: top, each bundle's latency at its creation time (ticks: delivery times); middle, the UDP "
                  "probe beside the bundles (datagrams lost per second); bottom, bundles held per node. Grey: a link "
                  "of the contact plan down; dotted: faults and contact changes as applied.")


MATRIX_COLUMNS = {"src_agent": "from", "dst_agent": "to", "cla": "CLA", "owlt_s": "one-way s", "bundle_size": "bundle B",
                  "delivered": "delivered", "duplicates": "dups", "goodput_mbps": "goodput Mbit/s",
                  "latency_p50_s": "lat p50 s", "latency_p95_s": "lat p95 s", "failure": "what failed (the peer's log)"}


def matrix_table(tests: pd.DataFrame, gaps: pd.DataFrame) -> pd.DataFrame:
    """One row per cell of an interop matrix (agents, CLA, one-way delay, bundle size): delivered of sent,
    duplicates, goodput, latency p50/p95 and what failed, in the peer's own log line; cells not run (matrix_gaps)
    with their reason. Repeats of a cell are summed (delivered, sent, duplicates) and averaged."""
    t = tests[tests["src_agent"].fillna("").astype(str) != ""].copy()
    t["owlt_s"] = t["profile"].map(one_way_delay_s)
    rows = []
    for key, g in t.groupby(["src_agent", "dst_agent", "cla", "owlt_s", "bundle_size"], sort=False):
        failures = [f for f in (g["failure"] if "failure" in g else []) if isinstance(f, str) and f]
        rows.append(dict(zip(["src_agent", "dst_agent", "cla", "owlt_s", "bundle_size"], key),
                         delivered=f"{int(g['bundles_delivered'].sum())}/{int(g['bundles_sent'].sum())}",
                         duplicates=int(g["duplicates"].sum()), goodput_mbps=g["goodput_bps"].mean() / 1e6,
                         latency_p50_s=g["latency_p50_s"].mean(), latency_p95_s=g["latency_p95_s"].mean(),
                         failure=failures[0] if failures else ""))
    for g in gaps.to_dict("records") if not gaps.empty else []:
        rows.append({"src_agent": g["src_agent"], "dst_agent": g["dst_agent"], "cla": g.get("cla", ""),
                     "owlt_s": "", "bundle_size": g.get("bundle_size", ""), "delivered": "not run",
                     "failure": g["reason"]})
    return pd.DataFrame(rows, columns=list(MATRIX_COLUMNS)).rename(columns=MATRIX_COLUMNS)


def matrix_figure(tests: pd.DataFrame, gaps: pd.DataFrame, path: Path) -> tuple[Path, str]:
    """The matrix as a grid: a row per ordered pair of agents, a column per CLA x one-way delay x bundle size;
    each cell coloured by the share delivered (red 0 .. green 1) and labelled delivered/sent (+ duplicates);
    grey: not run (a bundle the CLA cannot carry, or no common CLA)."""
    t = tests[tests["src_agent"].fillna("").astype(str) != ""].copy()
    t["owlt_s"] = t["profile"].map(one_way_delay_s)
    pairs = list(dict.fromkeys(zip(t["src_agent"], t["dst_agent"])))
    for g in gaps.to_dict("records") if not gaps.empty else []:
        pairs = list(dict.fromkeys(pairs + [(g["src_agent"], g["dst_agent"])]))
    delays, sizes = sorted(t["owlt_s"].unique()), sorted(t["bundle_size"].unique())
    clas = list(dict.fromkeys(list(t["cla"]) + ([str(c) for c in gaps["cla"] if str(c) not in ("", "nan")]
                                                  if not gaps.empty else [])))
    cols = [(c, d, b) for c in clas for d in delays for b in sizes]
    gap_cells = {(g["src_agent"], g["dst_agent"], str(g["cla"]), float(g["bundle_size"]))
                 for g in (gaps.to_dict("records") if not gaps.empty else []) if str(g["bundle_size"]) not in ("", "nan")}
    fig = Figure(figsize=(max(6.0, 0.9 * len(cols) + 2), 0.7 * len(pairs) + 2.2))
    ax = fig.subplots()
    cmap = matplotlib.colormaps["RdYlGn"]
    for i, (a, b) in enumerate(pairs):
        for j, (c, d, size) in enumerate(cols):
            g = t[(t["src_agent"] == a) & (t["dst_agent"] == b) & (t["cla"] == c) & (t["owlt_s"] == d)
                  & (t["bundle_size"] == size)]
            color, label = _cell(g, cmap, (a, b, c, size) in gap_cells)
            ax.add_patch(matplotlib.patches.Rectangle((j, i), 1, 1, facecolor=color, edgecolor="white"))
            ax.text(j + 0.5, i + 0.5, label, ha="center", va="center", fontsize=7)
    ax.set_xlim(0, len(cols))
    ax.set_ylim(len(pairs), 0)
    ax.set_xticks([j + 0.5 for j in range(len(cols))])
    ax.set_xticklabels([f"{c}\n{d:g} s\n{_size_label(size)}" for c, d, size in cols], fontsize=7)
    ax.set_yticks([i + 0.5 for i in range(len(pairs))])
    ax.set_yticklabels([f"{a} → {b}" for a, b in pairs], fontsize=8)
    ax.set_title("Interop matrix: bundles delivered of sent (colour: share delivered)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path, ("Every ordered pair of agents (rows: source's agent → destination's) by CLA, one-way delay and "
                  "bundle size (columns). Grey: not run: a CLA one of the pair does not carry, or a bundle larger "
                  "than the CLA carries (the table says why).")


def _cell(g: pd.DataFrame, cmap, too_large: bool) -> tuple[object, str]:
    """A matrix cell's colour (share delivered) and label (delivered/sent, duplicates), grey when not run."""
    if g.empty:
        return "#d0d0d0", "too large" if too_large else "not carried"
    sent, got, dups = int(g["bundles_sent"].sum()), int(g["bundles_delivered"].sum()), int(g["duplicates"].sum())
    return cmap(got / sent if sent else 0.0), f"{got}/{sent}" + (f"\n+{dups} dup" if dups else "")


def _size_label(size: float) -> str:
    return f"{size / 1000:g} kB" if size >= 1000 else f"{size:g} B"


def write_dtn_report(run_dir: Path) -> dict[str, Path]:
    run_dir = Path(run_dir)
    tests = _read(run_dir, "tests.csv")
    if tests.empty:
        raise SpecError(f"{run_dir}: no finished DTN test (tests.csv is empty)")
    bundles, store = _read(run_dir, "bundles.csv"), _read(run_dir, "store.csv")
    ip, faults = _read(run_dir, "ip.csv"), _read(run_dir, "faults.csv")
    exp = yaml.safe_load((run_dir / "experiment.yaml").read_text())
    host = json.loads((run_dir / "host.json").read_text()) if (run_dir / "host.json").exists() else {}
    out = run_dir / "report"
    out.mkdir(exist_ok=True)
    t = test_table(tests)
    t.to_csv(out / "tests.csv", index=False)
    agent = run_agent(exp)
    t1 = table1(tests, bundles, agent)
    t1.to_csv(out / "table1.csv", index=False)
    sections = [("Tests", shown_tests(t)),
                ("Seed 001 Table 1 shape: payload and bundle rates per CLA", [("table", t1)]),
                ("Goodput against one-way delay (seed 002 shape)", [("figure", delay_figure(tests, out / "goodput_vs_delay.png", agent))])]
    if exp.get("agents") and "src_agent" in tests.columns:
        gaps = _read(run_dir, "matrix_gaps.csv")
        matrix = matrix_table(tests, gaps)
        matrix.to_csv(out / "matrix.csv", index=False)
        sections.insert(0, ("Interop matrix: every ordered pair of agents x every CLA both carry",
                            [("table", matrix), ("figure", matrix_figure(tests, gaps, out / "matrix.png"))]))
    if "ltp_segment" in tests.columns and tests["ltp_segment"].nunique() > 1:
        factors = segment_factors(tests, _read(run_dir, "ltp.csv"))
        factors.to_csv(out / "segment_factors.csv", index=False)
        sections.append(("LTP goodput against segment size (seed 004 shape)",
                         [("table", factors), ("figure", segment_figure(factors, out / "segment_factors.png"))]))
    timelines = []
    has_events = bool(exp.get("contacts")) or bool(exp.get("faults"))
    for _, test in tests.iterrows():
        if has_events:
            timelines.append(("figure", timeline_figure(run_dir, test, bundles, store, ip, faults, exp,
                                                        out / f"timeline_{test['test_id']}.png")))
    if timelines:
        sections.append(("Store and forward across contacts: bundles late, IP lost", timelines))
    warnings = []
    for r in tests.itertuples():
        if r.delivery_ratio < 1:
            warnings.append(f"{r.test_id}: {r.bundles_sent - r.bundles_delivered} of {r.bundles_sent} bundles not "
                            f"delivered within the drain time ({r.drain_s:g} s)")
        limit = ((exp.get("dtn") or {}).get("storage") or {}).get("limit")
        held = r.store_peak_bundles * (r.bundle_size + BUNDLE_OVERHEAD)
        if limit and held > parse_size(limit, "storage.limit"):
            warnings.append(f"{r.test_id}: a node's store held ~{held:,.0f} bytes ({r.store_peak_bundles} bundles), above "
                            f"dtn.storage.limit {limit} ({get_agent(agent).title} enforces no quota: the limit is the framework's check)")
        if isinstance(r.cpu_busy_max_pct, float) and r.cpu_busy_max_pct >= 95:
            warnings.append(f"{r.test_id}: host CPU saturated (max {r.cpu_busy_max_pct:.0f} %): rates measure this host")
    agents = (f"agents {', '.join(exp['agents'])} in every ordered pair (the sources run the first, the other nodes "
              "the second)") if exp.get("agents") else f"agent {get_agent(agent).title} on every node"
    intro = (f"Experiment `{exp.get('name')}`: pattern {exp.get('pattern')}, {agents}, {len(tests)} test(s). "
             "Latency: from the sender's request to its agent until the receiving "
             "program took the bundle from its agent (shared host clock). Goodput: payload bits delivered over the "
             "span from the first bundle created to the last delivered. Seed figures: analysis/reference/dtn/.")
    return write_report_pages(out, f"DTN run {run_dir.name}", intro, host, warnings, sections)

"""The report page writer every experiment type shares: report.md and a self-contained report.html
(images embedded as base64, inline CSS, no external resources) from a title, host facts, warnings and
sections of tables and figures.

Tables read as well as they compute: a header wraps only between its words, a number never wraps (and has its
thousands grouped from five digits on, as SI writes them), and a table wider than the page scrolls sideways in
its own box instead of squeezing its columns until words and numbers break."""
from __future__ import annotations

import base64
import html
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

_CSS = """
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
.table { max-width: 100%; overflow-x: auto; margin: 0.5em 0 1.5em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #bbb; padding: 0.2em 0.5em; text-align: right; }
th { background: #eee; vertical-align: bottom; }
th .word { white-space: nowrap; }
td.num { white-space: nowrap; font-variant-numeric: tabular-nums; }
td.text { overflow-wrap: break-word; }
.warn { background: #fff4d6; border-left: 4px solid #e0a000; padding: 0.5em 1em; }
img { max-width: 100%; }
"""


def write_report_pages(out: Path, title: str, intro: str, host_facts: dict, warnings: list[str],
                       sections: list) -> dict[str, Path]:
    """report.md and report.html in `out`: title, intro, host facts, warnings, then each section's
    tables, paragraphs and figures (`sections`: [(heading, [("table", DataFrame) | ("text", str) |
    ("figure", (path, caption))])])."""
    (out / "report.md").write_text(_report_md(title, intro, host_facts, warnings, sections))
    (out / "report.html").write_text(_report_html(title, intro, host_facts, warnings, sections))
    return {"report_md": out / "report.md", "report_html": out / "report.html"}


def format_value(value) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 1000 else f"{value:.4g}"
    if _is_number(value) and abs(value) >= 10_000:  # 100000 reads as 100,000; 1400 or a port stays as it is
        return f"{value:,}"
    return str(value)


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_))


def _display(table: pd.DataFrame) -> pd.DataFrame:
    return table.astype(object).map(format_value)


def markdown_table(table: pd.DataFrame) -> str:
    """A DataFrame as a Markdown table with the report's number formatting."""
    return _markdown(_display(table))


def _markdown(table: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(map(str, table.columns)) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)


def _facts(host_facts: dict) -> pd.DataFrame:
    return pd.DataFrame(
        [(key, (value or "(none)") if isinstance(value, str) else json.dumps(value)) for key, value in host_facts.items()],
        columns=["fact", "value"])


def _report_md(title: str, intro: str, host_facts: dict, warnings: list[str], sections: list) -> str:
    parts = [f"# {title}", intro, "## Host", _markdown(_facts(host_facts))]
    if warnings:
        parts += ["## Warnings", "\n".join(f"- {w}" for w in warnings)]
    for heading, items in sections:
        parts.append(f"## {heading}")
        for kind, item in items:
            parts.append(_markdown(_display(item)) if kind == "table" else item if kind == "text"
                         else f"![{item[1]}]({item[0].name})")
    return "\n\n".join(parts) + "\n"


def html_table(table: pd.DataFrame) -> str:
    """A DataFrame as an HTML table in its own sideways-scrolling box: each header word kept whole (headers wrap
    between words only; an underscore separates words), number cells marked `num` (never wrapped), the rest
    `text`."""
    head = "".join("<th>" + " ".join(f'<span class="word">{html.escape(w)}</span>' for w in _header_words(c)) + "</th>"
                   for c in table.columns)
    rows = []
    for values in table.astype(object).itertuples(index=False):
        cells = "".join(f'<td class="num">{html.escape(format_value(v))}</td>' if _is_number(v) and format_value(v) else
                        f'<td class="text">{_breakable(format_value(v))}</td>' for v in values)
        rows.append(f"<tr>{cells}</tr>")
    return (f'<div class="table"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n' + "\n".join(rows)
            + "\n</tbody></table></div>")


def _header_words(column) -> list[str]:
    """A header's words: a column named like `median_loss_pct` reads as "median loss pct" (its CSV keeps the name)."""
    return re.split(r"[\s_]+", str(column).strip())


def _breakable(text: str) -> str:
    """Escaped text that may also wrap after a comma with no space after it (a link profile such as
    `delay=1.3s,loss=1%` is a list, not one word), as it may after a space or a hyphen."""
    return ",<wbr>".join(html.escape(part) for part in text.split(","))


def _report_html(title: str, intro: str, host_facts: dict, warnings: list[str], sections: list) -> str:
    parts = [f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(intro)}</p>", "<h2>Host</h2>",
             html_table(_facts(host_facts))]
    if warnings:
        items = "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
        parts.append(f'<h2>Warnings</h2><div class="warn"><ul>{items}</ul></div>')
    for heading, section in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        for kind, item in section:
            if kind == "table":
                parts.append(html_table(item))
            elif kind == "text":
                parts.append(f"<p>{html.escape(item)}</p>")
            else:
                data = base64.b64encode(item[0].read_bytes()).decode("ascii")
                parts.append(f'<p><img src="data:image/png;base64,{data}" alt="{html.escape(item[1])}"></p>')
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n")

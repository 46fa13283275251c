"""The report page writer every experiment type shares: report.md and a self-contained report.html
(images embedded as base64, inline CSS, no external resources) from a title, host facts, warnings and
sections of tables and figures."""
from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path

import pandas as pd

_CSS = """
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; max-width: 100%; }
th, td { border: 1px solid #bbb; padding: 0.2em 0.5em; text-align: right; overflow-wrap: anywhere; }
th { background: #eee; }
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


def _fmt(value) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def _display(table: pd.DataFrame) -> pd.DataFrame:
    return table.astype(object).map(_fmt)


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


def _report_html(title: str, intro: str, host_facts: dict, warnings: list[str], sections: list) -> str:
    parts = [f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(intro)}</p>", "<h2>Host</h2>",
             _facts(host_facts).to_html(index=False, border=0)]
    if warnings:
        items = "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
        parts.append(f'<h2>Warnings</h2><div class="warn"><ul>{items}</ul></div>')
    for heading, section in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        for kind, item in section:
            if kind == "table":
                parts.append(_display(item).to_html(index=False, border=0))
            elif kind == "text":
                parts.append(f"<p>{html.escape(item)}</p>")
            else:
                data = base64.b64encode(item[0].read_bytes()).decode("ascii")
                parts.append(f'<p><img src="data:image/png;base64,{data}" alt="{html.escape(item[1])}"></p>')
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n")

"""A report document written once and rendered twice: self-contained HTML (figures embedded, opens from
disk, tables that fit a 1400 px window) and Markdown (figures as files)."""
from __future__ import annotations

import base64
import html
import io
import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness.analysis import paper


def num(v: float, digits: int = 3) -> str:
    """A finite number with ``digits`` significant digits and never an exponent between 1e-4 and 1e9
    (``1040``, not ``1.04e+03``: issue 33.3)."""
    if v != 0 and 1e-4 <= abs(v) < 1e9 and abs(v) >= 10 ** (digits - 1):
        return f"{v:.0f}"
    text = f"{v:.{digits}g}"
    if "e" in text and v != 0 and 1e-4 <= abs(v) < 1e9:
        return f"{v:.{digits - 1 - math.floor(math.log10(abs(v)))}f}"
    return text


def g(v, digits=3) -> str:
    """A number as the report prints it (n/a for missing)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(v)
    if isinstance(v, (float, np.floating)):
        return num(float(v), digits)
    return str(v)


def duration(seconds: float) -> str:
    """A time in readable units: ``420 µs``, ``12.3 ms``, ``1.04 s``, ``2 min 5 s`` (n/a for missing)."""
    if seconds is None or not np.isfinite(seconds):
        return "n/a"
    if abs(seconds) < 1e-3:
        return f"{num(seconds * 1e6)} µs"
    if abs(seconds) < 1:
        return f"{num(seconds * 1e3)} ms"
    if abs(seconds) < 120:
        return f"{num(seconds)} s"
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def ci(row, col: str, digits: int = 3, unit: str = "") -> str:
    """``estimate [lo, hi]`` from ``col``, ``col_lo``, ``col_hi`` of a row (n/a where missing)."""
    v = row.get(col)
    if v is None or not np.isfinite(v):
        return "n/a"
    lo, hi = row.get(col + "_lo", math.nan), row.get(col + "_hi", math.nan)
    if lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi):
        return f"{num(v, digits)}{unit} [{num(lo, digits)}, {num(hi, digits)}]"
    return f"{num(v, digits)}{unit}"


def pct(v) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:+.1%}"


@dataclass
class Doc:
    """Blocks: ("h", level, text) | ("p", text) | ("note", text) | ("banner", text) | ("table", DataFrame, caption)
    | ("paper", PaperTable) | ("img", name, alt) | ("pre", text) | ("list", [items])."""

    blocks: list = field(default_factory=list)
    images: dict = field(default_factory=dict)

    def h(self, level, text):
        self.blocks.append(("h", level, text))

    def p(self, text):
        self.blocks.append(("p", text))

    def note(self, text):
        self.blocks.append(("note", text))

    def banner(self, text):
        self.blocks.append(("banner", text))

    def table(self, df, caption: str = ""):
        self.blocks.append(("table", df, caption))

    def paper(self, t: paper.PaperTable):
        self.blocks.append(("paper", t))

    def pre(self, text):
        self.blocks.append(("pre", text))

    def items(self, items):
        self.blocks.append(("list", list(items)))

    def fig(self, name, figure, alt):
        if figure is None:
            return
        import matplotlib.pyplot as plt

        buf = io.BytesIO()
        figure.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        plt.close(figure)
        self.images[name] = buf.getvalue()
        self.blocks.append(("img", name, alt))

    def markdown(self, image_dir: str) -> str:
        out = []
        for b in self.blocks:
            kind = b[0]
            if kind == "h":
                out.append("#" * b[1] + " " + b[2])
            elif kind in ("p", "note"):
                out.append(b[1] if kind == "p" else f"> {b[1]}")
            elif kind == "banner":
                out.append(f"> **{b[1]}**")
            elif kind == "table":
                out.append((f"*{b[2]}*\n\n" if b[2] else "") + md_table(b[1]))
            elif kind == "paper":
                out.append(_md_paper(b[1]))
            elif kind == "img":
                out.append(f"![{b[2]}]({image_dir}/{b[1]}.png)")
            elif kind == "pre":
                out.append("```\n" + b[1].rstrip() + "\n```")
            elif kind == "list":
                out.append("\n".join(f"- {x}" for x in b[1]))
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        body: list[str] = []
        toc: list[str] = []
        for b in self.blocks:
            kind = b[0]
            if kind == "h":
                anchor = "s" + str(len(body))
                if b[1] == 2:
                    toc.append(f'<li><a href="#{anchor}">{html.escape(b[2])}</a></li>')
                body.append(f'<h{b[1]} id="{anchor}">{html.escape(b[2])}</h{b[1]}>')
            elif kind in ("p", "note", "banner"):
                cls = {"p": "", "note": ' class="note"', "banner": ' class="banner"'}[kind]
                body.append(f"<p{cls}>{html.escape(b[1])}</p>")
            elif kind == "table":
                body.append(html_table(b[1], b[2]))
            elif kind == "paper":
                body.append(_html_paper(b[1]))
            elif kind == "img":
                data = base64.b64encode(self.images[b[1]]).decode()
                body.append(f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(b[2])}">'
                            f"<figcaption>{html.escape(b[2])}</figcaption></figure>")
            elif kind == "pre":
                body.append(f"<details><summary>LaTeX</summary><pre>{html.escape(b[1])}</pre></details>")
            elif kind == "list":
                body.append("<ul>" + "".join(f"<li>{html.escape(str(x))}</li>" for x in b[1]) + "</ul>")
        return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
                f"<meta name=\"viewport\" content=\"width=device-width\"><style>{CSS}</style></head><body>"
                f"<h1>{html.escape(title)}</h1><nav><ol>{''.join(toc)}</ol></nav>{''.join(body)}</body></html>\n")


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1280px;margin:1.5em auto;padding:0 1em;
color:#222;line-height:1.4}
h1{border-bottom:2px solid #333;font-size:1.5em}h2{border-bottom:1px solid #bbb;margin-top:1.8em}
table{border-collapse:collapse;margin:0.4em 0 1em;font-size:0.8em;max-width:100%}
caption{caption-side:top;text-align:left;font-size:0.95em;color:#444;padding:0.2em 0}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top;overflow-wrap:break-word}
.n{white-space:nowrap}
th{background:#f0f0f0;overflow-wrap:normal}
tr:nth-child(even){background:#fafafa}
.paperv{display:block;color:#777;font-size:0.85em}
figure{margin:1em 0}img{max-width:100%;height:auto;border:1px solid #eee}figcaption{font-size:0.85em;color:#555}
pre{background:#f6f6f6;padding:0.8em;white-space:pre-wrap;font-size:0.75em}nav{background:#f7f7f7;padding:0.3em 1em}
nav ol{columns:3;margin:0.3em 0}.note{color:#555;font-size:0.9em}
.banner{background:#fff3cd;border:1px solid #e0c060;padding:0.5em 0.8em;font-weight:600}
.headline{font-size:1.05em}
"""


def _flat_columns(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    if isinstance(df.columns, pd.MultiIndex):
        df.columns = [" · ".join(str(x) for x in c) for c in df.columns]
    return df


def md_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "(none)"
    return _flat_columns(df).map(g).to_markdown(index=not isinstance(df.index, pd.RangeIndex))


NUMBER = re.compile(r"[-+−]?(?:\d[\d,]*\.?\d*|\.\d+)(?:e[-+]?\d+)?(?:×|%| ?(?:µs|ms|s|min|J|kWh|g|kg|MiB|GiB|KiB|B))?")


def _cell_html(v) -> str:
    """One table cell: escaped, each number (with its unit) kept on one line (a column never splits a number
    mid-digit: issue 33.3)."""
    text = html.escape(g(v))
    return NUMBER.sub(lambda m: f'<span class="n">{m.group(0)}</span>' if any(c.isdigit() for c in m.group(0))
                      else m.group(0), text)


def html_table(df: pd.DataFrame, caption: str = "") -> str:
    if df.empty:
        return "<p>(none)</p>"
    text = df.map(_cell_html)
    out = text.to_html(escape=False, index=not isinstance(df.index, pd.RangeIndex), border=0)
    return out.replace(">", f"><caption>{html.escape(caption)}</caption>", 1) if caption else out


def _md_paper(t: paper.PaperTable) -> str:
    parts = [f"**{t.title}.** {t.caption}", paper.to_markdown(t)]
    parts += [f"- {n}" for n in t.notes]
    return "\n\n".join(parts)


def _html_paper(t: paper.PaperTable) -> str:
    text = t.text.map(lambda v: html.escape(str(v)))
    text[t.bold] = "<b>" + text[t.bold] + "</b>"
    text[t.underline] = "<u>" + text[t.underline] + "</u>"
    has = t.paper.astype(str) != ""
    text[has] = text[has] + '<span class="paperv">paper: ' + t.paper[has].map(lambda v: html.escape(str(v))) + "</span>"
    table = text.to_html(escape=False, border=0)
    table = table.replace(">", f"><caption><b>{html.escape(t.title)}.</b> {html.escape(t.caption)}</caption>", 1)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in t.notes)
    return table + (f'<ul class="note">{notes}</ul>' if notes else "")

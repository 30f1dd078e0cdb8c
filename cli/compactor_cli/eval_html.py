"""The page of ``compactor eval --html FILE``: each method's bytes against the evidence it kept, per transcript
(inline SVG, no network), with the same numbers in tables for reading and for screen readers.

It reads the document ``compactor eval --json`` prints (``{"rows": [...], "means": {...}}``), so a saved
JSON file renders the same page (docs/evaluation.md says what the numbers mean).
"""

from __future__ import annotations

from html import escape
from typing import Any

PALETTE = ("#c27c0e", "#5877a8", "#b8466b", "#2f8f6b", "#7a5cc2", "#6b6f76")
SHAPES = ("circle", "square", "diamond", "triangle", "circle", "square")
SIZE, PAD = 220, 34


def _marker(shape: str, x: float, y: float, color: str, label: str) -> str:
    title = f"<title>{escape(label)}</title>"
    if shape == "square":
        return f'<rect x="{x - 5:.1f}" y="{y - 5:.1f}" width="10" height="10" fill="{color}" fill-opacity=".85">{title}</rect>'
    if shape == "diamond":
        return (f'<polygon points="{x:.1f},{y - 6:.1f} {x + 6:.1f},{y:.1f} {x:.1f},{y + 6:.1f} {x - 6:.1f},{y:.1f}" '
                f'fill="{color}" fill-opacity=".85">{title}</polygon>')
    if shape == "triangle":
        return (f'<polygon points="{x:.1f},{y - 6:.1f} {x + 6:.1f},{y + 5:.1f} {x - 6:.1f},{y + 5:.1f}" '
                f'fill="{color}" fill-opacity=".85">{title}</polygon>')
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5.5" fill="{color}" fill-opacity=".85">{title}</circle>'


def _plot(title: str, points: list[tuple[str, float, float]], styles: dict[str, tuple[str, str]]) -> str:
    """One scatter: x = output bytes as % of the input, y = evidence kept %, both 0–100."""
    inner = SIZE - 2 * PAD
    description = "; ".join(f"{m}: bytes {100 * x:.1f}%, evidence kept {100 * y:.1f}%" for m, x, y in points)
    parts = [f'<svg class="plot" viewBox="0 0 {SIZE} {SIZE}" role="img" aria-label="{escape(title)}: '
             f'{escape(description)}"><title>{escape(title)}</title>',
             f'<rect x="{PAD}" y="{PAD // 2}" width="{inner}" height="{inner}" class="frame"/>']
    for tick in (0, 50, 100):
        x = PAD + inner * tick / 100
        y = PAD // 2 + inner * (1 - tick / 100)
        parts.append(f'<line x1="{x:.1f}" y1="{PAD // 2}" x2="{x:.1f}" y2="{PAD // 2 + inner}" class="grid"/>'
                     f'<line x1="{PAD}" y1="{y:.1f}" x2="{PAD + inner}" y2="{y:.1f}" class="grid"/>'
                     f'<text x="{x:.1f}" y="{PAD // 2 + inner + 12}" class="tick" text-anchor="middle">{tick}%</text>'
                     f'<text x="{PAD - 4}" y="{y + 3:.1f}" class="tick" text-anchor="end">{tick}</text>')
    parts.append(f'<text x="{PAD + inner / 2:.1f}" y="{SIZE - 4}" class="axis" text-anchor="middle">bytes kept →</text>'
                 f'<text x="10" y="{PAD // 2 + inner / 2:.1f}" class="axis" text-anchor="middle" '
                 f'transform="rotate(-90 10 {PAD // 2 + inner / 2:.1f})">evidence kept →</text>')
    for method, ratio, kept in points:
        color, shape = styles[method]
        x = PAD + inner * min(max(ratio, 0.0), 1.0)
        y = PAD // 2 + inner * (1 - min(max(kept, 0.0), 1.0))
        parts.append(_marker(shape, x, y, color, f"{method}: bytes {100 * ratio:.1f}%, evidence {100 * kept:.1f}%"))
    parts.append("</svg>")
    return "".join(parts)


def render_eval_html(document: dict[str, Any], title: str = "Compaction quality") -> str:
    """The whole page for an eval document (rows and means as ``compactor eval --json`` prints them)."""
    rows: list[dict[str, Any]] = document["rows"]
    means: dict[str, dict[str, float]] = document.get("means", {})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    styles = {m: (PALETTE[i % len(PALETTE)], SHAPES[i % len(SHAPES)]) for i, m in enumerate(methods)}
    transcripts = list(dict.fromkeys(r["transcript"] for r in rows))
    legend = "".join(
        f'<li><svg width="14" height="14" aria-hidden="true">{_marker(styles[m][1], 7, 7, styles[m][0], m)}</svg> '
        f"{escape(m)}</li>" for m in methods)
    out = [_HEAD.format(title=escape(title), css=_CSS),
           f"<header><h1>{escape(title)}</h1><p class=\"sub\">{len(transcripts)} transcripts × {len(methods)} "
           "methods. Up and to the left is better: fewer bytes, more of the transcript's evidence (paths, "
           "commands, exit codes, errors, identifiers) still findable in the output.</p>"
           f'<ul class="legend" aria-label="Methods">{legend}</ul></header><main>']
    if means:
        points = [(m, v["ratio"], v["evidence_kept"]) for m, v in means.items() if m in styles]
        table = "".join(f"<tr><th scope=\"row\">{escape(m)}</th><td>{100 * v['ratio']:.1f}%</td>"
                        f"<td>{100 * v['evidence_kept']:.1f}%</td><td>{v['evidence_items']:.1f}</td>"
                        f"<td>{v['model_calls']:.1f}</td><td>{int(v['transcripts'])}</td></tr>" for m, v in means.items())
        out.append('<section aria-labelledby="mean-h" class="mean"><h2 id="mean-h">Mean over all transcripts</h2>'
                   f'<div class="pair">{_plot("Mean over all transcripts", points, styles)}'
                   '<table id="means"><thead><tr><th scope="col">method</th><th scope="col">bytes</th>'
                   '<th scope="col">evidence kept</th><th scope="col">items</th><th scope="col">model calls</th>'
                   f'<th scope="col">transcripts</th></tr></thead><tbody>{table}</tbody></table></div></section>')
    out.append('<section aria-labelledby="per-h"><h2 id="per-h">Per transcript</h2><div class="grid">')
    for name in transcripts:
        mine = [r for r in rows if r["transcript"] == name]
        points = [(r["method"], r["ratio"], r["evidence_kept"]) for r in mine]
        cells = "".join(f'<tr data-method="{escape(r["method"])}"><th scope="row">{escape(r["method"])}</th>'
                        f'<td>{100 * r["ratio"]:.1f}%</td><td>{100 * r["evidence_kept"]:.1f}%</td>'
                        f'<td>{r["output_bytes"]:,}</td><td>{r["model_calls"]}</td></tr>' for r in mine)
        out.append(f'<figure class="transcript" data-transcript="{escape(name)}">{_plot(name, points, styles)}'
                   f"<figcaption>{escape(name)} <small>({mine[0]['input_bytes']:,} bytes)</small></figcaption>"
                   '<details><summary>numbers</summary><table><thead><tr><th scope="col">method</th>'
                   '<th scope="col">bytes</th><th scope="col">evidence</th><th scope="col">output bytes</th>'
                   f'<th scope="col">calls</th></tr></thead><tbody>{cells}</tbody></table></details></figure>')
    out.append("</div></section></main></body></html>\n")
    return "".join(out)


_HEAD = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title><style>{css}</style></head><body>
"""

_CSS = """
:root{--bg:#f7f7f5;--card:#fff;--ink:#1d2330;--mute:#5b6473;--line:#e2e4e8}
@media (prefers-color-scheme:dark){:root{--bg:#15181e;--card:#1d2129;--ink:#e6e8ec;--mute:#9aa3b2;--line:#2e3440}}
body{margin:0;background:var(--bg);color:var(--ink);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
header,main{max-width:1150px;margin:0 auto;padding:0 20px}header{padding-top:24px}
h1{font-size:1.4rem;margin:0}h2{font-size:1.1rem;margin:0 0 10px}.sub{color:var(--mute);margin:4px 0 8px}
.legend{display:flex;flex-wrap:wrap;gap:16px;list-style:none;padding:0;margin:0 0 16px}
section{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:16px 18px;margin:0 0 16px}
.pair{display:flex;flex-wrap:wrap;gap:24px;align-items:center}.mean .plot{width:300px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(230px,1fr));gap:14px}
figure{margin:0;border:1px solid var(--line);border-radius:8px;padding:8px}figcaption{font-size:.8rem;word-break:break-all}
.plot{width:100%;height:auto}.frame{fill:none;stroke:var(--line)}.grid line,.plot .grid{stroke:var(--line)}
.tick{font-size:8px;fill:var(--mute)}.axis{font-size:9px;fill:var(--mute)}
table{border-collapse:collapse;font-size:.85rem}th,td{padding:3px 8px;border-bottom:1px solid var(--line);text-align:right}
th[scope=row],th[scope=col]:first-child{text-align:left}summary{cursor:pointer;font-size:.8rem;color:#1b6ef3}
:focus-visible{outline:3px solid #1b6ef3;outline-offset:2px}
"""

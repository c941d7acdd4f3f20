"""report.html: one self-contained file that opens offline — inline CSS, figures as base64 PNG data
URIs, no script, no font, no link to anything outside the file."""
from __future__ import annotations

import base64
import html
import re

from turbospec.audit.report import Section

_CSS = """
body{font:14px/1.45 -apple-system,"Segoe UI",Roboto,"Noto Sans","Noto Sans Devanagari",sans-serif;
 margin:0;background:#f6f7f9;color:#1d232b}
main{max-width:1180px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:32px 0 10px;border-bottom:1px solid #d8dde3;padding-bottom:4px}
.sub{color:#5b6672;margin:0 0 18px}
.verdict{display:flex;align-items:center;gap:14px;margin:14px 0 6px}
.badge{font-weight:700;font-size:20px;padding:6px 16px;border-radius:6px;color:#fff;letter-spacing:.5px}
.go{background:#1a7f37}.go-projected{background:#4f7f1a}.no-go{background:#c62828}.inconclusive{background:#8a6d00}
.ep{font-family:ui-monospace,Menlo,Consolas,monospace;color:#39424c}
table{border-collapse:collapse;margin:8px 0 14px;background:#fff;font-size:12.5px;display:block;overflow-x:auto}
th,td{border:1px solid #dde2e7;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600}tr:nth-child(even) td{background:#fafbfc}
figure{margin:10px 0 18px;background:#fff;border:1px solid #dde2e7;padding:8px;border-radius:4px}
figure img{max-width:100%;height:auto;display:block}figcaption{color:#5b6672;font-size:12.5px;margin-top:4px}
ul{margin:6px 0 12px 20px;padding:0}li{margin:2px 0}
"""

_VERDICT_WORDS = {"go": "GO", "go-projected": "GO (PROJECTED)", "no-go": "NO-GO", "inconclusive": "INCONCLUSIVE"}


def _e(x: object) -> str:
    return html.escape(str(x))


def render_html(title: str, subtitle: str, sections: list[Section], figures: dict[str, bytes]) -> str:
    body = [f"<h1>{_e(title)}</h1>", f'<p class="sub">{_e(subtitle)}</p>']
    for s in sections:
        body.append(f"<h2>{_e(s.title)}</h2>")
        for block in s.blocks:
            body.append(_block(block, figures))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(title)}</title><style>{_CSS}</style></head>"
            f"<body><main>{''.join(body)}</main></body></html>\n")


def _bold(text: str) -> str:
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)


def _block(block: tuple, figures: dict[str, bytes]) -> str:
    kind = block[0]
    if kind == "p":                                   # **bold** is the one markdown a paragraph uses
        return "<p>" + _bold(_e(block[1])) + "</p>"
    if kind == "list":
        return "<ul>" + "".join(f"<li>{_bold(_e(i))}</li>" for i in block[1]) + "</ul>" if block[1] else ""
    if kind == "verdict":
        return (f'<div class="verdict"><span class="badge {_e(block[1])}">{_VERDICT_WORDS[block[1]]}</span>'
                f'<span class="ep">{_e(block[2])}</span></div>')
    if kind == "table":
        headers, rows = block[1], block[2]
        if not rows:
            return ""
        head = "".join(f"<th>{_e(h)}</th>" for h in headers)
        body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    if kind == "figure" and block[1] in figures:
        data = base64.b64encode(figures[block[1]]).decode("ascii")
        return (f'<figure><img alt="{_e(block[2])}" src="data:image/png;base64,{data}">'
                f"<figcaption>{_e(block[2])}</figcaption></figure>")
    return ""

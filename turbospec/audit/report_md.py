"""report.md: the report's sections as GitHub-flavoured markdown; figures are PNG files beside it."""
from __future__ import annotations

from turbospec.audit.report import Section

_VERDICT_WORDS = {"go": "GO", "go-projected": "GO (PROJECTED)", "no-go": "NO-GO", "inconclusive": "INCONCLUSIVE"}


def _cell(x: object) -> str:
    """A table cell as literal text: server error bodies land here (`<html>503 ...</html>`), and raw HTML,
    emphasis or code spans in them must not render."""
    text = str(x).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in ("\\", "|", "*", "`", "[", "]"):
        text = text.replace(ch, "\\" + ch)
    return text.replace("\r", " ").replace("\n", " ")


def render_markdown(title: str, sections: list[Section], figures: dict[str, str]) -> str:
    """figures: name -> relative path of its PNG (figures absent there are skipped)."""
    out = [f"# {title}", ""]
    for s in sections:
        out += [f"## {s.title}", ""]
        for block in s.blocks:
            kind = block[0]
            if kind == "p":
                out += [block[1], ""]
            elif kind == "list":
                out += [f"- {item}" for item in block[1]] + [""]
            elif kind == "verdict":
                out += [f"**{_VERDICT_WORDS[block[1]]}** — {block[2]}", ""]
            elif kind == "table":
                headers, rows = block[1], block[2]
                if not rows:
                    continue
                out.append("| " + " | ".join(_cell(h) for h in headers) + " |")
                out.append("|" + "---|" * len(headers))
                out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
                out.append("")
            elif kind == "figure" and block[1] in figures:
                out += [f"![{block[2]}]({figures[block[1]]})", ""]
    return "\n".join(out)

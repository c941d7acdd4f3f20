"""The renderer-neutral unit of the report (report.py builds them; report_md / report_html render them)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Section:
    title: str
    blocks: list[tuple] = field(default_factory=list)

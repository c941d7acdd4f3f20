"""Built-in prompt sets of `turbospec audit`, one module per domain.

Speculation pays differently by domain (code and math repeat themselves, open prose less so,
non-English text depends on how the drafter was trained), so the audit reports each apart.
Every module exposes `PROMPTS: tuple[str, ...]` with at least 16 varied, self-contained prompts.
"""

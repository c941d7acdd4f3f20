"""Chat records through the chat template, with the loss on the assistant turns' tokens.

The template is the target tokenizer's or `--chat-template`'s. Its failures are data errors, not
tracebacks: a template that does not parse stops the run naming the template (`TemplateSyntax`);
one that refuses a conversation (`raise_exception`, e.g. "System role not supported") is a
ValueError naming the record's line, which data.tokenize_records counts with the others.
"""
from __future__ import annotations


class TemplateSyntax(ValueError):
    """The chat template itself is broken (not one record)."""


def _template_name(template: str | None) -> str:
    return f"--chat-template {template}" if template else "the target tokenizer's chat template"


def render_chat(tokenizer, msgs: list[dict], path: str, line: int, template: str | None = None
                ) -> tuple[list[int], list[bool]]:
    """Full conversation through the chat template; loss on the characters of assistant turns.
    A template that does not parse raises TemplateSyntax (for the whole file); one that fails on
    this conversation (`raise_exception`, an undefined field) a ValueError naming the line."""
    import jinja2

    def render(m, gen):
        try:
            return tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=gen)
        except jinja2.TemplateSyntaxError as e:
            raise TemplateSyntax(f"{_template_name(template)} does not parse ({e.message}, template line "
                                 f"{e.lineno}): fix its Jinja syntax" + ("" if template else ", or pass "
                                 "--chat-template FILE.jinja")) from None
        except jinja2.TemplateError as e:
            system = any(x["role"] == "system" for x in m) and "system" in str(e).lower()
            hint = " (e.g. merge the system message into the first user turn)" if system else ""
            what = str(e) if type(e) is jinja2.TemplateError else f"{type(e).__name__}: {e}"
            raise ValueError(f"{path}:{line}: {_template_name(template)} fails on this conversation ({what}): "
                             f"edit the record{hint} or remove it, or pass --chat-template FILE.jinja with a "
                             "template that renders it") from None
    full = render(msgs, False)
    spans = []
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        start, end = len(render(msgs[:i], True)) if i else 0, len(render(msgs[:i + 1], False))
        if not full.startswith(render(msgs[:i + 1], False)):
            raise ValueError(f"{path}:{line}: the chat template does not render conversations prefix by prefix, "
                             "so assistant turns cannot be located: pass --chat-template with a simpler template")
        spans.append((start, end))
    enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    mask = [any(s <= a < e for s, e in spans) for a, _ in enc["offset_mapping"]]
    return list(enc["input_ids"]), mask

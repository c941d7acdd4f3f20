"""What counts as an integer / a number in user input (a bool never does, though Python's True == 1),
NumPy scalars taken as the Python values they hold, and text a tokenizer can encode. Shared by
SamplingParams and the prompt checks."""
from __future__ import annotations


def is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def python_scalar(x):
    """A NumPy scalar (np.float32, np.int64, np.bool_) as the Python value it holds; anything else
    as it is (then validated as usual)."""
    if type(x).__module__ == "numpy" and getattr(x, "shape", None) == ():
        return x.item()
    return x


def check_encodable(text: str, what: str = "the prompt") -> None:
    """A str may hold a lone UTF-16 surrogate (JSON's "\\ud800" escape decodes to one), which is
    no Unicode character and which no tokenizer encodes: say where (`what`: the field), as a bad request."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} holds a lone UTF-16 surrogate ({text[e.start]!r}) at character {e.start}, "
                         "which is not a Unicode character: send valid text (an escaped surrogate must come "
                         "in a high + low pair)") from None

"""What counts as an integer / a number in user input (a bool never does, though Python's True == 1),
and NumPy scalars taken as the Python values they hold. Shared by SamplingParams and the prompt checks."""
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

"""vLLM's SamplingParams names that are not turbospec fields: the rule the constructor and
attribute assignment share (accepted at their neutral value, `guided_decoding` as an alias of
`structured_outputs`, anything else refused by name), installed on `SamplingParams` by
turbospec/sampling_params.py (`install`)."""
from __future__ import annotations

import difflib
import functools

from turbospec.scalars import is_int
from turbospec.structured_outputs import GuidedDecodingParams, StructuredOutputsParams

SUPPORTED_FIELDS: tuple[str, ...] = ()          # SamplingParams' fields, set by `install`
_FIELD_SET: frozenset = frozenset()


# vLLM's SamplingParams fields that turbospec does not implement: the values that mean "off".
NEUTRAL_VALUES: dict[str, tuple] = {
    "best_of": (None,),                  # or equal to n (checked below)
    "logits_processors": (None, []),
    "guided_decoding": (None,),          # any other value: structured_outputs (vLLM's older name)
    "spaces_between_special_tokens": (True,),
    "extra_args": (None, {}),
}


def is_one_of(value, accepted) -> bool:
    """value equals one of `accepted`, a bool never standing in for a number (True == 1 in Python):
    the test for vLLM fields accepted only at their neutral value, here and in the server."""
    return any(value == v and isinstance(value, bool) == isinstance(v, bool) for v in accepted)


def _is_neutral(name: str, value, n) -> bool:
    if name == "best_of" and is_int(value) and value == n:
        return True
    return is_one_of(value, NEUTRAL_VALUES[name])


def _guided_decoding(value, structured_outputs):
    """vLLM's older `guided_decoding` (a GuidedDecodingParams or a dict of its fields) as
    `structured_outputs`; both given must agree."""
    if isinstance(value, dict):
        value = GuidedDecodingParams(**value)
    if not isinstance(value, StructuredOutputsParams):
        raise ValueError(f"guided_decoding={value!r} must be a GuidedDecodingParams (or a dict of its fields, "
                         "e.g. {'json': schema}) or None; the current name is structured_outputs")
    if structured_outputs is not None:
        raise ValueError("SamplingParams got both guided_decoding and structured_outputs (its newer name): "
                         "pass one of them")
    return value


def _foreign_field(name: str, value, n, structured_outputs):
    """A name SamplingParams has no field for: None to drop it (vLLM's field at its neutral value,
    output_kind), a StructuredOutputsParams for vLLM's older `guided_decoding`; else ValueError by
    name. The constructor's rule and attribute assignment's alike."""
    from turbospec.sampling_params import RequestOutputKind
    if name == "output_kind":           # LLM.generate returns final outputs whatever it says (as vLLM's LLM)
        if not isinstance(value, int) or value not in tuple(RequestOutputKind):
            raise ValueError(f"output_kind={value!r} must be a RequestOutputKind (CUMULATIVE, DELTA or "
                             "FINAL_ONLY); LLM.generate returns each request's final output either way")
        return None
    if name in NEUTRAL_VALUES:
        if _is_neutral(name, value, n):
            return None
        if name == "guided_decoding":
            return _guided_decoding(value, structured_outputs)
        neutral = " or ".join(repr(v) for v in NEUTRAL_VALUES[name]) + (" or n" if name == "best_of" else "")
        raise ValueError(f"SamplingParams({name}={value!r}): turbospec does not implement {name} "
                         f"(only its neutral value {neutral} is accepted); supported fields: "
                         f"{', '.join(SUPPORTED_FIELDS)}")
    close = difflib.get_close_matches(name, SUPPORTED_FIELDS, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ValueError(f"SamplingParams has no field {name!r}: {hint}supported fields: "
                     f"{', '.join(SUPPORTED_FIELDS)}")


def _checked_init(init):
    """Refuse, by name, fields that SamplingParams does not have; drop vLLM's at their neutral value."""
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        if args:          # vLLM's fields come in another order (its first is n): by name only
            raise ValueError(f"SamplingParams takes its fields by name (vLLM's positional order differs: its "
                             f"first field is n, here temperature): got {len(args)} positional argument(s); "
                             "write e.g. SamplingParams(temperature=0.8, max_tokens=64)")
        for name in [k for k in kwargs if k not in _FIELD_SET]:
            structured = _foreign_field(name, kwargs.pop(name), kwargs.get("n", 1), kwargs.get("structured_outputs"))
            if structured is not None:
                kwargs["structured_outputs"] = structured
        init(self, *args, **kwargs)
    return __init__


def _checked_setattr(self, name: str, value) -> None:
    """`sp.<name> = value` after construction: the constructor's rule for names that are not
    fields (a vLLM script setting `sp.guided_decoding` or `sp.logits_processors` must not be
    silently dropped: `LLM.generate` re-checks fields only). `guided_decoding` is another name for
    `structured_outputs` here: assigning it replaces the constraint (None removes it)."""
    if name in _FIELD_SET:                                 # the common case first: a field
        object.__setattr__(self, name, value)
        return
    if name == "guided_decoding":
        name, value = "structured_outputs", None if value is None else _guided_decoding(value, None)
    elif not name.startswith("_"):
        if _foreign_field(name, value, getattr(self, "n", 1), None) is None:
            return
    object.__setattr__(self, name, value)


def _getattr(self, name: str):
    """`sp.guided_decoding` reads `structured_outputs` (vLLM before 0.11 named it so); a vLLM field
    accepted only at its neutral value reads as that value (`sp.best_of`: n, `sp.output_kind`: FINAL_ONLY)."""
    if name == "guided_decoding":
        return self.structured_outputs
    if name == "best_of":
        return self.n
    if name == "output_kind":
        from turbospec.sampling_params import RequestOutputKind
        return RequestOutputKind.FINAL_ONLY
    if name in NEUTRAL_VALUES:
        return NEUTRAL_VALUES[name][0]
    raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def install(cls, supported_fields: tuple[str, ...]) -> None:
    """Put the rule on `cls` (SamplingParams), whose fields are `supported_fields`."""
    global SUPPORTED_FIELDS, _FIELD_SET
    SUPPORTED_FIELDS, _FIELD_SET = supported_fields, frozenset(supported_fields)
    cls.__init__ = _checked_init(cls.__init__)
    cls.__setattr__ = _checked_setattr
    cls.__getattr__ = _getattr

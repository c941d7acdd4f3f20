"""Where a target checkpoint keeps its multi-token-prediction layers, in either published naming
(Qwen3-Next `mtp.*`, DeepSeek `model.layers.{L+k}.*`), read from config.json and tensor names.
The module and its loader are in models/mtp.py."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from turbospec.config import ModelConfig

MTP_ARCHITECTURES = ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "LlamaForCausalLM")
NO_MTP = ("this checkpoint has no MTP layers (num_nextn_predict_layers / mtp.* tensors): "
          "use eagle3, dflash, draft_model or ngram")
_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.")


@dataclass
class MTPConfig:
    target: ModelConfig
    scheme: str                  # "qwen3_next" (mtp.*) | "deepseek" (model.layers.{L}.*)
    num_layers: int              # MTP layers the checkpoint declares (we draft with the first)
    top: dict[str, str]          # our top-level name -> checkpoint name
    layer_prefix: str            # checkpoint prefix of the decoder layer we load
    sparse: bool = False         # the layer's MLP is a MoE block
    own_head: bool = False       # DeepSeek shared_head.head
    own_embed: bool = False      # DeepSeek per-layer embed_tokens

    # what the EAGLE-style proposer machinery reads (turbospec/spec/eagle3.py)
    num_hidden_layers = 1
    hidden_size: int = field(init=False)
    num_key_value_heads: int = field(init=False)
    head_dim: int = field(init=False)
    zero_embed_at_pos0: bool = field(init=False)

    def __post_init__(self):
        t = self.target
        self.hidden_size, self.num_key_value_heads, self.head_dim = t.hidden_size, t.num_key_value_heads, t.head_dim
        self.zero_embed_at_pos0 = self.scheme == "deepseek"

    def checkpoint_name(self, ours: str) -> str:
        if ours.startswith("layer."):
            return self.layer_prefix + ours[len("layer."):]
        return self.top[ours.removesuffix(".weight")] + ".weight"


def _declared_layers(raw: dict) -> tuple[str, int] | None:
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        if raw.get(key) is not None:
            return key, int(raw[key])
    return None


def find_mtp(names: list[str], target: ModelConfig) -> MTPConfig:
    """Which scheme, how many layers, and where (from config.json and the tensor names)."""
    L = target.num_hidden_layers
    declared = _declared_layers(target.raw)
    qn = [n for n in names if n.startswith("mtp.")]
    ds = sorted({int(m.group(1)) for n in names if (m := _LAYER_RE.match(n)) and int(m.group(1)) >= L})
    if not qn and not ds:
        if declared and declared[1] > 0:
            raise ValueError(f"config.json declares {declared[0]}={declared[1]} but the checkpoint has no MTP "
                             f"tensors (mtp.* or model.layers.{L}.*): missing; download the full checkpoint")
        raise ValueError(NO_MTP)
    if declared is not None and declared[1] <= 0:
        raise ValueError(f"{NO_MTP} (config.json sets {declared[0]}={declared[1]} although MTP tensors are "
                         "present: set it to the number of MTP layers)")
    if target.architecture not in MTP_ARCHITECTURES:
        raise ValueError(f"MTP drafting supports {', '.join(MTP_ARCHITECTURES)} targets, not "
                         f"{target.architecture}: use eagle3, dflash, draft_model or ngram")
    if qn and ds:
        raise ValueError(f"checkpoint holds MTP tensors in both schemes (mtp.* and model.layers.{ds[0]}.*): "
                         "keep one")
    has_router = lambda prefix: target.is_moe and prefix + "mlp.gate.weight" in names   # noqa: E731
    if qn:
        n = declared[1] if declared else 1                       # vLLM's default for Qwen3-Next
        extra = sorted({int(m.group(1)) for x in qn if (m := re.match(r"^mtp\.layers\.(\d+)\.", x))
                        and int(m.group(1)) >= n})
        if extra:
            raise ValueError(f"checkpoint has mtp.layers.{extra[0]}.* but config.json declares {n} MTP "
                             "layer(s): fix num_nextn_predict_layers")
        top = {"fc": "mtp.fc", "embed_norm": "mtp.pre_fc_norm_embedding",
               "hidden_norm": "mtp.pre_fc_norm_hidden", "norm": "mtp.norm"}
        return MTPConfig(target, "qwen3_next", n, top, "mtp.layers.0.", has_router("mtp.layers.0."))
    if declared is None:
        raise ValueError(f"checkpoint has model.layers.{ds[0]}.* beyond num_hidden_layers={L} but config.json "
                         "has no num_nextn_predict_layers: set it to the number of MTP layers")
    n = declared[1]
    if ds[-1] >= L + n:
        raise ValueError(f"checkpoint has model.layers.{ds[-1]}.* but config.json declares {n} MTP layer(s) "
                         f"after {L} target layers: fix num_nextn_predict_layers / num_hidden_layers")
    p = f"model.layers.{L}."
    top = {"fc": p + "eh_proj", "embed_norm": p + "enorm", "hidden_norm": p + "hnorm",
           "norm": p + "shared_head.norm", "head": p + "shared_head.head", "embed_tokens": p + "embed_tokens"}
    return MTPConfig(target, "deepseek", n, top, p, has_router(p),
                     own_head=p + "shared_head.head.weight" in names, own_embed=p + "embed_tokens.weight" in names)

"""The arguments bench/auto_diag.py and bench/cost_table_diag.py share: a shape, one batch size and
the weights' quantization, as optional positionals, checked into the shape's setting."""
import argparse

import torch
import typer

from turbospec.benchmarks.cli_args import shape_setting


def diag_parser(doc: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("shape", nargs="?", default="qwen3-30b-a3b",
                        help="a preset (qwen3-8b, qwen3-30b-a3b, llama-3.1-8b, sarvam-30b) or a model directory (config only; "
                             "random weights)")
    parser.add_argument("batch", nargs="?", type=int, default=1, help="the one batch size benched")
    parser.add_argument("quantization", nargs="?", default="fp8", choices=["fp8", "none"],
                        help="fp8: block-FP8 weights; none: the dtype's (bf16 on a GPU, fp32 on the CPU)")
    return parser


def diag_setting(parser: argparse.ArgumentParser):
    """(args, quantization or None, (device, name, config, dtype)); a bad value is parser.error."""
    args = parser.parse_args()
    if args.batch < 1:
        parser.error(f"batch {args.batch}: give a positive batch size")
    quant = None if args.quantization == "none" else args.quantization
    try:
        dev, name, cfg, dt, _ = shape_setting(args.shape, "bf16" if torch.cuda.is_available() else "fp32", None,
                                              str(args.batch))
    except typer.BadParameter as e:
        parser.error(str(e))
    return args, quant, (dev, name, cfg, dt)

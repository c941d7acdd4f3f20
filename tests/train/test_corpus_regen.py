"""The standard-library corpus and the target's regenerated continuations."""
from __future__ import annotations

import json

import pytest

from turbospec.train.data import load_dataset, load_tokenizer
from turbospec.train.regenerate import regenerate
from turbospec.train.stdlib_corpus import build_stdlib_corpus, stdlib_files

LONG = "".join(f"def function_{i}(x):\n    return x + {i}\n\n\n" for i in range(120))


def test_stdlib_corpus_chunks_cover_files_within_budget(tiny_target, tmp_path):
    root = tmp_path / "lib"
    for sub in ("", "pkg", "site-packages", "test"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "a.py").write_text(LONG)
    (root / "pkg" / "b.py").write_text("import os\n\nprint(os.getcwd())\n" * 20)
    (root / "site-packages" / "third_party.py").write_text("x = 1\n" * 50)
    (root / "test" / "test_a.py").write_text("assert True\n" * 50)
    assert [p.split("lib/")[1] for p in stdlib_files(str(root))] == ["a.py", "pkg/b.py"]
    tok = load_tokenizer(str(tiny_target))
    out = tmp_path / "corpus.jsonl"
    stats = build_stdlib_corpus(str(out), tok, 128, root=str(root), min_tokens=1)
    rows = [json.loads(line) for line in open(out)]
    assert stats.chunks == len(rows) > 5 and stats.dropped == 0
    assert "".join(r["text"] for r in rows if r["source"] == "stdlib/a.py") == LONG
    assert all(r["text"].endswith("\n") for r in rows)                       # cut at line ends
    ds, _ = load_dataset(str(out), tok, 8192, 128)                          # every chunk fits
    assert int(ds.lengths.max()) <= 128


def test_stdlib_corpus_says_why_chunks_were_dropped(tiny_target, tmp_path):
    # "(22 chunks dropped)" said no reason: they are small files and the short tails of files
    root = tmp_path / "lib"
    (root / "pkg").mkdir(parents=True)
    (root / "a.py").write_text(LONG + "x = 1\n")                 # its last chunk: a short tail
    (root / "pkg" / "__init__.py").write_text("from .a import *\n")          # a small file
    (root / "latin1.py").write_bytes("s = 'caf\xe9'\n".encode("latin-1"))   # not UTF-8: skipped
    stats = build_stdlib_corpus(str(tmp_path / "c.jsonl"), load_tokenizer(str(tiny_target)), 128, root=str(root),
                                min_tokens=32)
    assert stats.short >= 1 and stats.long == 0 and stats.dropped == stats.short and stats.unreadable == 1
    assert stats.describe().endswith(
        f"({stats.dropped} chunks dropped: {stats.short} shorter than 32 tokens (small files and the short tails "
        "of files: too little to train on); 1 files skipped: not UTF-8)"), stats.describe()
    clean = build_stdlib_corpus(str(tmp_path / "d.jsonl"), load_tokenizer(str(tiny_target)), 128,
                                root=str(root / "pkg"), min_tokens=1)
    assert clean.describe().endswith("(no chunk dropped)")


def test_stdlib_corpus_of_long_files_prints_no_tokenizer_warning(codelm_dir, tmp_path, capfd):
    # whole files are tokenized before they are cut: transformers' "longer than the specified maximum
    # sequence length ... indexing errors" warning was printed for every run on the real stdlib
    root = tmp_path / "lib"
    root.mkdir()
    (root / "big.py").write_text("".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(1500)))
    tok = load_tokenizer(str(codelm_dir))                        # model_max_length 2048; the file ~23k tokens
    stats = build_stdlib_corpus(str(tmp_path / "c.jsonl"), tok, 256, root=str(root), min_tokens=1)
    assert stats.chunks > 10
    assert "sequence length is longer" not in capfd.readouterr().err


def test_regenerate_writes_the_targets_greedy_continuations(tiny_target, code_jsonl, tmp_path):
    from turbospec import LLM, SamplingParams
    out = tmp_path / "regen.jsonl"
    logs: list[str] = []
    stats = regenerate(str(tiny_target), str(code_jsonl), str(out), num_samples=3, max_new_tokens=8,
                       min_prompt=8, max_prompt=32, device="cpu", dtype="float32", batch_size=2, log=logs.append)
    rows = [json.loads(line) for line in open(out)]
    assert stats.samples == len(rows) == 3 and stats.completion_tokens == 24
    assert (stats.batch, stats.chunks) == (2, 2)                               # chunks of 2 + 1
    chunk_logs = [m for m in logs if m.startswith("regenerate: chunk ")]
    assert [m.split(":")[1].strip() for m in chunk_logs] == ["chunk 1", "chunk 2"]
    assert "2 requests, 16 tokens" in chunk_logs[0] and "1 requests, 8 tokens" in chunk_logs[1]
    assert all("tok/s" in m for m in chunk_logs)
    assert all(1 <= len(r["prompt_token_ids"]) <= 32 and len(r["completion_token_ids"]) == 8 for r in rows)
    plain = LLM(str(tiny_target), device="cpu", dtype="float32").generate(
        [{"prompt_token_ids": rows[0]["prompt_token_ids"]}], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))
    assert plain[0].outputs[0].token_ids == rows[0]["completion_token_ids"]
    ds, rep = load_dataset(str(out), load_tokenizer(str(tiny_target)), 8192, 64)
    assert rep.schemas == {"token_ids": 3} and int(ds.loss_mask.sum()) == 24   # completion only


def test_regenerate_caps_the_batch_at_the_engines_graphed_maximum(tiny_target, code_jsonl, tmp_path, monkeypatch):
    import turbospec
    from turbospec.engine.llm_engine import MAX_GRAPH_BATCH
    from turbospec.train.regenerate import effective_batch
    assert MAX_GRAPH_BATCH == 256
    assert [effective_batch(b) for b in (1, 255, 256, 257, 512)] == [1, 255, 256, 256, 256]
    engines = []

    class Recording(turbospec.LLM):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            engines.append(self.llm_engine)
    monkeypatch.setattr(turbospec, "LLM", Recording)
    logs: list[str] = []
    stats = regenerate(str(tiny_target), str(code_jsonl), str(tmp_path / "r.jsonl"), num_samples=2,
                       max_new_tokens=4, min_prompt=8, max_prompt=16, device="cpu", dtype="float32",
                       batch_size=512, log=logs.append)
    assert (stats.batch, stats.chunks, stats.samples, stats.completion_tokens) == (256, 1, 2, 8)
    assert [e.engine_config.max_num_seqs for e in engines] == [256]            # running seqs stay graphed
    assert any("--batch-size 512 exceeds 256" in m for m in logs)


def test_regenerate_refuses_to_write_over_its_own_data(tiny_target, code_jsonl):
    before = code_jsonl.read_bytes()
    with pytest.raises(ValueError, match="is the --data file"):
        regenerate(str(tiny_target), str(code_jsonl), str(code_jsonl.parent / "." / code_jsonl.name),
                   num_samples=1, max_new_tokens=4, device="cpu")
    assert code_jsonl.read_bytes() == before

"""This machine's tuned-config file (`kernels/tuned_configs.py`): what a sweep's `--save` writes and
every later process's GEMMs use, and the errors a malformed file gives."""
from __future__ import annotations

import json

import pytest

from turbospec.kernels import tuned_configs as tc

SKINNY = dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, SPLIT_K=2, num_warps=4, num_stages=3, SWAP_AB=True)
FP8 = dict(BLOCK_M=16, BLOCK_N=32, SPLIT_K=6, num_warps=4, num_stages=4)


@pytest.fixture
def cfg_file(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "tuned.json"
    monkeypatch.setenv("TURBOSPEC_TUNED_CONFIGS", str(path))
    tc.load.cache_clear()
    yield path
    tc.load.cache_clear()


def test_path_defaults_to_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("TURBOSPEC_TUNED_CONFIGS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tc.config_path() == tmp_path / "turbospec" / "tuned_configs.json"


def test_absent_file_means_no_entries(cfg_file):
    assert not cfg_file.exists()
    assert tc.load("skinny_gemm") == {} and tc.load("fp8_gemm") == {}


def test_save_merges_and_replaces_by_shape(cfg_file):
    tc.save("skinny_gemm", [dict(sms=132, N=5120, K=2048, config=SKINNY, device="NVIDIA H200", note="a")])
    tc.save("skinny_gemm", [dict(sms=132, N=2048, K=4096, config=dict(SKINNY, SPLIT_K=4))])
    tc.save("fp8_gemm", [dict(sms=132, N=5120, K=2048, config=FP8)])
    tc.save("skinny_gemm", [dict(sms=132, N=5120, K=2048, config=dict(SKINNY, SPLIT_K=3))])     # replaces
    data = json.loads(cfg_file.read_text())
    assert data["version"] == 1 and [(e["N"], e["K"]) for e in data["skinny_gemm"]] == [(2048, 4096), (5120, 2048)]
    assert not list(cfg_file.parent.glob("*.tmp")), "the write is atomic: no temporary file left"
    tc.load.cache_clear()
    assert tc.load("skinny_gemm") == {(132, 5120, 2048): dict(SKINNY, SPLIT_K=3),
                                      (132, 2048, 4096): dict(SKINNY, SPLIT_K=4)}
    assert tc.load("fp8_gemm") == {(132, 5120, 2048): FP8}


def test_save_sweep_keeps_the_rows_a_sweep_prints(cfg_file, capsys):
    path = tc.save_sweep("fp8_gemm", 132, "NVIDIA H200", [("30b qkv", 5120, 2048, FP8, "8.0 us")])
    assert path == cfg_file and str(cfg_file) in capsys.readouterr().out
    entry = json.loads(cfg_file.read_text())["fp8_gemm"][0]
    assert entry == dict(sms=132, N=5120, K=2048, device="NVIDIA H200", config=FP8, note="30b qkv: 8.0 us")


def test_load_is_read_once_per_process(cfg_file):
    assert tc.load("skinny_gemm") == {}
    tc.save("skinny_gemm", [dict(sms=132, N=64, K=64, config=SKINNY)])
    assert tc.load("skinny_gemm") == {}, "a sweep writing the file must not change a running engine"


@pytest.mark.parametrize("text, says", [
    ("{not json", "not readable JSON"),
    ('{"version": 2}', '"version": 1'),
    ('{"version": 1, "flash_attn": []}', "unknown kernel 'flash_attn'"),
    ('{"version": 1, "skinny_gemm": {}}', "must be a list"),
    ('{"version": 1, "skinny_gemm": [{"sms": 132, "N": 64, "config": {}}]}', "'sms', 'N', 'K'"),
    ('{"version": 1, "skinny_gemm": [{"sms": 132, "N": 64, "K": 64, "config": {"BLOCK_M": 64}}]}', "missing"),
    ('{"version": 1, "fp8_gemm": [{"sms": 132, "N": 64, "K": 64, "config": '
     '{"BLOCK_M": 16, "BLOCK_N": 48, "SPLIT_K": 1, "num_warps": 4, "num_stages": 3}}]}', "BLOCK_N must be a power of two"),
    ('{"version": 1, "fp8_gemm": [{"sms": 132, "N": 64, "K": 64, "config": '
     '{"BLOCK_M": 16, "BLOCK_N": 64, "SPLIT_K": 0, "num_warps": 4, "num_stages": 3}}]}', "SPLIT_K must be a positive"),
    ('{"version": 1, "fp8_gemm": [{"sms": 132, "N": 64, "K": 64, "config": '
     '{"BLOCK_M": 16, "BLOCK_N": 64, "SPLIT_K": 1, "num_warps": 4, "num_stages": 3, "SWAP_AB": "yes"}}]}',
     "SWAP_AB must be true or false"),
])
def test_a_malformed_file_is_named_with_the_fix(cfg_file, text, says):
    cfg_file.parent.mkdir(parents=True)
    cfg_file.write_text(text)
    kernel = "fp8_gemm" if "fp8_gemm" in text else "skinny_gemm"
    with pytest.raises(ValueError) as e:
        tc.load(kernel)
    assert says in str(e.value) and str(cfg_file) in str(e.value) and "delete it" in str(e.value)


def test_save_refuses_a_bad_config_and_keeps_the_file(cfg_file):
    tc.save("skinny_gemm", [dict(sms=132, N=64, K=64, config=SKINNY)])
    before = cfg_file.read_text()
    with pytest.raises(ValueError, match="BLOCK_K"):
        tc.save("skinny_gemm", [dict(sms=132, N=128, K=64, config={k: v for k, v in SKINNY.items() if k != "BLOCK_K"})])
    assert cfg_file.read_text() == before


def test_gemm_configs_come_from_the_file_for_every_row_count(cfg_file):
    pytest.importorskip("triton")
    from turbospec.kernels import fp8_gemm, skinny_gemm
    tc.save("skinny_gemm", [dict(sms=132, N=5120, K=2048, config=dict(SKINNY, num_stages=5))])
    tc.save("fp8_gemm", [dict(sms=132, N=6144, K=4096, config=FP8)])
    skinny_gemm.get_config.cache_clear()
    try:
        assert skinny_gemm.get_config(5120, 2048, 132) == dict(SKINNY, num_stages=5)         # the file wins
        assert skinny_gemm.get_config(6144, 4096, 132) == skinny_gemm.TUNED[(132, 6144, 4096)]
        picks = {str(fp8_gemm.pick_config(M, 6144, 4096, 128, 132)) for M in range(1, 65)}
        assert picks == {str(dict(FP8, SPLIT_K=6, kb_per_split=6))}, "one config for every M <= 64"
        assert fp8_gemm.pick_config(65, 6144, 4096, 128, 132)["BLOCK_M"] == 64                 # prefill tiles
    finally:
        skinny_gemm.get_config.cache_clear()

"""Fixtures of the audit tests: the scripted server (a subprocess on 127.0.0.1) and a dead port."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="session")
def scripted_base():
    """Base URL of the scripted server; endpoints are f"{base}/s/<spec>"."""
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "scripted_server.py")],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("PORT "), f"scripted server did not start: {line!r}"
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def dead_url():
    """A URL on a port nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


REPO = os.path.dirname(os.path.dirname(HERE))


@pytest.fixture
def run_audit_here(tmp_path):
    """Run an audit in this process (no Ctrl-C handler), optionally write its outputs; returns
    (results, AuditRun)."""
    import asyncio

    from turbospec.audit.client import RequestSettings
    from turbospec.audit.config import LoadConfig, LoadLevel
    from turbospec.audit.cost import CostModel
    from turbospec.audit.endpoint import Endpoint
    from turbospec.audit.gpus import get_gpu
    from turbospec.audit.pipeline import write_outputs
    from turbospec.audit.projection import SpecAssumption
    from turbospec.audit.results import Economics, build_results
    from turbospec.audit.roofline import load_model_bytes
    from turbospec.audit.runner import run_audit
    from turbospec.audit.tokens import find_token_counter
    from turbospec.audit.workload import load_workload

    def run(urls, concurrency=(1,), rates=(), num_prompts=4, max_tokens=31, dataset="code", warmup=1,
            timeout_s=10.0, api="chat", model_config=None, tokenizer=None, max_duration_s=60.0, out=None,
            currency="USD", write=False, model="scripted", max_inflight=256, target_concurrency=None, api_key=None):
        eps = tuple(Endpoint(u, model, api, api_key) for u in urls)
        levels = tuple(LoadLevel(concurrency=c) for c in concurrency) + tuple(LoadLevel(request_rate=r) for r in rates)
        cfg = LoadConfig(endpoints=eps, levels=levels, num_prompts=num_prompts,
                         request=RequestSettings(max_tokens=max_tokens, timeout_s=timeout_s), warmup=warmup,
                         max_duration_s=max_duration_s, max_inflight=max_inflight)
        gpu = get_gpu("h200")
        econ = Economics(gpu, CostModel.for_gpu(gpu, currency, 1), load_model_bytes(model_config, model),
                         SpecAssumption(3.0, "assumed (--acceptance-length 3)", 4, 0.3),
                         target_concurrency=target_concurrency)
        counters = {e.url: find_token_counter(tokenizer, e.model) for e in eps}
        audit = asyncio.run(run_audit(cfg, load_workload(dataset, num_prompts), counters, install_sigint=False))
        results = build_results(audit, cfg, econ, settings={"test": True, "max_inflight": max_inflight})
        if write:
            write_outputs(results, str(out or tmp_path))
        return results, audit

    return run

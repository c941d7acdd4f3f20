"""report.html is self-contained: it renders in headless Chromium (screenshot) and makes no network
request — checked statically (no external resource references) and in Chromium's own net log."""
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

CHROMIUM = "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                    reason="/usr/bin/chromium is absent (apt-get install -y chromium)")


@pytest.fixture(scope="module")
def report_dir(scripted_base, tmp_path_factory):
    """A rich report: two endpoints raced at two concurrencies, a model shape, faults, rupees."""
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
    from turbospec.audit.workload import load_workload

    out = tmp_path_factory.mktemp("report")
    eps = (Endpoint(f"{scripted_base}/s/ttft=30,gap=15,k=3,html=1", "Qwen/Qwen3-8B"),
           Endpoint(f"{scripted_base}/s/ttft=60,gap=20,k=1,fault=none,html=2", "Qwen/Qwen3-8B"))
    cfg = LoadConfig(endpoints=eps, levels=(LoadLevel(concurrency=1), LoadLevel(concurrency=4)), num_prompts=5,
                     request=RequestSettings(max_tokens=16, timeout_s=10), warmup=0)
    gpu = get_gpu("h200")
    econ = Economics(gpu, CostModel.for_gpu(gpu, "INR", 1), load_model_bytes(None, "Qwen/Qwen3-8B"),
                     SpecAssumption(3.0, "assumed (--acceptance-length 3)", 4, 0.3))
    audit = asyncio.run(run_audit(cfg, load_workload("all", 5), {}, install_sigint=False))
    write_outputs(build_results(audit, cfg, econ, {"dataset": "all"}), str(out))
    return out


def test_html_has_no_external_references(report_dir):
    html = (report_dir / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html and "<link" not in html
    refs = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]+)""", html) + re.findall(r"url\(\s*['\"]?([^)'\"]+)", html)
    assert refs and all(r.startswith("data:image/png;base64,") for r in refs), refs
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", html)
    assert not re.search(r"@import|//fonts\.|\bcdn", text, re.I)
    figures = re.findall(r'<img alt="([^"]+)"', html)
    assert len(figures) == 5                           # tok/s, latency, TTFT, acceptance, cost
    # the verdict comes first, then the tables
    assert html.index('class="badge') < html.index("Speed and latency by load level") < html.index("Metric definitions")
    md = (report_dir / "report.md").read_text()
    assert md.index("## Verdict") < md.index("## Speed and latency")
    assert all((report_dir / p).exists() for p in re.findall(r"\]\((figures/[^)]+)\)", md))
    assert json.loads((report_dir / "results.json").read_text())["model"]["source"].startswith("preset qwen3-8b")


def chromium_render(page: str, tmp_path) -> tuple[np.ndarray, list[dict]]:
    """Screenshot of a local page plus every network request a document initiated (from the net log)."""
    shot, netlog = tmp_path / "shot.png", tmp_path / "netlog.json"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'profile'}", f"--log-net-log={netlog}", "--net-log-capture-mode=Everything",
           "--window-size=1280,2000", f"--screenshot={shot}", f"file://{page}"]
    subprocess.run(cmd, check=True, timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = json.loads(netlog.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    # Chromium's own background traffic (updates, time, accounts) has no initiating origin; a page's does
    starts = [e["params"] for e in log["events"] if e["type"] == start_job and "url" in e.get("params", {})]
    from_pages = [p for p in starts if p.get("initiator") != "not an origin"]
    import matplotlib.image
    return matplotlib.image.imread(str(shot)), from_pages


@needs_chromium
def test_chromium_renders_the_report_offline(report_dir, tmp_path):
    img, requests = chromium_render(str(report_dir / "report.html"), tmp_path)
    assert requests == []
    shutil.copy(tmp_path / "shot.png", report_dir / "screenshot.png")
    assert img.shape[:2] == (2000, 1280)
    rgb = img[..., :3]
    assert rgb.std() > 0.05                                 # not blank
    assert (np.abs(rgb - rgb[0, 0]).sum(axis=2) > 0.1).mean() > 0.05   # much more than background
    top = rgb[:400].reshape(-1, 3)
    badge = np.array([0x1a, 0x7f, 0x37]) / 255              # the green GO badge is above the fold
    assert (np.abs(top - badge).sum(axis=1) < 0.05).sum() > 500


@needs_chromium
def test_the_net_log_check_does_catch_a_page_request(scripted_base, tmp_path):
    """Control: a page that loads an image from a local server shows up as a page-initiated request."""
    page = tmp_path / "leaky.html"
    page.write_text(f'<!DOCTYPE html><html><body><img src="{scripted_base}/s/probe/pixel.png"></body></html>')
    _, requests = chromium_render(str(page), tmp_path)
    assert any(r["url"].startswith(scripted_base) for r in requests)


def test_markdown_table_cells_are_literal_text():
    from turbospec.audit.report import Section
    from turbospec.audit.report_md import render_markdown
    md = render_markdown("t", [Section("s", [("table", ["detail"], [["<html>503 Service Unavailable</html> a|b *x* `c`"]])])],
                         {})
    assert "| &lt;html&gt;503 Service Unavailable&lt;/html&gt; a\\|b \\*x\\* \\`c\\` |" in md and "<html>" not in md

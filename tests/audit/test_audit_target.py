"""--target-concurrency names the load the verdict is decided at: a level that will not be measured is
refused before anything is sent; where it cannot be (a Poisson level's load is known only once
measured), the verdict says which level it was decided at, in results.json, the report and the console."""
import json

import pytest
from typer.testing import CliRunner

from tests.audit.test_audit_cli import OK, cli
from turbospec.audit.config import LoadLevel, check_target

FAST = "ttft=5,gap=5"


@pytest.mark.parametrize("extra,message", [
    (["--concurrency", "1", "--target-concurrency", "3"],
     ("Error: --target-concurrency 3 is not a measured level: this audit measures concurrency 1; add it to "
      "--concurrency (e.g. --concurrency 1,3), or pass one of 1")),
    (["--target-concurrency", "8"],               # the default levels 1,4,16
     ("Error: --target-concurrency 8 is not a measured level: this audit measures concurrency 1,4,16; add it to "
      "--concurrency (e.g. --concurrency 1,4,8,16), or pass one of 1,4,16")),
    (["--concurrency", "1,4", "--target-concurrency", "2.5"],
     ("Error: --target-concurrency 2.5 is not a measured level: this audit measures concurrency 1,4; levels are "
      "whole numbers of requests in flight, or pass one of 1,4")),
])
def test_a_target_that_will_not_be_measured_is_refused_before_anything_is_sent(extra, message):
    res = CliRunner().invoke(cli(), OK + extra)            # nothing listens on port 9: a request would exit 1
    assert res.exit_code == 2, res.output
    assert res.output.replace("\n", " ").strip() == message


def test_a_target_is_checked_against_the_levels_and_left_to_the_verdict_with_poisson_levels():
    closed = (LoadLevel(concurrency=1), LoadLevel(concurrency=4))
    check_target(4.0, closed)                              # measured: accepted
    check_target(None, closed)
    with pytest.raises(ValueError, match="--target-concurrency 2 is not a measured level"):
        check_target(2.0, closed)
    check_target(2.0, closed + (LoadLevel(request_rate=2.0),))    # may be the Poisson level's load


def test_a_measured_target_carries_no_caveat(scripted_base, run_audit_here):
    res, _ = run_audit_here([f"{scripted_base}/s/{FAST},tag=tgtexact"], concurrency=(1, 2), num_prompts=2,
                            warmup=0, max_tokens=7, target_concurrency=2)
    v = res["verdict"]
    assert v["target_run"] == "concurrency 2"
    assert not any(c.startswith("decided at") for c in v["caveats"]), v["caveats"]


def test_a_level_that_was_not_measured_is_named_in_the_caveat(scripted_base, run_audit_here):
    # the CLI refuses it up front; an audit stopped before reaching the level leaves the same gap
    res, _ = run_audit_here([f"{scripted_base}/s/{FAST},tag=tgtgap"], concurrency=(1, 2), num_prompts=2,
                            warmup=0, max_tokens=7, target_concurrency=3)
    v = res["verdict"]
    assert v["target_run"] == "concurrency 2"
    assert v["caveats"][0] == ("decided at concurrency 2, the measured level nearest to --target-concurrency 3 "
                               "(concurrency 3 was not measured: add 3 to --concurrency to decide at that load)")


def test_a_poisson_target_says_which_level_decided_in_every_output(scripted_base, tmp_path):
    res = CliRunner().invoke(cli(), [
        "audit", "--endpoint", f"{scripted_base}/s/{FAST},tag=tgtpoisson", "--model", "scripted",
        "--request-rate", "50", "--target-concurrency", "3", "--num-prompts", "2", "--max-tokens", "7",
        "--warmup", "0", "--gpu", "h200", "--out", str(tmp_path), "--no-progress"])
    assert res.exit_code == 0, res.output                  # not refusable: the Poisson load is measured
    r = json.loads((tmp_path / "results.json").read_text())
    run = r["runs"][0]
    caveat = (f"decided at 50 req/s (Poisson), {run['effective_concurrency']:.1f} in flight on average, the "
              "measured level nearest to --target-concurrency 3 (a Poisson level's load is known only once measured)")
    assert r["verdict"]["caveats"][0] == caveat
    assert f"  ! {caveat}\n" in res.output
    assert f"**Caveat**: {caveat}" in (tmp_path / "report.md").read_text()

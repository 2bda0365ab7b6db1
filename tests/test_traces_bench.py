"""The trace-replay benchmark times every registered trace rule: ``python -m mara.bench --traces CSV:SPEC
--trace-methods all`` (one row per distinct scheduler, the methods it stands for named beside it, and the sum)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mara.bench.traces import expand_methods, trace_rules
from mara.core.config import available_methods, is_learned, load_method_cfg
from mara.traces.schema import SHIPPED_SAMPLE

ROOT = Path(__file__).resolve().parents[1]


def _trace_methods() -> dict:
    out = {}
    for m in available_methods():
        cfg = load_method_cfg(m)
        if cfg.get("trace_scheduler"):
            out[m] = cfg
    return out


def test_all_names_every_non_learned_trace_rule_once():
    """Every registered non-learned trace scheduler is timed or stands beside the one timed for it; each timed one is
    a different scheduler; learned policies are left to be named."""
    registered = _trace_methods()
    rules = trace_rules()
    covered = [m for timed, same in rules.items() for m in [timed, *same]]
    assert sorted(covered) == sorted(m for m, c in registered.items() if not is_learned(c))
    blocks = [{k: v for k, v in dict(registered[m].trace_scheduler).items() if k != "name"} for m in rules]
    assert all(a != b for i, a in enumerate(blocks) for b in blocks[i + 1 :])
    for timed, same in rules.items():  # the others differ only in name / what they are told on target-loss jobs
        for m in same:
            assert {k: v for k, v in dict(registered[m].trace_scheduler).items() if k != "name"} == blocks[
                list(rules).index(timed)
            ]
    for name in ("EDF", "ElasticFlow", "Gandiva", "Tiresias", "Themis", "Slack-Truth"):
        assert name in rules
    assert "Slack-QR-q" in rules["Slack-Truth"] and "ElasticFlow-true" in rules["ElasticFlow"]
    methods, aliases = expand_methods(["EDF", "all"])
    assert methods[0] == "EDF" and sorted(methods) == sorted(rules) and aliases == {m: rules[m] for m in methods}


def test_bench_times_every_rule_on_a_trace(tmp_path):
    """One replay row per rule with its seconds and deadline-met ratio, and the sum, on a small cut of the sample."""
    lines = SHIPPED_SAMPLE.read_text().splitlines()
    csv = tmp_path / "cut.csv"
    csv.write_text("\n".join(lines[:41]) + "\n")
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = ["-m", "mara.bench", "--traces", f"{csv}:n8g8", "--trace-methods", "all", "--trace-sweep", "--json", str(out)]
    p = subprocess.run([sys.executable, *cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    rules = trace_rules()
    for m in rules:
        assert f"trace replay {m}, cut.csv n8g8 (s)" in p.stdout
    assert f"trace replay, all {len(rules)} above, cut.csv (s)" in p.stdout
    assert "(also Slack-" in p.stdout
    rec = json.loads(out.read_text())["replay"]
    assert sorted(r["method"] for r in rec) == sorted(rules)
    assert all(r["jobs"] == 40 and 0.0 <= r["met"] <= 1.0 and r["seconds"] > 0 and r["cpu_seconds"] > 0 for r in rec)


def test_bad_trace_bench_input_stops_in_one_line_before_any_replay():
    """A missing file, a bad cluster spec or an unknown method name: one line on stderr, exit 2."""
    for args in (
        ["--traces", "no_such_trace.csv:n64g8"],
        ["--traces", f"{SHIPPED_SAMPLE}:x64"],
        ["--traces", "--trace-methods", "Bogus"],
    ):
        r = subprocess.run(
            [sys.executable, "-m", "mara.bench", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
        assert "benchmark" not in r.stdout

"""``python -m mara.report ratio``: a method's mean success as a share of a bound's, paired over identical episodes."""

import json
import subprocess
import sys

import numpy as np

from mara.report.__main__ import main


def _rows(rng, n):
    """Per-episode rows at one load: a bound and a method below it, several seeds for the method."""
    bound = rng.uniform(0.4, 0.9, n)
    rows = [
        {"method": "B", "load": 0.07, "task_set": "ID", "root": 0, "episode": i, "success_rate": b}
        for i, b in enumerate(bound)
    ]
    for seed in (0, 1):
        rows += [
            {
                "method": "M",
                "load": 0.07,
                "task_set": "ID",
                "root": 0,
                "episode": i,
                "train_seed": seed,
                "success_rate": b - rng.uniform(0.0, 0.1),
            }
            for i, b in enumerate(bound)
        ]
    return rows


def test_ratio_is_the_ratio_of_means_with_a_delta_method_error(tmp_path, capsys):
    rng = np.random.default_rng(0)
    rows = _rows(rng, 400)
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"rows": rows}))
    assert main(["ratio", str(path), "B", "0.97", "M"]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| M |")][0]
    cells = [c.strip() for c in line.strip("|").split("|")]
    ratio, se = (float(v) for v in cells[4].split("±"))
    b = np.array([r["success_rate"] for r in rows if r["method"] == "B"])
    m = np.mean([[r["success_rate"] for r in rows if r["method"] == "M" and r["train_seed"] == s] for s in (0, 1)], 0)
    assert abs(ratio - m.mean() / b.mean()) < 1e-4
    boot = [m[i].mean() / b[i].mean() for i in (rng.integers(0, len(b), len(b)) for _ in range(2000))]
    assert 0.7 < se / np.std(boot) < 1.3  # the delta method agrees with a paired bootstrap over episodes
    diff = float(cells[5].split("±")[0])
    assert abs(diff - 100 * (m - 0.97 * b).mean()) < 0.01


def test_a_target_that_is_not_a_number_is_one_line_and_exit_2(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "mara.report", "ratio", "x.json", "B", "high", "M"], capture_output=True, text=True
    )
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1

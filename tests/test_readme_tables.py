"""README tables from a re-measurement folder (``python -m mara.readme_tables``): known values, partial folders,
missing markers and bad arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mara.report.results import build_results
from mara.report.tables import LARA_READINGS, SECTIONS, fill_readme


def _rows(method, values, task_sets=("ID", "OOD"), loads=(0.04, 0.05, 0.06, 0.07), roots=(0, 1)):
    """Episode rows whose success rate is values[root] for every task set and load."""
    return [
        {"method": method, "task_set": ts, "load": ld, "root": r, "success_rate": values[i]}
        for ts in task_sets
        for ld in loads
        for i, r in enumerate(roots)
    ]


def _write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _readme(tmp_path, names=SECTIONS):
    body = "# t\nintro\n" + "".join(f"<!-- {n}:begin -->\nold {n}\n<!-- {n}:end -->\nbetween\n" for n in names)
    p = tmp_path / "README.md"
    p.write_text(body)
    return p


def test_rules_and_lara_sweep_read_the_averages(tmp_path):
    run = tmp_path / "out"
    _write(run / "rules" / "results.json", build_results(_rows("Slack-FM", [0.5, 0.7]) + _rows("LARA", [0.4, 0.4])))
    _write(
        run / "rules_stress" / "results.json",
        build_results(_rows("Slack-FM", [0.9, 0.8], task_sets=("stress",), loads=(0.05,))),
    )
    _write(
        run / "lara_sweep" / "faithful" / "results.json",
        build_results(_rows("LARA", [0.25, 0.35]) + _rows("LARA-FM", [0.6, 0.6])),
    )
    readme = _readme(tmp_path)
    written = fill_readme(run, readme)
    assert written == {
        "rules": True,
        "prediction": False,
        "lofo": False,
        "lara_sweep": True,
        "live": False,
        "imitation": False,
        "checkpoints": False,
    }
    text = readme.read_text()
    # Slack-FM: roots 50 % and 70 % -> 60 ± 14.14 at every load; stress 85 ± 7.07; LARA has no stress run
    assert (
        "| Slack-FM (predictor-guided rule) | 60.00 ± 14.14 | 60.00 ± 14.14 | 60.00 ± 14.14 | 60.00 ± 14.14 | "
        "85.00 ± 7.07 |"
    ) in text
    assert "| LARA (faithful reading) | 40.00 ± 0.00 | 40.00 ± 0.00 | 40.00 ± 0.00 | 40.00 ± 0.00 | – |" in text
    assert "| LARA-FM-best |" not in text  # not measured: no row
    faithful = LARA_READINGS[0][1]
    assert f"| {faithful} | 30.00 / 30.00 / 30.00 / 30.00 | 60.00 / 60.00 / 60.00 / 60.00 |" in text
    assert "| `plan_nodes: all` | – | – |" in text  # a reading not in the folder
    # sections without inputs are left as they were, and so is the text around the markers
    assert "old prediction" in text and "old lofo" in text and "old live" in text and "old rules" not in text
    assert text.startswith("# t\nintro\n") and text.count("between") == len(SECTIONS)


def test_prediction_lofo_and_live_sections(tmp_path):
    run = tmp_path / "out"
    r = lambda mae, acc, cov: {"mae": mae, "budget_acc": acc, "coverage": cov, "ms_per_prefix": 0.25}  # noqa: E731
    _write(
        run / "paper" / "prediction" / "prediction.json",
        {"results": {"ID": {"FM": r(30.0, 0.9, 0.4), "WLS": r(200.0, 0.5, 0.1)}}},
    )
    _write(
        run / "prediction_v3" / "prediction.json",
        {"results": {"ID": {"FM": r(45.0, 0.92, 0.75), "WLS": r(200.0, 0.5, 0.1)}}},
    )
    fold = {
        "FM": {"mae": 50.0, "budget_acc": 0.8, "coverage": 0.9, "n_queries": 10},
        "WLS": {"mae": 100.0, "budget_acc": 0.7, "coverage": 0.1, "n_queries": 10},
    }
    _write(run / "lofo" / "lofo.json", {"folds": {"CNN_Cifar10": fold}, "fm_cfg": {"net": {"feature_set": "v3"}}})
    (run / "live").mkdir(parents=True)
    (run / "live" / "live_results.md").write_text(
        "# Live run\n\n| Method | Success (%) |\n|---|---|\n| FIFO | 28.6 (2/7) |\n"
    )
    readme = _readme(tmp_path)
    assert fill_readme(run, readme, names=["prediction", "lofo", "live"]) == {
        "prediction": True,
        "lofo": True,
        "live": True,
    }
    text = readme.read_text()
    assert "| ID | FM (paper inputs) | 30.00 | 90.00 | 40.0 | 0.25 |" in text
    assert "| ID | FM v3 | 45.00 | 92.00 | 75.0 | 0.25 |" in text
    assert "| ID | WLS | 200.00 | 50.00 | 10.0 | 0.25 |" in text
    assert "| CNN_Cifar10 | 10 | 50.0 | 100.0 | 0.50 |" in text and "v3 inputs" in text
    assert "| FIFO | 28.6 (2/7) |" in text and "# Live run" not in text and "`python -m mara.live`:" in text
    assert "old rules" in text and "old lara_sweep" in text


def test_missing_markers_leave_the_readme_untouched(tmp_path):
    run = tmp_path / "out"
    _write(run / "rules" / "results.json", build_results(_rows("LARA", [0.4, 0.4])))
    fold = {m: {"mae": 1.0, "budget_acc": 1.0, "coverage": 1.0, "n_queries": 1} for m in ("FM", "WLS")}
    _write(run / "lofo" / "lofo.json", {"folds": {"CNN_Cifar10": fold}, "fm_cfg": {}})
    readme = _readme(tmp_path, names=["rules"])  # no lofo markers
    before = readme.read_text()
    with pytest.raises(ValueError, match="lofo:begin"):
        fill_readme(run, readme)
    assert readme.read_text() == before


def test_entry_point_errors_are_one_line(tmp_path):
    readme = _readme(tmp_path)
    cmd = [sys.executable, "-m", "mara.report.tables"]
    p = subprocess.run(cmd + [f"run={tmp_path / 'nope'}", f"readme={readme}"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("error: no measurement folder") and p.stderr.count("\n") == 1
    p = subprocess.run(cmd + [f"run={tmp_path}", f"readme={readme}", "sections=rulez"], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown README section(s) ['rulez']" in p.stderr
    p = subprocess.run(cmd + ["oops"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("usage:")
    p = subprocess.run(cmd + [f"run={tmp_path}", f"readme={readme}"], capture_output=True, text=True)
    assert (
        p.returncode == 0 and "rules: left as it is" in p.stdout and readme.read_text().count("old ") == len(SECTIONS)
    )


def test_imitation_section_reads_each_seed(tmp_path):
    run = tmp_path / "out"
    ck = run / "paper" / "policy" / "MARA" / "seed1" / "checkpoints"
    _write(
        ck / "imitation.json",
        {
            "rounds": [
                {"round": 0, "states": 100, "agreement_train": 0.995},
                {"round": 1, "states": 200, "agreement_train": 0.99, "agreement_new_before_training": 0.97},
            ]
        },
    )
    _write(
        ck / "validation.json",
        {
            "best_iteration": 4,
            "val_success_rate": 0.63,
            "val_baselines": {"Slack-FM": 0.62, "FIFO": 0.5, "EDF": 0.45, "LARA": 0.55},
            "history": [
                {"iteration": 0, "env_steps": 0, "val_success_rate": 0.61},
                {"iteration": 4, "env_steps": 8192, "val_success_rate": 0.63},
            ],
        },
    )
    readme = _readme(tmp_path)
    assert fill_readme(run, readme, names=["imitation"]) == {"imitation": True}
    assert "| 1 | 200 | 99.5 | 99.0 | 97.0 | 61.0 | 63.0 | 4, 8,192 | 62.0 | 50.0 | 45.0 | 55.0 |" in readme.read_text()


def test_checkpoints_section_reads_the_checkpoints_training_record(tmp_path):
    import torch

    run = tmp_path / "out"
    (run / "fm_v3" / "predictor").mkdir(parents=True)
    torch.save(
        {
            "state_dict": {},
            "hparams": {},
            "extra": {
                "epochs": 40,
                "val/fm_loss": 0.3051,
                "val/mae_fm": 38.52,
                "val/mae_wls": 144.9,
                "band_offset": 0.0594,
                "wall_s": 987.9,
            },
        },
        run / "fm_v3" / "predictor" / "fm.ckpt",
    )
    _write(
        run / "live_mara" / "policy" / "checkpoints" / "validation.json",
        {
            "best_iteration": 4,
            "val_success_rate": 0.577,
            "val_baselines": {"FIFO": 0.563},
            "history": [{"iteration": 4, "env_steps": 8192, "val_success_rate": 0.577}],
        },
    )
    readme = _readme(tmp_path)
    assert fill_readme(run, readme, names=["checkpoints"]) == {"checkpoints": True}
    text = readme.read_text()
    assert (
        "| `fm_zoo_v3.ckpt` (v3 inputs) | `python -m mara.train stage=predictor predictor=fm "
        "trainer.max_epochs=40` | 40 | 0.305 | 38.5 / 144.9 | 0.059 | 988 |"
    ) in text
    assert "fm_zoo.ckpt` (paper" not in text  # no v1 run in the folder: no row
    assert (
        "best validation success 57.7 % at iteration 4 (8,192 env steps); the rules on the same episodes: FIFO 56.3."
        in text
    )


def test_figures_of_a_docs_page_and_of_a_root_readme(tmp_path):
    from mara.report.sections import figure_link, figures_dir

    page = tmp_path / "docs" / "results.md"
    assert figures_dir(page) == tmp_path / "docs" / "figures"
    assert figure_link(page, tmp_path / "docs" / "figures" / "a.png") == "figures/a.png"
    readme = tmp_path / "README.md"
    assert figures_dir(readme) == tmp_path / "docs" / "figures"
    assert figure_link(readme, tmp_path / "docs" / "figures" / "a.png") == "docs/figures/a.png"


def test_the_results_page_has_every_generated_section():
    """docs/results.md carries the markers of every section the commands fill (a missing pair would make them fail)."""
    from mara.report.sections import markers

    text = (Path(__file__).resolve().parents[1] / "docs" / "results.md").read_text()
    for name in [*SECTIONS, "results", "fidelity"]:
        begin, end = markers(name)
        assert 0 <= text.find(begin) < text.find(end), name

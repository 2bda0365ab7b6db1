"""The suite figure (mara/report/suite_figure.py): the learned methods it draws and the file it writes."""

from __future__ import annotations

from mara.report.suite_figure import learned_in, suite_figure


def _summary(with_nodes_everywhere: bool) -> dict:
    cell = lambda d: {
        "best": "Slack-QR-q",
        "best_mean": 80.0,
        "rules": {"Slack-QR-q": 80.0},  # noqa: E731
        "MARA-suite": {"diff": d, "se": 0.1, "n": 180},
        "MARA-suite_mean": 80.0 + d,
    }
    out = {
        "identical": {"0.04": cell(0.1), "0.05": cell(-0.1)},
        "3,1,1,1,1,1,1 c1": {"0.04": cell(0.0), "0.05": cell(0.3)},
    }
    out["identical"]["0.04"]["MARA-nodes"] = {"diff": -0.5, "se": 0.2, "n": 180}
    if with_nodes_everywhere:
        for per in out.values():
            for c in per.values():
                c["MARA-nodes"] = {"diff": -0.5, "se": 0.2, "n": 180}
    return out


def test_only_methods_measured_in_every_cell_are_drawn(tmp_path):
    assert learned_in(_summary(False)) == ["MARA-suite"]  # MARA-nodes lacks cells: not drawn as if it were complete
    assert learned_in(_summary(True)) == ["MARA-suite", "MARA-nodes"]
    path = suite_figure(_summary(True), tmp_path / "fig" / "suite.png")
    assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_learned_method_no_figure(tmp_path):
    rules_only = {"identical": {"0.04": {"best": "Slack-QR-q", "best_mean": 80.0, "rules": {"Slack-QR-q": 80.0}}}}
    assert suite_figure(rules_only, tmp_path / "suite.png") is None and not (tmp_path / "suite.png").exists()

"""Method styles (mara/report/styles.py): one distinct style per method, read from its registration (conf/method), the
kinds told apart, the same style in every figure the package draws."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mara.core import registry
from mara.core.config import available_methods, load_method_cfg, privileged_predictors
from mara.report.styles import bounds, known_methods, method_style

METHODS = available_methods()


def test_every_configured_method_has_its_own_style():
    assert set(METHODS) <= set(known_methods())
    styles = {m: method_style(m) for m in METHODS}
    colours = [s["color"].lower() for s in styles.values()]
    assert len(set(colours)) == len(METHODS), "two methods share a colour"
    assert len({(s["color"], s["linestyle"], s["marker"]) for s in styles.values()}) == len(METHODS)


def test_kinds_bounds_dashed_rules_solid_learned_thick():
    for m in METHODS:
        s = method_style(m)
        if m in bounds():
            assert s["linestyle"] == "--", m
            cfg = load_method_cfg(m)
            assert cfg.kind == "bound" or cfg.get("predictor") in privileged_predictors(), (
                m
            )  # fed true remaining batches
        elif registry.method(m).learned:
            assert s["linestyle"] == "-" and s["linewidth"] >= 2 * method_style("FIFO")["linewidth"] and s["marker"], m
            assert s["zorder"] > method_style("Slack-QR-q")["zorder"]  # drawn over the rules
        else:
            assert s["linestyle"] == "-" and s["linewidth"] < 2, m
    assert {m for m in METHODS if load_method_cfg(m).kind == "bound"} <= set(bounds())
    assert {m for m in METHODS if load_method_cfg(m).get("predictor") in privileged_predictors()} <= set(bounds())


def test_unknown_names_get_a_deterministic_style_of_their_own():
    known = {method_style(m)["color"] for m in known_methods()}
    a, b = method_style("MARA-new"), method_style("Some-rule")
    assert a["linestyle"] == b["linestyle"] == "-." and a["color"] not in known and b["color"] not in known
    assert a["linewidth"] > b["linewidth"]  # a learned name is drawn thick
    code = "from mara.report.styles import method_style; print(method_style('MARA-new'))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other == str(a)  # the same in another process (no hash randomisation)


def _summary(methods):
    cell = lambda v: {"mean": v, "std": 1.0, "n": 3}  # noqa: E731
    return {m: {"Average": {"0.04": cell(60.0 + i), "0.07": cell(50.0 + i)}} for i, m in enumerate(methods)}


@pytest.mark.parametrize("figure", ["results", "paper"])
def test_figures_draw_each_method_in_its_style(figure, tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.axes import Axes

    drawn = {}
    plot = Axes.plot

    def spy(self, *args, **kwargs):
        lines = plot(self, *args, **kwargs)
        if kwargs.get("label"):
            drawn[kwargs["label"]] = lines[0]
        return lines

    monkeypatch.setattr(Axes, "plot", spy)
    summary = _summary(METHODS)
    if figure == "results":
        from mara.report.results import plot_load_curve

        assert plot_load_curve({"summary": summary}, tmp_path / "f.png").stat().st_size > 0
    else:
        from mara.report.paper import figure4

        assert figure4(summary, tmp_path / "f.png").stat().st_size > 0
    assert set(METHODS) <= set(drawn)
    for m in METHODS:
        s, line = method_style(m), drawn[m]
        assert (line.get_color(), line.get_linestyle(), line.get_marker(), line.get_linewidth()) == (
            s["color"],
            s["linestyle"],
            s["marker"],
            s["linewidth"],
        ), m

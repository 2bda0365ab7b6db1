"""The paper report's derived tables: every method at every load, and MARA minus each method on identical episodes."""

import pytest

from mara.eval.metrics import summarize
from mara.report.paper import by_load, paired_differences


def _rows(method, rates, load=0.04, seeds=(None,)):
    out = []
    for seed in seeds:
        for ep, r in enumerate(rates):
            out.append(
                {
                    "method": method,
                    "task_set": "ID" if ep % 2 else "RL_OOD",
                    "load": load,
                    "root": ep // 2,
                    "train_seed": seed,
                    "episode": ep,
                    "success_rate": r + (0.1 if seed == 1 else 0.0),
                }
            )
    return out


def test_paired_differences_average_seeds_then_pair_episodes():
    rows = (
        _rows("MARA", [0.5, 0.6, 0.7, 0.8], seeds=(0, 1))
        + _rows("FIFO", [0.4, 0.6, 0.5, 0.8])
        + _rows("LARA", [0.5, 0.5, 0.5, 0.5], load=0.07)
    )
    out = {r["method"]: r for r in paired_differences(rows)}
    # MARA per episode = mean over seeds (rate + 0.05); FIFO differences: 0.15, 0.05, 0.25, 0.05 (in points ×100)
    assert set(out) == {"FIFO"}  # LARA has no episode at p = 0.04
    assert out["FIFO"]["diff"] == pytest.approx(12.5) and out["FIFO"]["n_episodes"] == 4
    assert out["FIFO"]["se"] == pytest.approx(
        ((15 - 12.5) ** 2 * 1 + (5 - 12.5) ** 2 * 2 + (25 - 12.5) ** 2) ** 0.5 / 3**0.5 / 2
    )
    assert out["FIFO"]["paper_diff"] == pytest.approx(63.46 - 53.06)
    assert paired_differences(_rows("FIFO", [0.4])) == []  # no MARA rows: nothing to compare


def test_by_load_lists_every_method_with_its_stress_cell():
    rows = _rows("MARA", [0.5, 0.6]) + _rows("MARA", [0.3, 0.4], load=0.07) + _rows("FIFO", [0.2, 0.2])
    stress = summarize([dict(r, task_set="stress", load=0.0) for r in _rows("MARA", [0.65, 0.65])])
    table = {r["method"]: r for r in by_load(summarize(rows), stress)}
    assert table["MARA"]["loads"]["0.04"]["mean"] == pytest.approx(55.0)
    assert table["MARA"]["loads"]["0.07"]["mean"] == pytest.approx(35.0)
    assert table["FIFO"]["loads"]["0.07"] is None and table["FIFO"]["stress"] is None
    assert table["MARA"]["stress"]["mean"] == pytest.approx(65.0)


def test_readme_sections_replace_between_their_own_markers_only():
    from mara.report.sections import replace_section

    text = (
        "a\n<!-- results:begin -->\nold\n<!-- results:end -->\nb\n<!-- fidelity:begin -->\nkeep\n<!-- "
        "fidelity:end -->\n"
    )
    out = replace_section(text, "new\n\n", "results")
    assert out == text.replace("\nold\n", "\nnew\n")
    with pytest.raises(ValueError, match="live:begin"):
        replace_section(text, "x", "live")
    with pytest.raises(ValueError, match="results:begin"):  # end before begin is not a section
        replace_section("<!-- results:end -->\n<!-- results:begin -->\n", "x", "results")

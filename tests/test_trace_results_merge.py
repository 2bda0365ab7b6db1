"""A trace run into a folder that holds other results keeps every earlier row: trace results merge by method, a
folder of the other kind (an evaluation's) is refused in one line before any work, and target-loss jobs drawn
from the parametric bank in place of the absent real one say so."""

import json
import shutil

import pytest

from mara.core.config import ConfigError
from mara.evaluate import evaluate
from tests.conftest import compose_config, run_python
from tests.test_run_safety import tiny


def trace_cfg(out, *extra):
    return compose_config(
        "evaluate",
        "experiment=trace",
        "trace.first_jobs=20",
        "eval.tensorboard=false",
        f"paths.output_dir={out}",
        *extra,
    )


def rows_of(folder) -> dict:
    res = json.loads((folder / "results.json").read_text())
    out: dict = {}
    for r in res["rows"]:
        out.setdefault(r["method"], []).append(r)
    return out


def test_a_trace_run_with_another_method_keeps_the_first_runs_rows_and_a_rerun_reuses_them(tmp_path, capsys):
    evaluate(trace_cfg(tmp_path, "methods=[EDF]"))
    first = rows_of(tmp_path)["EDF"]
    evaluate(trace_cfg(tmp_path, "methods=[ElasticFlow]"))
    res = json.loads((tmp_path / "results.json").read_text())
    assert list(res["summary"]) == ["EDF", "ElasticFlow"] and set(res["timings"]) == {"EDF", "ElasticFlow"}
    assert rows_of(tmp_path)["EDF"] == first and len(rows_of(tmp_path)["ElasticFlow"]) == 20
    assert {w["method"] for w in res["windows"]} == {"EDF", "ElasticFlow"}
    assert "| EDF |" in (tmp_path / "results.md").read_text()
    # the same method with the same settings on the same protocol: its rows reused, not replayed
    evaluate(trace_cfg(tmp_path, "methods=[EDF]"))
    assert rows_of(tmp_path)["EDF"] == first and len(rows_of(tmp_path)["ElasticFlow"]) == 20
    # another protocol (more jobs): the earlier file is moved aside, never silently replaced
    evaluate(trace_cfg(tmp_path, "methods=[EDF]", "trace.first_jobs=30"))
    assert set(rows_of(tmp_path)) == {"EDF"} and len(rows_of(tmp_path)["EDF"]) == 30
    aside = list(tmp_path.glob("results.superseded-*.json"))
    assert len(aside) == 1 and len(json.loads(aside[0].read_text())["rows"]) == 40


def test_a_trace_run_into_an_evaluation_folder_is_refused_in_one_line_and_its_rows_kept(tmp_path, small_bank):
    evaluate(tiny(tmp_path, small_bank.path, "methods=[FIFO]"))
    before = (tmp_path / "results.json").read_text()
    p = run_python(
        "-m", "mara.evaluate", "experiment=trace", "trace.first_jobs=20", "methods=[EDF]", f"hydra.run.dir={tmp_path}"
    )
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr[-2000:]
    assert "holds the results of an evaluation, which a trace replay would write over" in p.stderr
    assert (tmp_path / "results.json").read_text() == before
    with pytest.raises(ConfigError, match="fresh=true"):  # the same check in the process
        evaluate(trace_cfg(tmp_path, "methods=[EDF]"))
    # fresh=true: the evaluation's products are moved aside, not deleted, and the trace run writes its own
    evaluate(trace_cfg(tmp_path, "methods=[EDF]", "fresh=true"))
    assert set(rows_of(tmp_path)) == {"EDF"}
    kept = list((tmp_path / "superseded").glob("*/results.json"))
    assert len(kept) == 1 and kept[0].read_text() == before


def test_an_evaluation_into_a_trace_folder_is_refused_in_one_line_and_its_rows_kept(tmp_path, small_bank):
    evaluate(trace_cfg(tmp_path, "methods=[EDF]"))
    before = (tmp_path / "results.json").read_text()
    p = run_python("-m", "mara.evaluate", "methods=[FIFO]", f"bank.path={small_bank.path}", f"hydra.run.dir={tmp_path}")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr[-2000:]
    assert "holds the results of a trace replay, which an evaluation would write over" in p.stderr
    assert (tmp_path / "results.json").read_text() == before
    with pytest.raises(ConfigError, match="trace replay"):
        evaluate(tiny(tmp_path, small_bank.path, "methods=[FIFO]"))
    assert (tmp_path / "results.json").read_text() == before


def test_target_loss_jobs_drawn_from_the_parametric_bank_say_so_in_one_line(tmp_path, monkeypatch, caplog):
    import mara.curves.bank as bank_module

    banks = tmp_path / "banks"
    banks.mkdir()
    shutil.copy(bank_module.SHIPPED_BANKS_DIR / "parametric.parquet", banks / "parametric.parquet")
    monkeypatch.setattr(bank_module, "SHIPPED_BANKS_DIR", banks)  # the real (task-zoo) bank absent
    out = tmp_path / "run"
    with caplog.at_level("WARNING", logger="mara"):
        evaluate(trace_cfg(out, "methods=[EDF]", "trace.jobs=target_loss", "trace.first_jobs=10"))
    said = [r.getMessage() for r in caplog.records if "real curve bank" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0] and "parametric" in said[0]
    res = json.loads((out / "results.json").read_text())
    assert res["protocol"]["bank_note"] == said[0]
    assert said[0] in (out / "results.md").read_text()


def test_the_real_bank_present_adds_no_note():
    from mara.curves.bank import default_bank_path, stand_in_note

    assert default_bank_path().name == "zoo.parquet" and stand_in_note(default_bank_path()) is None


def test_the_trace_policy_experiment_is_refused_by_the_evaluation_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="run it as python -m mara.train experiment=trace_mara") as err:
        evaluate(compose_config("evaluate", "experiment=trace_mara", f"paths.output_dir={tmp_path}"))
    assert "\n" not in str(err.value) and not (tmp_path / "results.json").exists()

"""The main job never loses finished work: per-method safety net, atomic per-method results, one-line
config-group errors, and the paper protocol end to end on a tiny configuration (resumable)."""

import json
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from mara.core.cli import unknown_group_option
from mara.core.config import CONF_DIR
from mara.evaluate import evaluate
from mara.report import paper_numbers as P
from tests.conftest import run_python

REPO = Path(__file__).resolve().parents[1]


def _run(*args, timeout=600):
    return run_python(*args, timeout=timeout)


def tiny(tmp_path, bank_path, *extra):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(
            "evaluate",
            overrides=[
                f"bank.path={bank_path}",
                "eval.roots=1",
                "eval.episodes=2",
                "sim.loads=[0.04]",
                f"paths.output_dir={tmp_path}",
                "eval.tensorboard=false",
                *extra,
            ],
        )


@pytest.mark.parametrize("module", ["mara.train", "mara.evaluate", "mara.calibrate", "mara.generate_curves"])
def test_unknown_group_option_exits_2_with_one_line(module):
    p = _run("-m", module, "experiment=typo_xyz")
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert (
        len(lines) == 1 and "unknown experiment 'typo_xyz'" in lines[0] and "paper" in lines[0] and "smoke" in lines[0]
    )
    assert "Traceback" not in p.stderr


def test_paper_workers_must_be_positive(tmp_path):
    p = _run("-m", "mara.train", "experiment=paper", "paper.workers=0", f"hydra.run.dir={tmp_path}")
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        "error: paper.workers must be >= 1 (or null: one per usable core), got 0"
    ]
    assert not (tmp_path / "predictor").exists()  # refused before any work


def test_unknown_group_option_rules():
    assert unknown_group_option(["experiment=smoke", "sim.loads=[0.04]", "hydra.run.dir=x", "seed=1"]) is None
    assert unknown_group_option(["experiment=null", "predictor=wls", "-m", "experiment=smoke,paper"]) is None
    assert "unknown predictor 'xyz'" in unknown_group_option(["predictor=xyz"])
    assert "unknown experiment 'nope'" in unknown_group_option(["-m", "experiment=smoke,nope"])
    assert "unknown scenario 'x'" in unknown_group_option(["+scenario=x"])


def test_missing_optional_dependency_is_skipped_others_kept(tmp_path, small_bank, monkeypatch):
    monkeypatch.setitem(sys.modules, "ortools", None)  # `import ortools...` now raises ImportError
    monkeypatch.setitem(sys.modules, "ortools.sat", None)
    monkeypatch.setitem(sys.modules, "ortools.sat.python", None)
    res = evaluate(tiny(tmp_path, small_bank.path, "methods=[FIFO,Clairvoyant,EDF]"))
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data["summary"]) == {"FIFO", "EDF"}
    assert list(data["skipped"]) == ["Clairvoyant"] and "OR-Tools" in data["skipped"]["Clairvoyant"]
    assert "\n" not in data["skipped"]["Clairvoyant"] and not data["failed"]
    assert "**Clairvoyant skipped:**" in (tmp_path / "results.md").read_text()
    assert res["skipped"] == data["skipped"]


def test_failing_method_keeps_earlier_rows(tmp_path, small_bank, monkeypatch):
    from mara.allocators import rules

    written = []
    import mara.report.results as report

    real = report.write_results

    def spy(res, out, **kw):  # what is on disk after each method
        paths = real(res, out, **kw)
        written.append(sorted(json.loads(Path(paths["json"]).read_text())["summary"]))
        return paths

    def boom(self, obs):
        raise RuntimeError("simulated crash\nin EDF")

    import mara.evaluate as evaluate_mod

    monkeypatch.setattr(evaluate_mod, "write_results", spy)  # where the evaluation looks it up
    monkeypatch.setattr(rules.EDF, "act", boom)
    evaluate(tiny(tmp_path, small_bank.path, "methods=[FIFO,EDF,Oracle]"))
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data["summary"]) == {"FIFO", "Oracle"}
    assert data["failed"] == {"EDF": "RuntimeError: simulated crash in EDF"}
    assert written[0] == ["FIFO"]  # FIFO's rows were on disk before EDF ran


def test_resume_keeps_evaluated_methods(tmp_path, small_bank):
    evaluate(tiny(tmp_path, small_bank.path, "methods=[FIFO]"))
    first = json.loads((tmp_path / "results.json").read_text())
    res = evaluate(tiny(tmp_path, small_bank.path, "methods=[FIFO,EDF]", "eval.resume=true"))
    assert "FIFO" not in res["timings"] and "EDF" in res["timings"]  # FIFO reused, not rerun
    assert [r for r in res["rows"] if r["method"] == "FIFO"] == first["rows"]
    # another protocol: nothing reused
    res = evaluate(tiny(tmp_path, small_bank.path, "methods=[FIFO]", "eval.resume=true", "eval.episodes=1"))
    assert "FIFO" in res["timings"]


def test_paper_numbers_are_the_published_ones():
    # spot checks against the paper's text (Tables 1-5, §5.1)
    assert P.TABLE2["MARA"]["Average"] == (63.46, 3.61) and P.TABLE2["LARA"]["Average"] == (54.93, 3.69)
    assert P.TABLE3["LARA-FM"] == (45.50, 17.45) and P.TABLE5["MARA-sparse"]["RL_OOD"] == (59.59, 2.87)
    assert P.TABLE1["RL_OOD"]["WLS"] == (242.43, 51.25, 0.054) and P.TABLE4["FIFO"]["ready"] == (88.1, 11.0)
    assert P.TASKS_PER_EPISODE == {0.04: 19.70, 0.05: 23.82, 0.06: 27.75, 0.07: 31.75}
    # internal consistency the paper states: Table 5's MARA column is Table 2's; MARA − LARA-FM = 2.83 (§5.8)
    assert round(P.TABLE2["MARA"]["Average"][0] - P.TABLE2["LARA-FM"]["Average"][0], 2) == 2.82
    assert P.TABLE5["MARA"] == P.TABLE2["MARA"]


TINY_PAPER = [
    "experiment=paper",
    "trainer.max_epochs=1",
    "predictor.data={train_examples:128,val_examples:64,batch_size:64}",
    "predictor.train.patience=1",
    "predictor.inference={n_samples:1,n_steps:1,per_family:{}}",
    "predictors.fm.inference={n_samples:1,n_steps:1,per_family:{}}",
    "mat.total_env_steps=128",
    "mat.rollout={n_episodes:4,n_steps:16,n_groups:2,stagger:20}",
    "mat.imitation={n_episodes:4,n_steps:20,stagger:10,dagger_rounds:0,epochs:1}",
    "mat.validation={roots:[1000],n_episodes:1,every_n_iterations:2,baselines:false}",
    "eval.roots=1",
    "eval.episodes=1",
    "sim.loads=[0.04,0.07]",
    "paper.seeds=[0]",
    "paper.prediction.n_ranks=2",
    "++method_overrides={Clairvoyant:{time_limit_s:1}}",
    # MARA-paper trains by conf/mat/paper.yaml whatever mat.* says (100k steps): left out here, its recipe is tested
    # below
    "paper.methods=[MARA,MARA-WLS,MARA-sparse,Slack-FM,LARA,LARA-FM,FIFO,EDF,Oracle,Clairvoyant]",
]


def test_paper_trainings_follow_their_recipe(tmp_path):
    """experiment=paper trains MARA by conf/mat/clone.yaml and MARA-paper by conf/mat/paper.yaml (PPO only)."""
    from hydra import compose, initialize_config_dir

    from mara.core.config import CONF_DIR
    from mara.pipelines.paper import _job_cfg, training_jobs
    from mara.train_settings import paper_settings

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose("train", overrides=["experiment=paper"])
    jobs = training_jobs(paper_settings(cfg), tmp_path)
    assert sorted({j["method"] for j in jobs}) == ["MARA", "MARA-WLS", "MARA-paper", "MARA-sparse"]
    assert len(jobs) == 4 * len(cfg.paper.seeds)
    by = {j["method"]: _job_cfg(cfg, j, None) for j in jobs if j["seed"] == 0}
    paper = OmegaConf.load(CONF_DIR / "mat" / "paper.yaml")
    assert by["MARA"].mat.imitation.enabled and by["MARA"].mat.total_env_steps == cfg.mat.total_env_steps
    assert not by["MARA-paper"].mat.imitation.enabled
    assert by["MARA-paper"].mat.total_env_steps == paper.total_env_steps and by["MARA-paper"].mat.ppo.lr == paper.ppo.lr
    assert by["MARA-paper"].mat.run_name == "policy MARA-paper seed 0" and by["MARA-WLS"].predictor.name == "wls"
    assert by["MARA-sparse"].reward == "sparse"


@pytest.mark.slow  # ≈ 3-4 min here: the whole protocol (FM, 3 trainings, 10 methods, stress, prediction) and a resume
def test_paper_protocol_tiny_end_to_end_and_resumes(tmp_path, small_bank):
    run = tmp_path / "paper"
    args = ["-m", "mara.train", *TINY_PAPER, f"bank.path={small_bank.path}", f"hydra.run.dir={run}"]
    p = _run(*args)
    assert p.returncode == 0, p.stderr[-3000:]
    rep = json.loads((run / "report.json").read_text())
    md = (run / "report.md").read_text()
    for title in ("Table 1", "Table 2", "Table 3", "Table 4", "Table 5", "Figure 4", "Protocol statistics"):
        assert title in md
    for fig in ("figure4_success_vs_load.png", "prediction/fig3a_trajectory.png", "prediction/fig3b_mae_vs_rank.png"):
        assert (run / fig).stat().st_size > 0
    methods = {r["method"] for r in rep["table2"]}
    assert {"MARA", "MARA-WLS", "MARA-sparse", "LARA", "LARA-FM", "FIFO", "EDF", "Oracle", "Clairvoyant"} <= methods
    # the paper columns are the published numbers kept in mara/report/paper_numbers.py
    for r in rep["table2"]:
        for ts in ("ID", "RL_OOD", "ViT_OOD", "Average"):
            pub = P.TABLE2.get(r["method"], {}).get(ts)
            assert (r[ts]["paper"], r[ts]["paper_std"]) == (pub if pub else (None, None))
            if pub and r[ts]["ours"] is not None:
                assert r[ts]["diff"] == pytest.approx(r[ts]["ours"] - pub[0])
    assert {
        r["method"]: (r["success"]["paper"], r["success"]["paper_std"])
        for r in rep["table3"]
        if r["method"] in P.TABLE3
    } == P.TABLE3
    assert {
        (r["task_set"], r["model"]): (r["mae"]["paper"], r["budget_acc"]["paper"], r["ms_per_prefix"]["paper"])
        for r in rep["table1"]
    } == {(ts, m): v for ts, d in P.TABLE1.items() for m, v in d.items()}
    for r in rep["table4"]:
        for k, pub in P.TABLE4.get(r["method"], {}).items():
            assert (r[k]["paper"], r[k]["paper_std"]) == pub
    for r in rep["table5"]:
        assert (r["MARA-sparse"]["paper"], r["MARA-sparse"]["paper_std"]) == P.TABLE5["MARA-sparse"][r["task_set"]]
    assert [r["tasks_per_episode"]["paper"] for r in rep["protocol"]] == [19.70, 31.75]
    assert len(rep["trainings"]) == 3
    markers = {q: q.stat().st_mtime_ns for q in run.rglob("DONE.json")}
    n_jobs = 1 + 3 + 2 * 10 + 1  # predictor, 3 trainings, 10 methods x (evaluation, stress), prediction
    assert len(markers) == n_jobs
    # every job's own output went into its folder's job.log, not the terminal
    assert (
        "Trainer.fit" not in p.stdout + p.stderr
        and (run / "evaluation" / "methods" / "FIFO" / "job.log").stat().st_size > 0
    )
    ev = json.loads((run / "evaluation" / "results.json").read_text())
    assert [m for m in ev["summary"]] and {r["method"] for r in ev["rows"]} >= {"MARA", "FIFO", "Clairvoyant"}
    assert ev["clairvoyant"]["n_episodes"] > 0 and (run / "evaluation" / "success_vs_load.png").exists()
    # a rerun skips every finished stage and training
    p = _run(*args)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout + p.stderr
    assert f"{n_jobs} of {n_jobs} jobs already done, skipped" in out
    assert {q: q.stat().st_mtime_ns for q in run.rglob("DONE.json")} == markers
    assert "Trainer.fit" not in out and "evaluate FIFO" not in out
    # the README results section is generated from the report
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- results:begin -->\nold\n<!-- results:end -->\ntail\n")
    p = _run("-m", "mara.report", f"run={run}", f"readme={readme}")
    assert p.returncode == 0, p.stderr
    text = readme.read_text()
    assert "old" not in text and "| MARA |" in text and text.endswith("<!-- results:end -->\ntail\n")
    assert (tmp_path / "docs" / "figures" / "paper_figure4.png").exists()
    p = _run("-m", "mara.report", f"run={tmp_path}")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    # the README's imitation and prediction tables read this run's own files (python -m mara.readme_tables)
    from mara.report.tables import fill_readme

    readme.write_text(
        "<!-- imitation:begin -->\n<!-- imitation:end -->\n<!-- prediction:begin -->\n<!-- prediction:end -->\n"
    )
    assert fill_readme(tmp_path, readme, names=["imitation", "prediction"]) == {"imitation": True, "prediction": True}
    text = readme.read_text()
    assert "\n| 0 | " in text.split("<!-- imitation:end -->")[0]  # seed 0's row
    assert "| ID | FM (paper inputs) | " in text and "| ID | FM v3 | – |" in text


def test_progress_lines_are_throttled_with_eta():
    import logging

    from mara.core.runlog import Progress

    t = [0.0]
    lines = []

    class H(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    lg = logging.getLogger("mara.test_progress")
    lg.addHandler(H())
    lg.setLevel(logging.INFO)
    p = Progress("stage", every_s=20, logger=lg, clock=lambda: t[0])
    for i in range(1, 101):  # 100 updates, one second apart
        t[0] = float(i)
        p.update(i / 100)
    assert lines[0].startswith("stage:   1.0%") and "ETA 1m39s" in lines[0]  # 1 s for 1 % → 99 s left
    assert len(lines) == 1 + 100 // 20 and lines[-1].startswith("stage: 100.0%") and "ETA" not in lines[-1]


def test_lightning_lines_once_and_no_tips(caplog):
    import logging

    from mara.core.runlog import setup_logging

    caplog.set_level(logging.INFO)
    pl = logging.getLogger("lightning.pytorch")
    pl.addHandler(logging.StreamHandler())  # what Lightning does when imported before logging is configured
    pl.propagate = False
    setup_logging()
    assert pl.handlers == [] and pl.propagate  # its records reach the root handlers (terminal + log file) once
    lg = logging.getLogger("lightning.pytorch.utilities.test_once")  # a child, as Lightning's rank_zero logger
    lg.setLevel(logging.INFO)
    lg.info("GPU available: False, used: False")
    lg.info("💡 Tip: For seamless cloud logging ... try installing [litlogger]")
    shown = [
        r.getMessage()
        for r in caplog.records
        if all(f.filter(r) for h in logging.getLogger().handlers for f in h.filters)
    ]
    assert shown.count("GPU available: False, used: False") == 1 and not any("Tip" in m for m in shown)


def test_resume_ignores_settings_that_cannot_change_rows(tmp_path, small_bank):
    """The Clairvoyant solved with workers elsewhere is kept when the rest of the methods join the folder here."""
    evaluate(tiny(tmp_path, small_bank.path, "methods=[Clairvoyant]", "+method_overrides={Clairvoyant:{workers:2}}"))
    res = evaluate(tiny(tmp_path, small_bank.path, "methods=[FIFO,Clairvoyant]", "eval.resume=true"))
    assert "Clairvoyant" not in res["timings"] and "FIFO" in res["timings"]
    res = evaluate(
        tiny(
            tmp_path,
            small_bank.path,
            "methods=[Clairvoyant]",
            "eval.resume=true",
            "+method_overrides={Clairvoyant:{time_limit_s:3.0}}",
        )
    )
    assert "Clairvoyant" in res["timings"]  # a setting that can change the bound: evaluated anew
    res = evaluate(
        tiny(
            tmp_path,
            small_bank.path,
            "methods=[FIFO,Clairvoyant]",
            "eval.resume=true",
            "+method_overrides={Clairvoyant:{time_limit_s:3.0},FIFO:{}}",
        )
    )
    assert "Clairvoyant" not in res["timings"]  # another method's overrides do not touch its rows

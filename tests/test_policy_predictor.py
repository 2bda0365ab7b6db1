"""A learned policy runs on the predictor it was trained with: its tokens are that predictor's
estimates and band. The shipped decision-head policies are their own method (MARA-QR); a policy given another
predictor, or a teacher rule made for another predictor, is a one-line config error before any work."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from mara.core.config import SHIPPED_CKPT_DIR, ConfigError, with_shipped_policies
from mara.curves.bank import default_bank_path
from mara.mat.allocator import MATAllocator
from mara.predictors.factory import predictor_config, trained_predictor_mismatch
from tests.test_entrypoints import _run, cfg_for
from tests.test_mat_qr_recipe import _compose

QR_SHIPPED = [SHIPPED_CKPT_DIR / f"mara_qr_zoo_seed{s}.ckpt" for s in (0, 1, 2)]


def test_mismatch_compares_kind_and_band():
    fm = dict(predictor_config("fm"))
    qr_q = {"name": "qr", "band": [0.05, 0.5, 0.9]}
    assert trained_predictor_mismatch(qr_q, "qr_q") is None
    assert trained_predictor_mismatch(fm, "fm") is None
    assert "trained with predictor 'qr'" in trained_predictor_mismatch(qr_q, "fm")
    assert "'fm'" in trained_predictor_mismatch(fm, "qr_q")
    # same kind, another band: the tokens would read other levels
    assert "band [0.05, 0.5, 0.9]" in trained_predictor_mismatch(qr_q, "qr")
    assert trained_predictor_mismatch({"name": "wls"}, "wls") is None
    # nothing recorded / no estimates: nothing to compare
    assert trained_predictor_mismatch({}, "fm") is None and trained_predictor_mismatch(None, "fm") is None
    assert trained_predictor_mismatch(qr_q, None) is None


def test_shipped_policies_record_their_predictor():
    for p in QR_SHIPPED:
        alloc = MATAllocator(str(p))
        assert alloc.trained_predictor["name"] == "qr" and list(alloc.trained_predictor["band"]) == [0.05, 0.5, 0.9]
        assert trained_predictor_mismatch(alloc.trained_predictor, "qr_q") is None
    for s in (0, 1, 2):
        alloc = MATAllocator(str(SHIPPED_CKPT_DIR / f"mara_zoo_seed{s}.ckpt"))
        assert trained_predictor_mismatch(alloc.trained_predictor, "fm") is None


def test_mara_qr_takes_its_shipped_policies():
    over, used = with_shipped_policies(["MARA", "MARA-QR"], {}, default_bank_path())
    assert [c["ckpt_path"] for c in over["MARA-QR"]["checkpoints"]] == [str(p) for p in QR_SHIPPED]
    assert all("mara_qr" not in c["ckpt_path"] for c in over["MARA"]["checkpoints"])  # MARA keeps its own
    assert set(used) == {"MARA", "MARA-QR"}


def test_evaluate_mara_qr_with_the_shipped_policies(tmp_path):
    from mara.evaluate import evaluate

    cfg = cfg_for(
        "evaluate",
        [
            "methods=[MARA-QR]",
            "eval.roots=[0]",
            "eval.episodes=1",
            "sim.loads=[0.05]",
            "eval.task_sets=[ID]",
            f"paths.output_dir={tmp_path}",
            "eval.tensorboard=false",
        ],
    )
    res = evaluate(cfg)
    assert not res.get("failed") and not res.get("skipped")
    rows = [r for r in json.loads((tmp_path / "results.json").read_text())["rows"] if r["method"] == "MARA-QR"]
    assert sorted(r["train_seed"] for r in rows) == [0, 1, 2]


def test_mara_qr_cal_is_the_shipped_policies_on_the_recalibrated_head(tmp_path):
    """The same policies as MARA-QR; on a task set without RL or ViT the recalibration changes no estimate, so the
    rows equal MARA-QR's."""
    from mara.evaluate import evaluate

    over, _ = with_shipped_policies(["MARA-QR-cal"], {}, default_bank_path())
    assert [c["ckpt_path"] for c in over["MARA-QR-cal"]["checkpoints"]] == [str(p) for p in QR_SHIPPED]
    cfg = cfg_for(
        "evaluate",
        [
            "methods=[MARA-QR,MARA-QR-cal]",
            "eval.roots=[0]",
            "eval.episodes=2",
            "sim.loads=[0.06]",
            "eval.task_sets=[ID]",
            f"paths.output_dir={tmp_path}",
            "eval.tensorboard=false",
        ],
    )
    res = evaluate(cfg)
    assert not res.get("failed") and not res.get("skipped")
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    key = lambda r: (r["train_seed"], r["episode"])  # noqa: E731
    plain = {key(r): r["succeeded"] for r in rows if r["method"] == "MARA-QR"}
    cal = {key(r): r["succeeded"] for r in rows if r["method"] == "MARA-QR-cal"}
    assert len(plain) == 6 and plain == cal


def test_policy_given_another_predictor_stops_before_any_work(tmp_path):
    """The decision-head policy run as MARA (predictor fm): one line, exit 2, no results written."""
    ck = QR_SHIPPED[0]
    p = _run(
        "-m",
        "mara.evaluate",
        "methods=[MARA,FIFO]",
        "eval.roots=1",
        "eval.episodes=1",
        "sim.loads=[0.04]",
        "eval.tensorboard=false",
        f"hydra.run.dir={tmp_path}/run",
        f"+method_overrides={{MARA:{{checkpoints:[{{train_seed:0,ckpt_path:{ck}}}]}}}}",
    )
    assert p.returncode == 2, p.stderr[-2000:]
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "trained with predictor 'qr'" in lines[0] and "MARA-QR" in lines[0], p.stderr[-2000:]
    assert not (tmp_path / "run" / "results.json").exists()
    # the same policy under the method's predictor set to its own is accepted by the run-time check too
    from omegaconf import OmegaConf

    from mara.core.config import build_allocators, load_method_cfg
    from mara.eval.policy_fit import check_policy_fit

    mcfg = load_method_cfg("MARA", {"checkpoints": [{"train_seed": 0, "ckpt_path": str(ck)}]})
    allocs = [a for _, a in build_allocators(mcfg)]
    with pytest.raises(ConfigError, match="trained with predictor 'qr'"):
        check_policy_fit(mcfg, allocs)
    mcfg = OmegaConf.merge(mcfg, {"predictor": "qr_q"})
    check_policy_fit(mcfg, allocs)


def test_teacher_must_read_the_policy_predictor(tmp_path):
    from mara.train_settings import check_teacher_predictor, mat_settings

    with pytest.raises(ConfigError, match="teacher=Slack-QR-q reads predictor 'qr_q'"):
        check_teacher_predictor(mat_settings(_compose("predictor=fm")))  # the head's rule fed the FM band
    with pytest.raises(ConfigError, match="teacher=Slack-QR-q"):
        check_teacher_predictor(mat_settings(_compose("predictor=qr")))  # the head, another band
    check_teacher_predictor(mat_settings(_compose()))
    check_teacher_predictor(mat_settings(_compose("experiment=band")))  # Slack-FM-q on the FM
    # the privileged teacher reads the simulator
    check_teacher_predictor(mat_settings(_compose("experiment=band", "mat.imitation.teacher=Slack-Truth")))
    check_teacher_predictor(mat_settings(_compose("mat=paper", "predictor=fm")))  # no imitation
    # from the command line: refused before the predictor stage writes anything
    p = _run("-m", "mara.train", "predictor=fm", f"hydra.run.dir={tmp_path}/run")
    assert p.returncode == 2, p.stderr[-2000:]
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "predictor=qr_q" in lines[0]
    assert not (tmp_path / "run" / "predictor").exists()


def test_training_with_the_head_is_named_mara_qr():
    from mara.train_settings import trained_method as _trained_method

    assert _trained_method(_compose()) == "MARA-suite"  # the one MARA: on the head too
    assert _trained_method(_compose("mat=default")) == "MARA-QR"
    assert _trained_method(_compose("experiment=band")) == "MARA"
    assert _trained_method(_compose("predictor=wls")) == "MARA-WLS"


def test_teacher_check_on_a_bare_mat_config():
    """A bare conf/mat config names its predictor by string (`predictor: qr_q`): read from conf/predictor/."""
    from mara.mat.settings import ImitationSettings, MatSettings
    from mara.train_settings import check_teacher_predictor

    base = MatSettings(net={}, imitation=ImitationSettings(enabled=True, teacher="Slack-QR-q"))
    check_teacher_predictor(replace(base, predictor={"name": "qr_q"}))
    with pytest.raises(ConfigError, match="trained with 'fm'"):
        check_teacher_predictor(replace(base, predictor={"name": "fm"}))


@pytest.mark.parametrize("experiment", [None, "hetero", "paper", "smoke"])
def test_every_listed_method_has_its_predictor_configured(experiment):
    """mara.train evaluates the methods it lists with the predictors it composes: none may be missing."""
    from mara.core.config import load_method_cfg

    cfg = _compose(*([f"experiment={experiment}"] if experiment else []))
    for m in cfg.get("methods") or []:
        pred = load_method_cfg(m).get("predictor")
        assert pred is None or pred in cfg.predictors, (experiment, m, pred)


def test_experiment_hetero_trains_the_one_mara_or_mara_qr_on_the_head():
    from mara.train_settings import check_teacher_predictor, mat_settings, run_predictor_key
    from mara.train_settings import trained_method as _trained_method

    one = _compose("experiment=hetero")  # the main command's recipe: no per-setting checkpoint
    assert _trained_method(one) == "MARA-suite" and run_predictor_key(one) == "qr_q"
    assert one.mat == _compose().mat and "MARA-suite" in one.methods
    check_teacher_predictor(mat_settings(one))
    cfg = _compose("experiment=hetero", "mat=hetero", "predictor=qr")  # a policy for these nodes alone
    assert cfg.predictor.name == "qr" and cfg.mat.imitation.teacher == "Slack-QR" and cfg.mat.net.features == "v3"
    check_teacher_predictor(mat_settings(cfg))
    assert _trained_method(cfg) == "MARA-QR"
    assert run_predictor_key(cfg) == "qr"
    old = _compose(
        "experiment=hetero",
        "mat=hetero",
        "predictor=fm",
        "mat.imitation.teacher=Slack-FM-q",
        "~mat.net.token_q",
        "~mat.net.token_band",
    )  # the FM-band variant stays runnable
    check_teacher_predictor(mat_settings(old))
    assert _trained_method(old) == "MARA" and run_predictor_key(old) == "fm"
    ev = cfg_for("evaluate", ["experiment=hetero"])  # mara.evaluate composes the same experiment
    assert "qr" in ev.predictors and list(ev.sim.node_speed) == [2, 2, 1, 1, 1, 1, 1]


def test_run_predictor_key_carries_the_run_predictor(tmp_path):
    """A run's own predictor settings (a fresh FM checkpoint, a command-line override) reach its policy's evaluation."""
    from mara.train_settings import RunSettings, parse, run_evaluation_settings, run_predictor_key

    cfg = _compose("predictor=qr_q", "predictor.ckpt_path=/my/head.ckpt", "stage=evaluate")
    assert run_predictor_key(cfg) == "qr_q" and cfg.predictors.qr_q.ckpt_path is None
    settings = parse(cfg)
    run = RunSettings(settings, str(tmp_path), settings.predictor_config, settings.policy)
    ev = run_evaluation_settings(run, ["MARA-suite"], {"MARA-suite": {"predictor": settings.predictor_key}})
    assert ev.predictors["qr_q"].ckpt_path == "/my/head.ckpt" and ev.methods == ("MARA-suite",)


def test_train_evaluates_its_policy_with_its_predictor(tmp_path):
    """stage=evaluate of a policy trained on the head: evaluated as MARA-QR on the run's predictor (no refusal)."""
    ck = QR_SHIPPED[0]
    p = _run(
        "-m",
        "mara.train",
        "stage=evaluate",
        "predictor=qr_q",
        f"+policy_ckpt={ck}",
        "methods=[MARA,FIFO]",
        "eval.roots=1",
        "eval.episodes=1",
        "sim.loads=[0.05]",
        "eval.task_sets=[ID]",
        "eval.tensorboard=false",
        "sim.steps=60",  # a short arrival window: the policy's predictor is what is checked, not a long episode
        f"hydra.run.dir={tmp_path}/run",
    )
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads((tmp_path / "run" / "evaluation" / "results.json").read_text())
    assert {r["method"] for r in res["rows"]} == {"MARA-QR", "FIFO"} and not res.get("failed")
    assert res["method_overrides"]["MARA-QR"]["predictor"] == "qr_q"


def test_rules_on_any_predictor_stay_valid_teachers():
    """MARA-WLS imitates the slack rule on WLS estimates (paper protocol, `predictor=wls` in the README): allowed.
    Only the head's rules, which read its trained levels, are tied to their predictor."""
    from mara.train_settings import check_teacher_predictor, mat_settings

    check_teacher_predictor(mat_settings(_compose("mat=band", "predictor=wls")))  # Slack-FM-q on WLS
    check_teacher_predictor(mat_settings(_compose("mat=clone", "predictor=wls")))  # experiment=paper's MARA-WLS
    check_teacher_predictor(mat_settings(_compose("mat=band", "predictor=qr_q")))  # Slack-FM-q on the head's band
    with pytest.raises(ConfigError, match="teacher=Slack-QR-q"):
        check_teacher_predictor(mat_settings(_compose("predictor=wls")))  # the default recipe
    with pytest.raises(ConfigError, match="teacher=Slack-QR-q"):
        check_teacher_predictor(mat_settings(_compose("mat=default", "predictor=wls")))


@pytest.mark.parametrize(
    "stem, method",
    [
        ("mara_zoo_seed0", "MARA"),
        ("mara_qr_zoo_seed0", "MARA-QR"),
        ("mara_suite_zoo_seed0", "MARA-suite"),
        ("mara_suite_ppo_zoo_seed0", "MARA-suite-ppo"),
        ("mara_nodes_zoo_seed0", "MARA-nodes"),
    ],
)
def test_a_checkpoint_is_named_by_what_it_was_trained_as(stem, method):
    """A run given a policy (stage=evaluate +policy_ckpt=...) names it from the checkpoint's recorded training, not from
    the recipe the command composes (the main command's is mat=suite)."""
    from mara.mat.train import checkpoint_method

    assert checkpoint_method(SHIPPED_CKPT_DIR / f"{stem}.ckpt") == method


def test_a_run_evaluates_its_own_policy_where_its_list_asks_for_one():
    from mara.mat.train import with_run_policy

    assert with_run_policy(["MARA", "FIFO"], "MARA-paper") == ["MARA-paper", "FIFO"]
    hetero = ["MARA-suite", "MARA-suite-ppo", "FIFO"]  # experiment=hetero's list
    assert with_run_policy(hetero, "MARA-suite") == hetero  # the main command's recipe: listed already
    assert with_run_policy(hetero, "MARA-QR") == ["MARA-QR", *hetero]  # experiment=hetero mat=hetero
    assert with_run_policy(["FIFO", "EDF"], "MARA-QR") == ["FIFO", "EDF"]  # no policy asked for

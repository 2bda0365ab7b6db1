"""The MAT recipes: five in conf/mat/ (the product), three in conf/experiments/mat/ (variants kept apart, selected the
same way), each composing to the values that made its shipped or stored numbers; the experiments (and
conf/train.yaml for the default) pair each recipe with its predictor; the documented overrides for the variants that
are not recipes compose and pass the teacher check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from mara.core import registry
from mara.core.config import CONF_DIR
from mara.train_settings import check_teacher_predictor, mat_settings
from tests.conftest import compose_config

REPO = Path(__file__).resolve().parents[1]
# The composed `mat` config of each recipe, recorded from the recipe files that trained the shipped policies
# (default: mara_qr_zoo_seed*, band: mara_zoo_seed*, hetero: experiment=hetero's MARA-QR, suite: mara_suite_zoo_seed*,
# suite_nodes: mara_nodes_zoo_seed*, suite_ppo: the MARA-suite-ppo runs of docs/mara.md "PPO across the suite")
# and the stored
# paper-protocol tables (clone, paper). A change here changes what those numbers mean.
EXPECTED = json.loads((REPO / "tests" / "data" / "mat_recipes.json").read_text())
RECIPES = {
    "default": "qr_q",
    "band": "fm",
    "clone": "fm",
    "paper": "fm",
    "hetero": "qr",
    "suite": "qr_q",
    "suite_nodes": "qr_q",
    "suite_ppo": "qr_q",
}  # recipe -> its predictor


def _compose(*overrides):
    return compose_config("train", *overrides)


def _mat(cfg) -> dict:
    return OmegaConf.to_container(cfg.mat, resolve=True)


def test_eight_recipes_each_variant_written_as_its_differences():
    product = {p.stem for p in (CONF_DIR / "mat").glob("*.yaml")}
    assert product == {"clone", "band", "default", "paper", "suite"}  # the recipes that made a shipped checkpoint
    files = {
        p.stem: yaml.safe_load(p.read_text())
        for d in (CONF_DIR, CONF_DIR / "experiments")
        for p in (d / "mat").glob("*.yaml")
    }
    assert set(files) == set(RECIPES) == set(EXPECTED)
    roots = [name for name, body in files.items() if "defaults" not in body]
    assert roots == ["clone"]  # every other recipe starts from another and lists only what it changes
    for name, body in files.items():
        if name == "clone":
            continue
        base = body["defaults"][0]
        assert base in files and body["defaults"][-1] == "_self_"
        for key, value in body.items():
            if key != "defaults" and not isinstance(value, dict):
                assert EXPECTED[base].get(key) != value, (name, key)  # no value repeated from its base


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_recipe_composes_to_the_recorded_values(recipe):
    cfg = _compose(f"mat={recipe}", f"predictor={RECIPES[recipe]}")
    assert _mat(cfg) == EXPECTED[recipe]
    check_teacher_predictor(mat_settings(cfg))


@pytest.mark.parametrize(
    "overrides, recipe, predictor",
    [
        ((), "suite", "qr_q"),  # python -m mara.train: the one MARA
        (("mat=default",), "default", "qr_q"),  # MARA-QR, on the 7 identical nodes only
        (("experiment=band",), "band", "fm"),
        (("experiment=hetero",), "suite", "qr_q"),  # the same one MARA, no per-setting checkpoint
        (("experiment=hetero", "mat=hetero", "predictor=qr"), "hetero", "qr"),
        (("experiment=paper",), "clone", "fm"),
        (("experiment=suite",), "suite", "qr_q"),
        (("experiment=suite", "mat=suite_nodes"), "suite_nodes", "qr_q"),
        (("experiment=suite", "mat=suite_ppo"), "suite_ppo", "qr_q"),
    ],
)
def test_the_commands_pair_each_recipe_with_its_predictor(overrides, recipe, predictor):
    from mara.train_settings import trained_method as _trained_method

    cfg = _compose(*overrides)
    assert _mat(cfg) == EXPECTED[recipe]
    names = {
        "default": "MARA-QR",
        "hetero": "MARA-QR",
        "band": "MARA",
        "clone": "MARA",
        "suite": "MARA-suite",
        "suite_nodes": "MARA-nodes",
        "suite_ppo": "MARA-suite-ppo",
    }
    assert _trained_method(cfg) == names[recipe]  # the method the run evaluates its policy as
    assert OmegaConf.to_container(cfg.predictor) == OmegaConf.to_container(_compose(f"predictor={predictor}").predictor)
    check_teacher_predictor(mat_settings(cfg))


def test_the_main_command_trains_the_one_mara_and_evaluates_every_rule():
    from mara.core.config import available_methods, load_method_cfg
    from mara.train_settings import trained_method as _trained_method

    cfg = _compose()
    c = mat_settings(cfg).recorded()
    assert c["predictor"]["name"] == "qr" and list(c["predictor"]["band"]) == [0.05, 0.5, 0.9]
    assert c["imitation"]["teacher"] == "Slack-QR-q" and _trained_method(cfg) == "MARA-suite"
    assert c["imitation"]["suite"] and c["net"]["features"] == "v3"  # across clusters, reading which one it is in
    # the registry's train list: every product rule and bound but the placement variant (it acts only on unequal
    # nodes; on identical ones it is its rule), and MARA's place for the run's own policy; no experiment; the job-trace
    # schedulers (docs/traces.md) are not rules of the main command
    assert list(cfg.methods) == registry.default_methods("train") and cfg.methods[0] == "MARA"
    product = {m for m in available_methods() if not registry.method(m).experiment}
    rules = {m for m in product if not registry.method(m).learned and not load_method_cfg(m).get("trace_only")}
    rules -= {"Slack-QR-displace"}
    assert rules | {"MARA"} == set(cfg.methods)
    assert not [m for m in registry.methods().values() if m.experiment and m.lists]


def test_experiment_paper_trains_every_method_by_its_composed_recipe(tmp_path):
    from mara.pipelines.paper import _job_cfg, training_jobs
    from mara.train_settings import paper_settings

    cfg = _compose("experiment=paper")
    recipe = {"MARA": "clone", "MARA-WLS": "clone", "MARA-sparse": "clone", "MARA-paper": "paper"}
    shared = ("seed", "reward", "predictor", "output_dir", "run_name")
    for job in training_jobs(paper_settings(cfg), tmp_path):
        got = {k: v for k, v in _job_cfg(cfg, job, None).mat.items() if k not in shared}
        want = {k: v for k, v in EXPECTED[recipe[job["method"]]].items() if k not in shared}
        assert OmegaConf.to_container(OmegaConf.create(got), resolve=True) == want, job["method"]


@pytest.mark.parametrize(
    "overrides, changed",
    [
        # long: any recipe run longer (band and default already run 2 M env steps)
        (
            ("mat=clone", "predictor=fm", "mat.total_env_steps=2000000", "mat.validation.every_n_iterations=12"),
            {"total_env_steps": 2000000},
        ),
        # a privileged DAgger teacher: Slack-Truth labels on the states the student visits (measured not to transfer)
        (
            ("mat=band", "predictor=fm", "mat.imitation.teacher=Slack-Truth", "mat.imitation.dagger_rounds=3"),
            {"imitation": {"teacher": "Slack-Truth", "dagger_rounds": 3}},
        ),
        # heterogeneous nodes on the FM band cloning Slack-FM-q
        (
            (
                "experiment=hetero",
                "mat=hetero",
                "predictor=fm",
                "mat.imitation.teacher=Slack-FM-q",
                "~mat.net.token_q",
                "~mat.net.token_band",
            ),
            {"imitation": {"teacher": "Slack-FM-q"}},
        ),
    ],
)
def test_documented_overrides_compose(overrides, changed):
    cfg = _compose(*overrides)
    check_teacher_predictor(mat_settings(cfg))
    mat = _mat(cfg)
    for key, value in changed.items():
        got = mat[key]
        assert ({k: got[k] for k in value} if isinstance(value, dict) else got) == value
    if "~mat.net.token_q" in overrides:
        assert "token_q" not in mat["net"] and mat["net"]["features"] == "v3"


def test_the_mara_page_says_when_to_use_each_recipe():
    page = (REPO / "docs" / "mara.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    for name in RECIPES:
        assert any(line.startswith(f"| `{name}`") for line in rows), name


def test_predictor_stage_of_the_main_command_trains_nothing_for_the_head(tmp_path):
    """The decision head does not read the FM: with the default predictor the predictor stage says so and writes
    nothing."""
    from tests.test_entrypoints import _run

    p = _run("-m", "mara.train", "stage=predictor", f"hydra.run.dir={tmp_path}/run")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "nothing to train for predictor 'qr'" in p.stdout + p.stderr
    assert not (tmp_path / "run" / "predictor").exists()

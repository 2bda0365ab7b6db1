"""The registry (mara/core/registry.py): a rule is its module + one conf/method YAML, a trained predictor its module,
its training module + one conf/predictor YAML; reports, default lists, checks and training read them from there.

The end-to-end test writes a throwaway rule (2 files) and a throwaway trained predictor (3 files) into a temporary
folder, points ``MARA_CONF_PATH`` and ``PYTHONPATH`` at it, and runs the entry points: ``mara.train``'s predictor
stage trains the predictor, its evaluation runs the rule on it beside FIFO and Oracle, and the figure draws the rule
in its registered style. Nothing else in the package is touched.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from mara.core import registry
from mara.core.config import CONF_DIR, ConfigError, available_methods, load_method_cfg
from mara.mat.train import policy_method
from tests.conftest import lay_out_plugin, run_python

REPO = Path(__file__).resolve().parents[1]

RULE_MODULE = '''
"""A throwaway rule: serve the tasks its predictor says need the fewest batches."""
import numpy as np

from mara.allocators.base import take_smallest
from mara.allocators.placement import place


class FewestLeft:
    name = "Throwaway"

    def reset(self, n_episodes):
        pass

    def choose(self, obs):
        return take_smallest(np.asarray(obs.pred_remaining, dtype=float), obs.present, obs.n_nodes), None

    def act(self, obs):
        return place(obs, *self.choose(obs))
'''

RULE_YAML = """
name: Throwaway
kind: policy
predictor: throw
allocator:
  _target_: throwaway_rule.FewestLeft
report: {colour: "#123456", marker: "v", order: 205}
lists: [evaluate]
teacher: true
"""

PREDICTOR_MODULE = '''
"""A throwaway predictor: a learned share of the remaining generation cap."""
import numpy as np

from mara.core.config import ConfigError
from mara.core.safe_load import check_kind, load_checkpoint


def load(path):
    return check_kind(load_checkpoint(path, "throw checkpoint"), path, "throw", ("share",))


class ShareOfCap:
    name = "throw"

    def __init__(self, share):
        self.share = float(share)

    def predict_remaining(self, S, L, lengths, eps, cap_remaining, batch_size, lr, family=None):
        return self.share * np.asarray(cap_remaining, dtype=float)

    @classmethod
    def from_config(cls, cfg, bank_path=None):
        if not cfg.get("ckpt_path"):
            raise ConfigError("predictor throw has no checkpoint: train it (mara.train stage=predictor)")
        return cls(load(cfg.ckpt_path)["share"])
'''

PREDICTOR_TRAINER = '''
"""Training the throwaway predictor: the share is the mean of a fixed draw (a stand-in for a fit)."""
from pathlib import Path

import torch


def train(cfg):
    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"kind": "throw", "share": float(cfg.predictor.share)}, out / "throw.ckpt")
    return {"share": float(cfg.predictor.share)}
'''

PREDICTOR_YAML = """
name: throw
ckpt_path: null
share: 0.5
registry:
  builder: throwaway_predictor.ShareOfCap
  checkpoint: {kind: throw, loader: throwaway_predictor.load, holds: a throwaway predictor checkpoint}
  trainer: throwaway_train.train
  pipeline: true
"""


@pytest.fixture
def throwaway(tmp_path, monkeypatch):
    """The five files, in a folder on ``MARA_CONF_PATH`` and ``sys.path`` (and the subprocesses' ``PYTHONPATH``)."""
    return lay_out_plugin(
        tmp_path,
        monkeypatch,
        {
            "throwaway_rule.py": RULE_MODULE,
            "throwaway_predictor.py": PREDICTOR_MODULE,
            "throwaway_train.py": PREDICTOR_TRAINER,
        },
        {"method/Throwaway.yaml": RULE_YAML, "predictor/throw.yaml": PREDICTOR_YAML},
    )


_run = run_python


def test_a_throwaway_rule_and_predictor_run_end_to_end(throwaway, small_bank):
    assert "Throwaway" in available_methods() and "throw" in registry.predictor_kinds()
    assert registry.checkpoint_kinds()["throw"] == "a throwaway predictor checkpoint"
    assert "Throwaway" in registry.teachers() and "Throwaway" not in registry.bound_methods()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        listed = list(compose("evaluate").methods)
    assert listed == ["MARA-suite", "Slack-QR-q", "FIFO", "Throwaway", "EDF", "Oracle", "Clairvoyant"]  # order 205

    run = throwaway / "run"
    common = [
        f"bank.path={small_bank.path}",
        "eval.roots=1",
        "eval.episodes=1",
        "sim.loads=[0.04]",
        "eval.tensorboard=false",
        "predictor=throw",
        f"hydra.run.dir={run}",
    ]
    p = _run("-m", "mara.train", "stage=evaluate", "methods=[Throwaway]", *common)
    assert p.returncode == 1 and "predictor throw has no checkpoint" in p.stderr  # untrained: the method fails
    p = _run("-m", "mara.train", "stage=predictor", *common)
    assert p.returncode == 0, p.stderr
    assert (run / "predictor" / "throw.ckpt").is_file()
    p = _run("-m", "mara.train", "stage=evaluate", "methods=[Throwaway,FIFO,Oracle]", *common)
    assert p.returncode == 0, p.stderr
    data = json.loads((run / "evaluation" / "results.json").read_text())
    assert set(data["summary"]) == {"Throwaway", "FIFO", "Oracle"} and not data.get("failed")
    by = {(r["method"], r["task_set"], r["episode"]): r["succeeded"] for r in data["rows"]}
    assert all(s <= by[("Oracle", ts, e)] for (m, ts, e), s in by.items())

    from mara.report.styles import method_style

    assert method_style("Throwaway")["color"] == "#123456" and method_style("Throwaway")["linestyle"] == "-"


def test_a_checkpoint_of_another_kind_is_refused_with_the_registered_words(throwaway, tmp_path):
    import torch

    from mara.preflight import read_predictor_checkpoint

    wrong = tmp_path / "wrong.ckpt"
    torch.save({"kind": "fm", "share": 1.0}, wrong)
    with pytest.raises(ConfigError, match="is not a throwaway predictor checkpoint"):
        read_predictor_checkpoint(OmegaConf.create({"name": "throw", "ckpt_path": str(wrong)}), "predictors.throw")


def test_default_lists_come_from_the_method_yamls():
    assert registry.default_methods("evaluate") == ["MARA-suite", "Slack-QR-q", "FIFO", "EDF", "Oracle", "Clairvoyant"]
    train = registry.default_methods("train")
    assert train[0] == "MARA" and train[-2:] == ["Oracle", "Clairvoyant"]
    for name in train:
        assert "train" in load_method_cfg(name).lists
    with pytest.raises(ConfigError, match="no default method list"):
        registry.default_methods("nope")


def test_the_product_keeps_room_and_the_experiments_stay_runnable_by_name():
    """conf/method holds what a user should run (at most 16 methods; the variants that lost to a simpler method are in
    conf/experiments/method, in no default list, still composed and run by their names)."""
    product = [m for m in registry.methods().values() if not m.experiment]
    assert len(product) <= 16, sorted(m.name for m in product)
    for name in ("Slack-FM-q", "Slack-WLS", "Slack-QR", "MARA-QR", "Slack-LCPFN", "ElasticFlow-predicted"):
        assert registry.method(name).experiment and not registry.method(name).lists
        assert load_method_cfg(name).name == name


def test_a_registration_is_never_inherited_through_defaults():
    assert "lists" in load_method_cfg("LARA") and "lists" not in load_method_cfg("LARA-best")
    assert not registry.method("LARA-best").validation_baseline and registry.method("LARA").validation_baseline


def test_every_recipe_names_its_policy_by_the_registry():
    """The learned method a recipe's policy is reported as (``trained_as``), for the shipped recipes and the paper's
    predictor and reward variants."""
    from mara.train_settings import load_recipe

    def name(recipe, predictor="qr", reward="dense"):
        return policy_method(reward, predictor, OmegaConf.to_container(load_recipe(recipe)))

    assert name("suite") == "MARA-suite" and name("default") == "MARA-QR" and name("hetero") == "MARA-QR"
    assert name("band", "fm") == "MARA" and name("clone", "fm") == "MARA" and name("paper", "fm") == "MARA-paper"
    assert name("clone", "wls") == "MARA-WLS" and name("clone", "fm", "sparse") == "MARA-sparse"
    assert name("suite_nodes") == "MARA-nodes" and name("suite_ppo") == "MARA-suite-ppo"
    for recipe in ("suite", "default", "band", "paper"):
        assert registry.method(name(recipe, "fm" if recipe in ("band", "paper") else "qr")).learned


def test_every_learned_method_and_only_those_is_trained_as_something():
    for m in registry.methods().values():
        if m.trained_rank is not None:
            assert m.learned, m.name


def test_bounds_are_computed_by_the_function_their_yaml_names():
    for name in ("Oracle", "Clairvoyant"):
        cfg = load_method_cfg(name)
        assert cfg.kind == "bound" and callable(registry.import_object(cfg.compute))


def test_a_kind_with_registered_settings_trains_on_its_typed_settings(small_bank, tmp_path):
    """``predictor=qr_q predictor_stage=train``: the parse gives the head's ``HeadFitSettings`` (a variant's missing
    sections from qr.yaml) and the stage's call of the registered trainer writes ``<folder>/qr.ckpt``."""
    from dataclasses import replace

    from mara.predictors.fit_settings import HeadFitSettings
    from mara.predictors.qr.head import load_heads
    from mara.train import run_trainer
    from mara.train_settings import parse
    from tests.conftest import compose_config

    overrides = ["predictor=qr_q", "predictor_stage=train", f"bank.path={small_bank.path}"]
    training = parse(compose_config("train", *overrides)).predictor
    assert training.kind == "qr" and isinstance(training.fit, HeadFitSettings) and training.fit.net["levels"]
    assert parse(compose_config("train", *overrides[:1])).predictor is None  # auto: the head says pipeline: false
    fit = replace(
        training.fit, train_examples=64, val_examples=32, batch_size=32, train=replace(training.fit.train, max_epochs=1)
    )
    result = run_trainer(replace(training, fit=fit, output_dir=str(tmp_path / "predictor")))
    assert (tmp_path / "predictor" / "qr.ckpt").is_file() and result["epochs"] >= 0
    load_heads(str(tmp_path / "predictor" / "qr.ckpt"))

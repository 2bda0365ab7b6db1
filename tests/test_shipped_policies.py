"""`python -m mara.evaluate methods=[MARA]` evaluates the shipped MARA policies when given no checkpoint."""

from __future__ import annotations

import json

from mara.core.config import SHIPPED_CKPT_DIR, with_shipped_policies
from mara.curves.bank import default_bank_path


def test_shipped_policies_fill_only_learned_methods_without_checkpoints(small_bank):
    bank = default_bank_path()
    over, used = with_shipped_policies(["MARA", "Slack-FM", "MARA-WLS"], {}, bank)
    names = [c["ckpt_path"].rsplit("/", 1)[-1] for c in over["MARA"]["checkpoints"]]
    assert names == [f"mara_{bank.stem}_seed{s}.ckpt" for s in (0, 1, 2)]
    assert [c["train_seed"] for c in over["MARA"]["checkpoints"]] == [0, 1, 2]
    assert set(used) == {"MARA"}  # a rule has no checkpoint; MARA-WLS ships none
    mine = {"MARA": {"checkpoints": [{"train_seed": 7, "ckpt_path": "/my/run/best.ckpt"}]}}
    assert with_shipped_policies(["MARA"], mine, bank) == (mine, {})  # a given checkpoint is kept
    assert with_shipped_policies(["MARA"], {"MARA": {"ckpt_path": "/x.ckpt"}}, bank)[1] == {}
    assert with_shipped_policies(["MARA"], {}, small_bank.path) == ({}, {})  # a bank with no shipped policies


def test_training_runs_never_take_the_shipped_policies():
    from tests.test_entrypoints import cfg_for

    assert cfg_for("train").shipped_policies is False
    assert cfg_for("evaluate").shipped_policies is True


def test_evaluate_mara_uses_the_shipped_policies(tmp_path):
    from mara.evaluate import evaluate
    from tests.test_entrypoints import cfg_for

    cfg = cfg_for(
        "evaluate",
        [
            "methods=[MARA]",
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
    data = json.loads((tmp_path / "results.json").read_text())
    seeds = sorted(r["train_seed"] for r in data["rows"] if r["method"] == "MARA")
    assert seeds == [0, 1, 2]  # one allocator per shipped training seed
    used = data["method_overrides"]["MARA"]["checkpoints"]
    assert all(c["ckpt_path"].startswith(str(SHIPPED_CKPT_DIR)) for c in used)

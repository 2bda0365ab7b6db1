"""The training side reads typed settings, parsed once at the entry point (mara/train_settings.py).

No module of mara/mat, the predictors' training or mara/train.py reads a Hydra/OmegaConf config or a dict of
settings by key: the settings' names (every key of conf/mat, conf/sim, conf/trainer and the predictors' training
sections) are read as attributes of frozen dataclasses. The few functions that read a key are named here with
why: a policy checkpoint's record (data written by an earlier run), a method's own config (read through
mara/core/config.py), or a command line's own parse.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
PREDICTOR_TRAINING = ("fm/train.py", "qr/train.py", "qr_ctx/train.py", "lcpfn/train.py", "fit_settings.py")
TRAINING = sorted((ROOT / "mara" / "mat").glob("*.py")) + [ROOT / "mara" / "predictors" / n for n in PREDICTOR_TRAINING]
#: the standalone trainers' entry points (``python -m mara.predictors.<name>``): they parse their command line once
PREDICTOR_ENTRIES = ("train.py", "quantile_train.py", "context_train.py", "lcpfn_train.py")
#: every module of mara/predictors below those entry points: none imports a config library
PREDICTOR_MODULES = sorted(
    p
    for p in (ROOT / "mara" / "predictors").rglob("*.py")
    if p.relative_to(ROOT / "mara" / "predictors").as_posix() not in PREDICTOR_ENTRIES
)
ENTRY = ROOT / "mara" / "train.py"
#: the MAT recipes: the product's (conf/mat) and the experiments' (conf/experiments/mat, on Hydra's search path)
RECIPE_FILES = [
    *sorted((ROOT / "conf" / "mat").glob("*.yaml")),
    *sorted((ROOT / "conf" / "experiments" / "mat").glob("*.yaml")),
]

#: (module, function) → why it may read settings' names by key
READS_A_RECORD = {
    ("mara/mat/allocator.py", "__init__"): "a policy checkpoint's recorded hyper-parameters",
    ("mara/mat/allocator.py", "trained_sizes"): "a policy checkpoint's recorded hyper-parameters",
    ("mara/mat/allocator.py", "_check_policy"): "a policy checkpoint's recorded hyper-parameters",
    ("mara/mat/allocator.py", "read_policy_meta"): "a policy checkpoint's recorded hyper-parameters",
    ("mara/mat/train.py", "check_init_from"): "a policy checkpoint's recorded hyper-parameters",
    ("mara/mat/train.py", "check_resume_checkpoint"): "a training checkpoint's state",
    ("mara/mat/train.py", "policy_method"): "a policy's record (checkpoint hyper-parameters or the recipe's)",
    ("mara/mat/train.py", "checkpoint_method"): "a policy checkpoint's recorded hyper-parameters",
    ("mara/mat/imitation.py", "build_teacher"): "a method's own config (conf/method, mara/core/config.py)",
    ("mara/mat/callback.py", "baseline_allocators"): "a method's own config (conf/method, mara/core/config.py)",
    ("mara/mat/module.py", "_log_iteration"): "the optimiser's parameter groups (torch's dicts)",
    ("mara/mat/callback.py", "load_state_dict"): "the callback's own checkpointed state",
    ("mara/mat/ppo.py", "update"): "the rollout batch's tensors (``flatten``)",
    ("mara/predictors/fit_settings.py", "trainer_from_config"): "the Lightning Trainer's arguments, passed through",
    ("mara/predictors/fit_settings.py", "from_config"): "the predictor config's one parse into fit settings",
    ("mara/predictors/fit_settings.py", "from_command_line"): "a standalone trainer's parsed command line",
    ("mara/predictors/qr_ctx/train.py", "from_config"): "the predictor config's one parse into fit settings",
    ("mara/predictors/lcpfn/train.py", "from_config"): "the predictor config's one parse into fit settings",
    ("mara/predictors/lcpfn/train.py", "_loop"): "the stage's own resumable training state (state.pt)",
}
CLI_PARSE = {"settings_from_cli"}  # the only functions of these modules that may build an OmegaConf config


def _keys(node, out: set) -> set:
    if isinstance(node, dict):
        for k, v in node.items():
            out.add(str(k))
            _keys(v, out)
    elif isinstance(node, list):
        for v in node:
            _keys(v, out)
    return out


def settings_keys() -> set[str]:
    """Every key name of the training recipes, the simulator, the trainer and the predictors' training sections."""
    keys: set[str] = set()
    for path in [*RECIPE_FILES, ROOT / "conf" / "sim" / "default.yaml", *(ROOT / "conf" / "trainer").glob("*.yaml")]:
        _keys(OmegaConf.to_container(OmegaConf.load(path)), keys)
    for name in ("fm", "qr", "lcpfn"):
        pred = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "predictor" / f"{name}.yaml"))
        for section in ("train", "data", "inference", "band", "prior_train", "finetune"):
            _keys(pred.get(section) or {}, keys)
    return keys - {"defaults", "_self_"}


def _functions(tree):
    """(node, name of the innermost enclosing function or None) for every node."""

    def walk(node, fn):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
            yield child, inner
            yield from walk(child, inner)

    yield from walk(tree, None)


def key_reads(path: Path, keys: set[str], root: Path = ROOT) -> list[str]:
    """``x["key"]`` / ``x.get("key")`` reads of a settings key, outside the functions allowed above."""
    rel = path.relative_to(root).as_posix()
    found = []
    for node, fn in _functions(ast.parse(path.read_text())):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            key = node.args[0].value
        if isinstance(key, str) and key in keys and (rel, fn) not in READS_A_RECORD:
            found.append(f"{rel}:{node.lineno} in {fn}: reads {key!r} by key")
    return found


def config_uses(path: Path, root: Path = ROOT) -> list[str]:
    """Imports of omegaconf / hydra outside a command line's own parse."""
    rel = path.relative_to(root).as_posix()
    found = []
    for node, fn in _functions(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        if any(n.split(".")[0] in ("omegaconf", "hydra") for n in names) and fn not in CLI_PARSE:
            found.append(f"{rel}:{node.lineno}: imports {', '.join(names)}")
    return found


def test_settings_keys_are_read_from_the_yaml():
    keys = settings_keys()
    assert {"n_nodes", "max_active", "dagger_rounds", "teacher", "lr", "patience", "train_examples"} <= keys


@pytest.mark.parametrize("path", TRAINING, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_training_modules_read_typed_settings(path):
    faults = key_reads(path, settings_keys()) + config_uses(path)
    assert not faults, "\n" + "\n".join(faults)


def test_no_predictor_module_below_the_entry_points_imports_a_config_library():
    """Only the standalone trainers' entry points parse a command line; the predictors, their trainers and the
    factory read plain settings or the predictor configs the registry hands them."""
    assert len(PREDICTOR_MODULES) > 30
    faults = [f for path in PREDICTOR_MODULES for f in config_uses(path)]
    assert not faults, "\n" + "\n".join(faults)


def test_the_check_finds_a_key_read(tmp_path):
    """The scan is not blind: a dict-key read of a setting and a config import in a training module are found."""
    mod = tmp_path / "mara" / "mat" / "crept.py"
    mod.parent.mkdir(parents=True)
    mod.write_text(
        "from omegaconf import DictConfig\n\ndef f(c):\n    return c['sim']['n_nodes'] + c.get('dagger_rounds')\n"
    )
    found = key_reads(mod, settings_keys(), tmp_path) + config_uses(mod, tmp_path)
    assert len(found) == 4, found  # 'sim', 'n_nodes', 'dagger_rounds' and the import


def test_the_entry_point_hands_its_config_on_unread():
    """mara/train.py passes the composed config only as an argument (to the parse, the pre-flight, the run folder,
    the paper's pipeline): it never reads a key of it."""
    tree = ast.parse(ENTRY.read_text())
    passed = {
        id(a)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for a in [*node.args, *(k.value for k in node.keywords)]
    }
    reads = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and node.id == "cfg" and isinstance(node.ctx, ast.Load) and id(node) not in passed
    ]
    assert not reads, f"mara/train.py reads its config at lines {reads}"
    assert key_reads(ENTRY, settings_keys()) == []
    # and hands it only to the parse and the checks before any work: the stages, the evaluation and the paper's
    # pipeline get the parsed settings
    given = {
        node.func.id if isinstance(node.func, ast.Name) else node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and any(isinstance(a, ast.Name) and a.id == "cfg" for a in [*node.args, *(k.value for k in node.keywords)])
    }
    assert given <= {"before_any_work", "check_stage_and_reward", "preflight", "parse", "run_cli"}, given


def test_the_stages_after_the_parse_take_typed_settings():
    """The evaluation, the paper's pipeline and the trace policy's training, as mara.train runs them, take frozen
    settings, not a config."""
    import inspect

    from mara.evaluate import run_evaluation
    from mara.mat.trace_train import train_trace_policy
    from mara.pipelines.paper import run_paper
    from mara.train import run_training

    first = {
        f.__name__: next(iter(inspect.signature(f).parameters.values())).annotation
        for f in (run_training, run_evaluation, run_paper, train_trace_policy)
    }
    assert first == {
        "run_training": "TrainSettings",
        "run_evaluation": "EvaluationSettings",
        "run_paper": "PaperSettings",
        "train_trace_policy": "TracePolicySettings",
    }


def test_settings_are_frozen_and_recorded_as_before():
    """The parse of the main command's config: frozen settings; the checkpoint records the recipe's keys."""
    from mara.train_settings import parse
    from tests.test_entrypoints import cfg_for

    settings = parse(cfg_for("train", []))
    policy = settings.policy
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.seed = 1
    rec = policy.recorded()
    assert set(rec) == {
        "net",
        "ppo",
        "rollout",
        "sim",
        "workload",
        "reward",
        "predictor",
        "bank_path",
        "seed",
        "total_env_steps",
        "num_threads",
        "imitation",
        "init_from",
    }
    assert rec["sim"] == {"n_nodes": 7, "max_active": 10, "obs_every": 10, "n_steps": 500, "beta": 0.1}
    assert rec["imitation"]["suite"][5] == {
        "nodes": 7,
        "max_active": 10,
        "node_speed": [2, 2, 1, 1, 1, 1, 1],
        "switch_cost": 2,
        "teacher": "Slack-QR-displace",
    }
    assert settings.predictor is None  # the decision head trains elsewhere: nothing to train in the predictor stage
    fm = parse(cfg_for("train", ["experiment=smoke"]))
    assert fm.predictor.fit.data["train_examples"] == 256 and fm.predictor.fit.train.patience == 1


def test_the_paper_protocol_and_the_evaluation_are_parsed_before_any_work():
    """experiment=paper parses into its protocol (the jobs' configs are made from the config serialised there); the
    main command's evaluation stage into the evaluation's settings; a bad worker count stops at the parse."""
    from mara.core.config import ConfigError
    from mara.train_settings import TrainedSpec, parse
    from tests.test_entrypoints import cfg_for

    paper = parse(cfg_for("train", ["experiment=paper"])).paper
    assert paper.trained["MARA-paper"] == TrainedSpec("fm", "dense", "paper") and paper.seeds == (0, 1, 2)
    assert OmegaConf.create(paper.composed).paper.methods == list(paper.methods) and "Slack-WLS" in paper.methods
    main = parse(cfg_for("train", []))
    assert main.paper is None and main.evaluation.methods == main.methods
    with pytest.raises(ConfigError, match="paper.workers must be >= 1"):
        parse(cfg_for("train", ["experiment=paper", "paper.workers=0"]))


@pytest.mark.parametrize("recipe", [p.stem for p in RECIPE_FILES])
def test_every_bare_recipe_parses(recipe):
    """A bare conf/mat recipe (the bench's and the tests') parses; its string predictor becomes ``{name}``."""
    from mara.train_settings import load_recipe, mat_settings

    settings = mat_settings(load_recipe(recipe))
    assert settings.predictor is None or set(settings.predictor) == {"name"}
    assert settings.recorded()["net"]["decoder"] in ("autoregressive", "plackett_luce")


def test_an_unknown_recipe_setting_is_one_line():
    from mara.core.config import ConfigError
    from mara.train_settings import load_recipe, mat_settings

    cfg = load_recipe("band")
    cfg.ppo.learning_rate = 1e-3
    with pytest.raises(ConfigError, match="mat.ppo: unknown setting learning_rate"):
        mat_settings(cfg)


def test_the_predictor_command_lines_parse_into_fit_settings():
    from mara.core.cli import command_line_config
    from mara.core.config import ConfigError
    from mara.predictors import context_train, quantile_train, train
    from mara.predictors.lcpfn.train import LCPFNFitSettings

    flow = train.settings_from_cli(["seed=3", "predictor.train.patience=2", "paths.output_dir=outputs/x"])
    assert flow.seed == 3 and flow.fit.train.patience == 2 and flow.output_dir == "outputs/x"
    assert flow.fit.data["n_bins"] == flow.fit.net["n_bins"]  # interpolations resolved
    head = quantile_train.settings_from_cli(["predictor.train.max_epochs=2"])
    assert head.fit.train.max_epochs == 2 and head.fit.train.monitor == "val/pinball"
    assert head.bank_path is None and head.seed == 0 and head.kind == "qr"
    ctx = context_train.settings_from_cli(["predictor.context.members=2"])
    assert ctx.fit.members == 2 and ctx.fit.head.train.monitor == "val/pinball" and ctx.kind == "qr_ctx"
    plain = command_line_config(["predictor.prior_train.steps=7"], "lcpfn", "outputs/lcpfn")
    lc = LCPFNFitSettings.from_config(plain["predictor"])
    assert lc.prior_train.steps == 7 and lc.prior_train.grid == (60, 72) and lc.finetune.ctx_min == 4
    with pytest.raises(ConfigError, match="predictor.finetune: unknown setting"):
        LCPFNFitSettings.from_config({**plain["predictor"], "finetune": {"stepz": 3}})

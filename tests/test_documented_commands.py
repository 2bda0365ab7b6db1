"""Every ``python -m mara.…`` command the README and docs/ show composes: its config-group choices exist, Hydra
composes its overrides into the entry point's config (nothing runs), and every method it names is registered. Every
``mara.train`` / ``mara.evaluate`` command without a placeholder passes the entry point's check before any work (so a
documented command never ends in exit 2), and the cheap ones on shipped data run to exit 0.

Placeholders in the pages (``<run>``, ``DIR``, ``seed=S``, ``sim.nodes=M``, ``…``) are given stand-in values first.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from mara.core.cli import composition_error, unknown_group_option
from mara.core.config import CONF_DIR, ConfigError, available_methods
from tests.conftest import run_python

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "tasks_zoo" / "README.md"]
#: entry point module -> its Hydra primary config (the others take their own arguments)
HYDRA = {
    "mara.train": "train",
    "mara.evaluate": "evaluate",
    "mara.live": "live",
    "mara.calibrate": "calibrate",
    "mara.fidelity": "fidelity",
    "mara.generate_curves": "generate_curves",
}
#: stand-ins for the pages' placeholders, applied in order
STAND_INS = [
    (r"mat=<recipe>", "mat=band"),
    (r"methods=\[<method>\]", "methods=[EDF]"),
    (r"predictor=<kind>", "predictor=qr"),
    (r"<[^>]*>", "outputs/doc_placeholder"),
    (r"\bRUN\d*\b|\bOUT\b|\bDIR\b", "outputs/doc_placeholder"),
    (r"sim\.node_speed=\[…\]", "sim.node_speed=[2,2,1,1,1,1,1]"),
    (r"=…", "=2"),
    (r"(nodes[=:] ?)M\b", r"\g<1>7"),
    (r"(max_active[=:] ?)K\b", r"\g<1>10"),
    (r"=S\b", "=0"),
    (r"=Q\b", "=10"),
    (r"\[overrides\]|\[--[^\]]*\]", ""),
    (r"(^|\s)(…|\.\.\.)(?=\s|$)", " doc_elided "),
    (r"&&.*", ""),
]


def documented_commands() -> list[tuple[str, str]]:
    """(page, command) for every inline code span or code-block line that starts ``python -m mara``."""
    found = []
    for page in PAGES:
        text = page.read_text()
        spans = re.findall(r"`(python -m mara[^`]*)`", text)
        blocks = [b.replace("\\\n", " ") for b in re.findall(r"```(?:bash|sh)?\n(.*?)```", text, flags=re.S)]
        spans += [
            ln.strip() for block in blocks for ln in block.splitlines() if ln.strip().startswith("python -m mara")
        ]
        for span in spans:
            command = " ".join(span.split())
            for pattern, value in STAND_INS:
                command = re.sub(pattern, value, command)
            found.append((str(page.relative_to(ROOT)), command.split("#")[0].strip()))
    return sorted(set(found))


COMMANDS = documented_commands()


def test_the_pages_show_commands():
    assert len(COMMANDS) > 50 and any("mara.train" in c for _, c in COMMANDS)


@pytest.mark.parametrize("page, command", COMMANDS)
def test_documented_command_composes(page, command):
    words = shlex.split(command)
    module = words[2]
    assert importlib.util.find_spec(module) is not None, f"{page}: no module {module}"
    if module not in HYDRA:
        return
    argv = [w for w in words[3:] if "=" in w or w in ("-m", "--multirun")]
    assert unknown_group_option(argv) is None, f"{page}: {command}"
    assert composition_error(HYDRA[module], argv) is None, (
        f"{page}: {command}: {composition_error(HYDRA[module], argv)}"
    )
    overrides = [w if "," not in w or "=[" in w or "={" in w else w.split(",")[0] for w in argv if w not in ("-m",)]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(HYDRA[module], overrides=overrides)
    unknown = [m for m in (cfg.get("methods") or []) if m not in available_methods()]
    assert not unknown, f"{page}: {command} names unknown methods {unknown}"


#: entry point module -> its check before any work (a ``ConfigError`` there is the command's exit 2)
CHECKS = {"mara.evaluate": "_before_any_work", "mara.train": "before_any_work"}
#: what makes a command a template rather than one to run: stand-ins, shell variables, elisions, a multirun
TEMPLATE = re.compile(r"doc_placeholder|doc_elided|\$|\.\.\.|…|(^|\s)-m\s|--multirun")


def checkable(command: str) -> bool:
    words = shlex.split(command)
    return words[2] in CHECKS and not TEMPLATE.search(" ".join(words[3:]))


CHECKABLE = [(page, c) for page, c in COMMANDS if checkable(c)]


def test_many_documented_commands_are_checked():
    assert len(CHECKABLE) > 40


@pytest.mark.parametrize("page, command", CHECKABLE)
def test_documented_command_passes_the_check_before_any_work(page, command, monkeypatch):
    """What a user typing the command would meet first: the entry point's one check (methods, keys, numbers,
    checkpoints, trace files and trace methods). Data that is not shipped (``data_cache/``, a GPU) is skipped."""
    import importlib

    monkeypatch.chdir(ROOT)
    words = shlex.split(command)
    module, argv = words[2], [w for w in words[3:] if "=" in w]
    unmade = [w.split("=", 1)[1] for w in argv if "=data_cache/" in w and not (ROOT / w.split("=", 1)[1]).exists()]
    if unmade:
        pytest.skip(f"needs {unmade[0]} (made from ../shared/data by the page's own steps)")
    if "trainer=gpu" in argv:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(HYDRA[module], overrides=argv)
    check = getattr(importlib.import_module(module), CHECKS[module])
    try:
        check(cfg)
    except ConfigError as exc:
        if "data_cache/" in str(exc) and "not found" in str(exc) and not (ROOT / "data_cache" / "itp-traces").is_dir():
            pytest.skip(f"needs the unpacked ITP traces: {exc}")
        pytest.fail(f"{page}: {command}: exit 2 before any work: {exc}")


#: commands the pages show that run in seconds on shipped data: (page, command, what its output must hold)
CHEAP = [
    ("docs/traces.md", "python -m mara.evaluate experiment=trace 'methods=[EDF,ElasticFlow]'", "| ElasticFlow | 0.753"),
    ("docs/guide.md", "python -m mara.evaluate experiment=trace trace.jobs=target_loss", "| MARA | 0.960"),
]


@pytest.mark.parametrize("page, command, expect", CHEAP)
def test_cheap_documented_command_runs(page, command, expect, tmp_path):
    """Run end to end as the page shows it (into a folder of its own), exit 0, and the number the page quotes."""
    assert (page, command) in COMMANDS, f"{page} no longer shows {command}"
    words = shlex.split(command)
    done = run_python(*words[1:], f"hydra.run.dir={tmp_path}", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert expect in (tmp_path / "results.md").read_text()

"""Every ``python -m mara.…`` command the README and docs/ show composes: its config-group choices exist, Hydra
composes its overrides into the entry point's config (nothing runs), and every method it names is registered.

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
from mara.core.config import CONF_DIR, available_methods

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
    (r"\bRUN\b|\bOUT\b|\bDIR\b", "outputs/doc_placeholder"),
    (r"sim\.node_speed=\[…\]", "sim.node_speed=[2,2,1,1,1,1,1]"),
    (r"=…", "=2"),
    (r"(nodes[=:] ?)M\b", r"\g<1>7"),
    (r"(max_active[=:] ?)K\b", r"\g<1>10"),
    (r"=S\b", "=0"),
    (r"=Q\b", "=10"),
    (r"\[overrides\]|\[--[^\]]*\]", ""),
    (r"(^|\s)(…|\.\.\.)(?=\s|$)", " "),
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

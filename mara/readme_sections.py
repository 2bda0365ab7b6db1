"""Generated sections of the README: text between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` is written by a
command (``python -m mara.report ... readme=README.md`` fills ``results``, ``python -m mara.fidelity ...
readme=README.md`` fills ``fidelity``), never typed by hand."""
from __future__ import annotations

from pathlib import Path


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def replace_section(text: str, section: str, name: str) -> str:
    """``text`` with the part between the ``name`` markers replaced by ``section``; missing markers are an error."""
    begin, end = markers(name)
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"README has no '{begin}' … '{end}' markers to fill")
    return text[: i + len(begin)] + "\n" + section.rstrip() + "\n" + text[j:]


def update_readme(readme: Path, section: str, name: str) -> Path:
    """Rewrite the ``name`` section of ``readme`` in place (atomically)."""
    from mara.eval.report import write_text_atomic

    readme = Path(readme)
    if not readme.exists():
        raise FileNotFoundError(f"README {readme} does not exist")
    return write_text_atomic(readme, replace_section(readme.read_text(), section, name))

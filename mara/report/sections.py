"""Generated sections of a page (``docs/results.md``): text between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``
is written by a command (``python -m mara.report ... readme=docs/results.md`` fills ``results``,
``python -m mara.fidelity ... readme=docs/results.md`` fills ``fidelity``, ``python -m mara.readme_tables run=OUT
readme=docs/results.md`` fills ``rules``, ``prediction``, ``lofo``, ``lara_sweep``, ``live``, ``imitation`` and
``checkpoints``), never typed by hand."""

from __future__ import annotations

import os
from pathlib import Path


def figures_dir(page: Path) -> Path:
    """Where a page's figures live: ``docs/figures`` of the repository the page belongs to (the page may be
    ``docs/results.md`` or a README at the repository root)."""
    page = Path(page)
    return page.parent / "figures" if page.parent.name == "docs" else page.parent / "docs" / "figures"


def shown_path(path: Path | str) -> str:
    """``path`` as a generated page shows it: relative to the working directory or the repository when under one, so
    pages and outputs carry no machine's absolute paths."""
    path = Path(path)
    for root in (Path.cwd(), Path(__file__).resolve().parents[2]):
        try:
            return path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            continue
    return path.as_posix()


def figure_link(page: Path, figure: Path) -> str:
    """The markdown path of ``figure`` as seen from ``page``."""
    return Path(os.path.relpath(Path(figure).resolve(), Path(page).resolve().parent)).as_posix()


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def replace_section(text: str, section: str, name: str) -> str:
    """``text`` with the part between the ``name`` markers replaced by ``section``; missing markers are an error."""
    begin, end = markers(name)
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"README has no '{begin}' … '{end}' markers to fill")
    return text[: i + len(begin)] + "\n" + section.rstrip() + "\n" + text[j:]

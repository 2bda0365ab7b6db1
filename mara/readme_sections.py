"""Generated sections of the README: text between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` is written by a
command (``python -m mara.report ... readme=README.md`` fills ``results``, ``python -m mara.fidelity ...
readme=README.md`` fills ``fidelity``, ``python -m mara.readme_tables run=OUT readme=README.md`` fills ``rules``,
``prediction``, ``lofo``, ``lara_sweep``, ``live``, ``imitation`` and ``checkpoints``), never typed by hand."""
from __future__ import annotations


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def replace_section(text: str, section: str, name: str) -> str:
    """``text`` with the part between the ``name`` markers replaced by ``section``; missing markers are an error."""
    begin, end = markers(name)
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"README has no '{begin}' … '{end}' markers to fill")
    return text[: i + len(begin)] + "\n" + section.rstrip() + "\n" + text[j:]


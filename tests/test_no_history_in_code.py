"""The code speaks of concepts: no issue / part / stop tags in code, configs and docs, no machine's absolute paths."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = {".py", ".yaml", ".yml", ".md", ".sh", ".toml", ".json", ".txt", ".cfg"}
TAG = re.compile(r"issue[ -]?#?[0-9]+|part [0-9]|stop [0-9]+", re.IGNORECASE)
MACHINE_PATH = re.compile("/" + "(?:work|root|home)/|/" + "tmp/[a-z]")  # split so this file does not match itself
# The story lives in docs/history.md; conf/mat/ recipe headers are rewritten separately (see the recipes' own work).
TAGS_ALLOWED = ("docs/history.md", "conf/mat/")


def _files(*tops: str):
    for top in tops:
        path = ROOT / top
        for f in [path] if path.is_file() else sorted(path.rglob("*")):
            if f.is_file() and f.suffix in TEXT and "__pycache__" not in f.parts:
                yield f, f.relative_to(ROOT).as_posix()


def _hits(pattern: re.Pattern, files, allowed=()) -> list[str]:
    hits = []
    for f, rel in files:
        if rel.startswith(allowed) or f == Path(__file__).resolve():
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{rel}:{n}: {line.strip()[:100]}")
    return hits


def test_no_history_tags():
    hits = _hits(TAG, _files("mara", "tasks_zoo", "conf", "tests", "scripts", "docs", "README.md"), TAGS_ALLOWED)
    assert not hits, "name the concept and the reason, not the issue:\n" + "\n".join(hits)


def test_no_machine_paths():
    files = _files("mara", "tasks_zoo", "conf", "tests", "scripts", "docs", "README.md", "pyproject.toml")
    hits = _hits(MACHINE_PATH, files)
    assert not hits, "use repository-relative paths:\n" + "\n".join(hits)


def test_the_patterns_catch_what_they_are_for():
    issue, part, stop = "issue", "part", "stop"  # spelled apart so a grep of the tree does not find this test
    assert (
        TAG.search(f"({issue} 25)")
        and TAG.search(f"{issue.title()} #14")
        and TAG.search(f"{issue}21")
        and TAG.search(f"{part} 5")
    )
    assert TAG.search(f"since {stop} 27")
    assert not TAG.search("an issue of scale") and not TAG.search("the part of the band")
    assert MACHINE_PATH.search("/" + "work/main/mara/data") and MACHINE_PATH.search("/" + "tmp/paper_tiny")
    assert not MACHINE_PATH.search("mara/data/banks/zoo.parquet")


def test_generated_pages_show_repository_relative_paths(tmp_path):
    from mara.report.sections import shown_path

    assert shown_path(ROOT / "mara" / "data" / "banks" / "zoo.parquet") == "mara/data/banks/zoo.parquet"
    assert shown_path(tmp_path / "run") == (tmp_path / "run").as_posix()  # outside the repository: kept as given


def test_shipped_data_files_hold_no_machine_paths():
    """Checkpoints and banks shipped in the package carry repository-relative paths in their metadata too."""
    pattern = re.compile(MACHINE_PATH.pattern.encode())
    shipped = sorted((ROOT / "mara" / "data").rglob("*.ckpt")) + sorted((ROOT / "mara" / "data").rglob("*.parquet"))
    assert shipped
    hits = [f.relative_to(ROOT).as_posix() for f in shipped if pattern.search(f.read_bytes())]
    assert not hits, "machine paths inside shipped files: " + ", ".join(hits)

"""The README and docs/: links and their #anchors resolve, the README stays short and keeps its set-up commands,
docs/README.md lists every page, no page is too long to read, the README's results table is the generated one."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "tasks_zoo" / "README.md"]


SETUP = (
    "pip install -e . && python -m mara.train                      # install, run the main job on the shipped default",
    'pip install -e ".[test]" && python -m pytest                  # install the test extra, run the tests',
)


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_readme_keeps_its_two_setup_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    for command in SETUP:
        assert command in lines, command


def test_no_page_is_longer_than_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in PAGES if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_docs_index_lists_every_page():
    """docs/README.md links every page of docs/ (and the README links the index and the three starting pages)."""
    index = (ROOT / "docs" / "README.md").read_text()
    linked = set(re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", index))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert not pages - linked, sorted(pages - linked)
    readme = (ROOT / "README.md").read_text()
    for page in ("docs/README.md", "docs/guide.md", "docs/research.md", "docs/developer.md"):
        assert f"]({page})" in readme, page


def test_every_relative_link_resolves():
    missing = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                missing.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not missing, missing


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors (lower case, punctuation dropped, spaces to '-', repeats numbered) and explicit ids."""
    out, seen = set(), {}
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*$", re.sub(r"```.*?```", "", text, flags=re.S), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out | set(re.findall(r'<a\s+(?:id|name)="([^"]+)"', text))


def test_every_anchor_resolves():
    broken = []
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", page.read_text()):
            if "://" in target or not (target == "" or target.endswith(".md")):
                continue
            linked = page.parent / target if target else page
            if linked.exists() and anchor not in _anchors(linked.read_text()):
                broken.append(f"{page.relative_to(ROOT)} -> {target}#{anchor}")
    assert not broken, broken


def test_anchor_rule_on_known_headings():
    text = '# Throughput (`python -m mara.bench`)\n## MARA\'s training recipe\n## Notes\n## Notes\n<a id="rules"></a>\n'
    assert _anchors(text) == {"throughput-python--m-marabench", "maras-training-recipe", "notes", "notes-1", "rules"}


def test_readme_results_table_is_the_generated_one():
    """Each row of the README's short table appears, value for value, in docs/results.md's generated section."""
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Results") : readme.index("## Documentation")]
    generated = (ROOT / "docs" / "results.md").read_text()
    block = generated[generated.index("<!-- results:begin -->") : generated.index("<!-- results:end -->")]
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and "±" in ln]
    assert len(rows) >= 5
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        name = cells[0].split(" (")[0]
        assert f"| {name} | " + " | ".join(cells[1:5]) + " |" in block, row
        paper = cells[5]
        if paper != "–":
            assert re.search(rf"\| {re.escape(name)} \| [^|]+ \| {re.escape(paper)} ±", block), row

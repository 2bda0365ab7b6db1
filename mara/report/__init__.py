"""Reporting: results files and figures (results), the paper report (paper, paper_numbers), the gap
decomposition, and the generated sections of docs/results.md (sections, tables). ``python -m mara.report``
is ``__main__``."""

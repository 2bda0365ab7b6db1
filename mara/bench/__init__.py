"""Speed benchmarks; ``python -m mara.bench`` is ``__main__``."""

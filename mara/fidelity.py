"""``python -m mara.fidelity [bank.path=...] [out_dir=...]``: the bank's fidelity to the paper's Table 6.

Per family: calibrated ε and budget range next to Table 6's ε and available time, and the loss the pool
curves reach (see ``mara.curves.fidelity``). Writes ``fidelity.md``, ``fidelity.json`` and the curve plot
``curves_by_family.png`` (both ε drawn) into ``out_dir`` and prints the markdown table.
"""
from __future__ import annotations

import json
from pathlib import Path

import hydra
from omegaconf import DictConfig

from mara.cli import run_cli
from mara.curves.bank import default_bank_path, load_bank, shipped_bank_path
from mara.curves.fidelity import fidelity_table, to_markdown


def fidelity(cfg: DictConfig) -> list[dict]:
    from mara.curves.generation import plot_bank_grid

    path = shipped_bank_path(cfg.bank.path) if cfg.bank.get("path") else default_bank_path()
    bank = load_bank(path)
    if not bank.family_params:
        raise ValueError(f"curve bank {path} is not calibrated; run `python -m mara.calibrate bank.path={path}` first")
    rows = fidelity_table(bank)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = to_markdown(rows)
    (out / "fidelity.md").write_text(f"Fidelity of `{path}` to Table 6 (`python -m mara.fidelity`).\n\n" + md)
    (out / "fidelity.json").write_text(json.dumps({"bank": str(path), "families": rows}, indent=1) + "\n")
    png = plot_bank_grid(path, out / cfg.plot_name)
    print(md)
    print(f"wrote {out / 'fidelity.md'}, {out / 'fidelity.json'}, {png}")
    return rows


@hydra.main(version_base="1.3", config_path="../conf", config_name="fidelity")
def main(cfg: DictConfig) -> None:
    run_cli(fidelity, cfg)


if __name__ == "__main__":
    main()

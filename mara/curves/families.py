"""The ten task families of the paper (Table 6) with their paper parameters and recipe ranges (A.2).

``family_params`` tables map a family name to either
``{"eps": float, "budget": [lo, hi]}`` (ID: ε × U[0.9, 1.1], budget uniform integer in [lo, hi]) or
``{"eps_range": [lo, hi], "budget_set": [..]}`` (OOD: ε log-uniform, budget uniform over the set).
"""

from __future__ import annotations

ID_FAMILIES = (
    "CNN_Cifar10",
    "ResNet18_Cifar10",
    "ResNet34_Cifar10",
    "LSTM_Cifar10",
    "TSFM_Audio_1",
    "TSFM_Audio_2",
    "ALSTM_Text_1",
    "ALSTM_Text_2",
)
OOD_FAMILIES = ("RLExpertConfig", "ViT_Cifar10_1")
ALL_FAMILIES = ID_FAMILIES + OOD_FAMILIES

#: Table 6 of the paper (real-data, cumulative-average, mean-reduced losses).
PAPER_FAMILY_PARAMS: dict[str, dict] = {
    "CNN_Cifar10": {"eps": 1.6601, "budget": [285, 315]},
    "ResNet18_Cifar10": {"eps": 1.8575, "budget": [285, 315]},
    "ResNet34_Cifar10": {"eps": 1.8523, "budget": [285, 315]},
    "LSTM_Cifar10": {"eps": 2.1271, "budget": [285, 315]},
    "TSFM_Audio_1": {"eps": 0.4762, "budget": [292, 350]},
    "TSFM_Audio_2": {"eps": 0.6043, "budget": [292, 350]},
    "ALSTM_Text_1": {"eps": 0.0249, "budget": [312, 345]},
    "ALSTM_Text_2": {"eps": 0.0214, "budget": [312, 345]},
    "RLExpertConfig": {"eps_range": [1.4, 1.8], "budget_set": [285, 295, 305, 315]},
    "ViT_Cifar10_1": {"eps_range": [2.0231, 2.0440], "budget_set": [285, 295, 305, 315]},
}

#: batch-size choices by domain (A.2)
DOMAIN_BATCH_SIZES = {"image": (16, 32, 64), "audio": (1, 2, 4), "text": (4, 8), "rl": (16, 32, 64)}
FAMILY_DOMAIN = {
    "CNN_Cifar10": "image",
    "ResNet18_Cifar10": "image",
    "ResNet34_Cifar10": "image",
    "LSTM_Cifar10": "image",
    "ViT_Cifar10_1": "image",
    "TSFM_Audio_1": "audio",
    "TSFM_Audio_2": "audio",
    "ALSTM_Text_1": "text",
    "ALSTM_Text_2": "text",
    "RLExpertConfig": "rl",
}
LR_RANGE = (3e-4, 3e-3)


def max_budget(params: dict) -> int:
    """Largest available time a family's parameter entry allows."""
    if "budget" in params:
        return int(params["budget"][1])
    return int(max(params["budget_set"]))


def generation_cap(family: str, params: dict | None = None) -> int:
    """Generation cap = twice the family's largest budget (paper A.2)."""
    return 2 * max_budget((params or PAPER_FAMILY_PARAMS)[family])


def validate_family_params(table: dict, families=None, source: str = "family_params") -> None:
    """Raise ValueError (one line) if an entry is malformed or a needed family is absent."""
    for fam in families or table.keys():
        if fam not in table:
            raise ValueError(f"{source}: no ε/budget entry for family {fam!r}")
        p = table[fam]
        ok_id = "eps" in p and "budget" in p and len(p["budget"]) == 2 and 0 < p["budget"][0] <= p["budget"][1]
        ok_ood = "eps_range" in p and "budget_set" in p and len(p["eps_range"]) == 2 and len(p["budget_set"]) > 0
        if not (ok_id or ok_ood):
            raise ValueError(
                f"{source}: entry for {fam!r} must be {{eps, budget:[lo,hi]}} or "
                f"{{eps_range:[lo,hi], budget_set:[...]}}, got {dict(p)}"
            )

"""Curve bank: schema, writer, validating loader, derived views."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mara.curves.bank import (
    NEVER,
    BankError,
    load_bank,
    merge_tables,
    read_bank_meta,
    write_bank,
)
from tests.conftest import linear_records


def test_roundtrip_and_views(tmp_path):
    path = write_bank(tmp_path / "b.parquet", linear_records(3, 20), {"family_params": {"x": 1}})
    bank = load_bank(path)
    assert len(bank) == 3 and bank.families == ["CNN_Cifar10"]
    assert read_bank_meta(path)["family_params"] == {"x": 1}
    ell = 2.0 - 0.02 * np.arange(1, 21)
    np.testing.assert_allclose(bank.L[0], np.cumsum(ell) / np.arange(1, 21), rtol=1e-6)
    np.testing.assert_allclose(bank.S[0], 16 * np.arange(1, 21))
    np.testing.assert_allclose(bank.C_samples[0], bank.S[0] * bank.L[0])
    # L(s) = 2 - 0.01 (s + 1): first s with L <= 1.855 is s = 14
    assert bank.first_crossing(np.array([0]), np.array([1.855]))[0] == 14
    assert bank.first_crossing(np.array([0]), np.array([0.1]))[0] == NEVER


def _corrupt(tmp_path, mutate):
    recs = linear_records(3, 10)
    mutate(recs)
    return write_bank(tmp_path / "bad.parquet", recs)


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda r: r[1].update(curve_id=r[0]["curve_id"]), "row 1 .*duplicate curve_id"),
        (lambda r: r[2].update(losses=[1.0, float("nan")]), "row 2 .*non-finite loss at batch 2"),
        (lambda r: r[0].update(losses=[]), "row 0 .*empty losses"),
        (lambda r: r[1].update(split="test"), "row 1 .*unknown split 'test'"),
        (lambda r: r[1].update(batch_size=0), "row 1 .*batch_size"),
    ],
)
def test_loader_names_file_and_row(tmp_path, mutate, needle):
    path = _corrupt(tmp_path, mutate)
    with pytest.raises(BankError, match=needle) as exc:
        load_bank(path)
    assert str(path) in str(exc.value)


def test_missing_and_non_bank_files(tmp_path):
    with pytest.raises(BankError, match="file not found"):
        load_bank(tmp_path / "nope.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(BankError, match="not a readable Parquet file"):
        load_bank(tmp_path / "junk.parquet")
    pq.write_table(pa.table({"a": [1]}), tmp_path / "other.parquet")
    with pytest.raises(BankError, match="not a MARA bank"):
        load_bank(tmp_path / "other.parquet")


def test_schema_version_checked(tmp_path):
    path = write_bank(tmp_path / "b.parquet", linear_records(1, 5))
    t = pq.read_table(path)
    meta = dict(t.schema.metadata)
    meta[b"mara.schema_version"] = b"99"
    pq.write_table(t.replace_schema_metadata(meta), path)
    with pytest.raises(BankError, match="schema version '99'"):
        load_bank(path)


def test_missing_column(tmp_path):
    path = write_bank(tmp_path / "b.parquet", linear_records(1, 5))
    t = pq.read_table(path)
    pq.write_table(t.drop(["lr"]).replace_schema_metadata(t.schema.metadata), path)
    with pytest.raises(BankError, match="missing required column"):
        load_bank(path)


def test_merge_rejects_duplicates(tmp_path):
    a = write_bank(tmp_path / "a.parquet", linear_records(2, 5))
    b = write_bank(tmp_path / "b.parquet", linear_records(1, 5))
    with pytest.raises(BankError, match="duplicate curve_id"):
        merge_tables([a, b])
    assert merge_tables([a]).num_rows == 2


def test_require_families(linear_bank):
    with pytest.raises(BankError, match="no 'pool' curves for family ViT_Cifar10_1"):
        linear_bank.require_families(["CNN_Cifar10", "ViT_Cifar10_1"], "pool", "task set ViT_OOD")


def test_meta_is_json(tmp_path):
    bank = load_bank(write_bank(tmp_path / "b.parquet", linear_records(1, 5)))
    assert json.loads(bank.meta[0]) == {"test": True}

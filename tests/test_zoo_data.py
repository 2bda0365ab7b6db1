"""Real-format loaders read tiny fixture files; missing data gives one clear line; synthetic stand-ins have real
shapes."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import soundfile as sf
import torch
from omegaconf import OmegaConf

from tasks_zoo.cifar import load_cifar10, synthetic_cifar10
from tasks_zoo.errors import ZooError
from tasks_zoo.imdb import load_imdb, synthetic_imdb, tokenize
from tasks_zoo.melspec import log_mel, mel_filterbank
from tasks_zoo.montezuma import ScriptedExpert, stack_index, synthetic_montezuma
from tasks_zoo.registry import load_dataset
from tasks_zoo.yesno import labels_from_name, load_yesno, synthetic_yesno


def _write_cifar(root, n=4):
    folder = root / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for k, name in enumerate(names):
        # the real files are Python-2 pickles whose str keys load as str under encoding="latin1"
        batch = {
            "batch_label": name,
            "labels": [(k + j) % 10 for j in range(n)],
            "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            "filenames": ["x.png"] * n,
        }
        with open(folder / name, "wb") as fh:
            pickle.dump(batch, fh)
    with open(folder / "batches.meta", "wb") as fh:
        pickle.dump({"label_names": [f"c{i}" for i in range(10)], "num_cases_per_batch": n}, fh)
    return folder


def test_cifar10_python_batches(tmp_path):
    _write_cifar(tmp_path)
    x, y = load_cifar10(tmp_path / "cifar10" / "cifar-10-batches-py")
    assert x.shape == (20, 3, 32, 32) and x.dtype == torch.uint8
    assert y.tolist()[:4] == [0, 1, 2, 3]


def test_imdb_acl_layout(tmp_path):
    for sub, name, text in [
        ("pos", "0_9.txt", "A great movie!<br />Great acting."),
        ("pos", "1_8.txt", "Loved it"),
        ("neg", "2_1.txt", "Terrible, boring film."),
    ]:
        d = tmp_path / "aclImdb" / "train" / sub
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
    ids, y = load_imdb(tmp_path / "aclImdb", max_len=8)
    assert ids.shape == (3, 8) and y.tolist() == [1, 1, 0]
    assert (ids[0, :5] > 1).all() and ids[0, 5] == 0 and ids[2, 3] == 0  # known tokens, right padding
    assert tokenize("Great<br />movie") == ["great", "movie"]


def test_yesno_wavs(tmp_path):
    folder = tmp_path / "waves_yesno"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name in ("0_1_0_0_1_0_1_1.wav", "1_1_1_1_0_0_0_0.wav"):
        sf.write(folder / name, 0.1 * rng.standard_normal(6 * 8000).astype(np.float32), 8000)
    x, y = load_yesno(folder)
    assert x.shape == (2, 257, 40) and torch.isfinite(x).all()
    assert y.tolist() == [[0, 1, 0, 0, 1, 0, 1, 1], [1, 1, 1, 1, 0, 0, 0, 0]]
    with pytest.raises(ZooError):
        labels_from_name("yes_no.wav")


@pytest.mark.parametrize("dataset", ["cifar10", "imdb", "yesno"])
def test_missing_real_data_is_one_clear_line(tmp_path, dataset):
    with pytest.raises(ZooError) as err:
        load_dataset(dataset, "real", str(tmp_path), str(tmp_path))
    msg = str(err.value)
    assert "\n" not in msg and "source=synthetic" in msg and str(tmp_path) in msg


def test_bad_source_is_one_clear_line(tmp_path):
    with pytest.raises(ZooError, match="unknown data source"):
        load_dataset("cifar10", "fake", str(tmp_path), str(tmp_path))


def test_synthetic_shapes_and_determinism():
    x, y = synthetic_cifar10(n=64)
    assert x.shape == (64, 3, 32, 32) and x.dtype == torch.uint8 and y.max() < 10
    assert torch.equal(x, synthetic_cifar10(n=64)[0])
    ids, lab = synthetic_imdb(n=16, max_len=50)
    assert ids.shape == (16, 50) and set(lab.tolist()) <= {0, 1}
    a, b = synthetic_yesno(n=3)
    assert a.shape == (3, 257, 40) and b.shape == (3, 8)
    m = synthetic_montezuma(n=40)
    assert m[10][0].shape == (4, 84, 84) and m[10][0].dtype == torch.uint8 and 0 <= int(m[10][1]) < 18


def test_mel_features():
    fb = mel_filterbank(256, 40, 8000)
    assert fb.shape == (40, 129) and (fb >= 0).all() and (fb.sum(1) > 0).all()
    assert log_mel(torch.randn(8000)).shape == (41, 40)


def test_frame_stacks_restart_at_episode_start():
    idx = stack_index(torch.tensor([True, False, False, True, False]))
    assert idx.tolist() == [[0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 2], [3, 3, 3, 3], [3, 3, 3, 4]]


def test_scripted_expert_is_deterministic():
    xs = [77, 77, 60, 40, 21, 21, 21] + [21] * 50
    runs = []
    for _ in range(2):
        ex = ScriptedExpert()
        runs.append([ex.act(np.array([0] * 42 + [x])) for x in xs])
    assert runs[0] == runs[1] and all(0 <= a < 18 for a in runs[0])


def test_data_order_file_keeps_the_data_set_order_and_default_shuffles(monkeypatch):
    from tasks_zoo import registry

    base = registry.load_zoo_config("ALSTM_Text_1")
    assert registry.data_order(base) == "file"  # the text families read IMDB as Table 6 did (README: text families)
    assert registry.data_order(registry.load_zoo_config("CNN_Cifar10")) == "shuffled"  # the default
    base.pop("data_order")
    monkeypatch.setattr(registry, "load_zoo_config", lambda fam: base)
    ds = load_dataset("imdb", "synthetic", "unused", "unused")
    _, loader = registry.build_task("ALSTM_Text_1", seed=0, batch_size=4, lr=1e-3)
    assert not torch.equal(next(iter(loader))[0], ds.x[:4])
    monkeypatch.setattr(registry, "load_zoo_config", lambda fam: OmegaConf.merge(base, {"data_order": "file"}))
    _, loader = registry.build_task("ALSTM_Text_1", seed=0, batch_size=4, lr=1e-3)
    batches = iter(loader)
    assert torch.equal(next(batches)[0], ds.x[:4]) and torch.equal(next(batches)[0], ds.x[4:8])
    monkeypatch.setattr(registry, "load_zoo_config", lambda fam: OmegaConf.merge(base, {"data_order": "sorted"}))
    with pytest.raises(ZooError, match="unknown data_order 'sorted'"):
        registry.build_task("ALSTM_Text_1", seed=0, batch_size=4, lr=1e-3)

"""The LIC authors' protocol (vlbias_nb.papers.lic.lic_protocol): settings read from the resource file, the tokeniser
against the released vocabularies, the classifier's shapes, and the unit store (keying, skip on rerun, atomic write,
a changed parameter gives a new key)."""
import json, os, random
from pathlib import Path
import numpy as np
import pytest
import torch
import yaml
from vlbias_nb.resources import resource_path
from vlbias_nb.paths import atomic_path
from vlbias_nb.papers.lic import lic_protocol as lp
from vlbias_nb.data.releases import has_release

needs_release = pytest.mark.skipif(not has_release("lic"), reason="needs the LIC release (VLBIAS_DATA/lic/bias_data)")

def test_settings_come_from_the_resource_file():
    raw = yaml.safe_load(resource_path("lic/authors_lstm.yaml").read_text())
    assert lp.AUTHORS_LSTM == raw
    c, t = raw["classifier"], raw["training"]
    assert (c["embedding_dim"], c["hidden_dim"], c["n_layers"], c["bidirectional"], c["dropout"], c["output_dim"]) == (100, 256, 2, True, 0.5, 1)
    assert (t["learning_rate"], t["batch_size"], t["num_epochs"], raw["split"]["test_ratio"]) == (5e-5, 64, 20, 0.1)
    assert lp.PAPER_SEEDS == (0, 12, 456, 789, 100, 200, 300, 400, 500, 1234)

def test_classifier_shapes_follow_the_settings():
    m = lp.AuthorsRNN(50, 100, 256, 1, 2, True, 0.5, 1)
    assert m.rnn.hidden_size == 256 and m.rnn.num_layers == 2 and m.rnn.bidirectional and m.fc.in_features == 512 and m.fc.out_features == 1
    text = torch.tensor([[2, 3, 4], [5, 6, 1], [7, 1, 1]])                      # [len 3, batch 3], lengths 3, 2, 1
    out = m.eval()(text, torch.tensor([3, 2, 1]))
    assert out.shape == (3, 1)
    # packing: a padded sequence scores as it does alone
    alone = m(torch.tensor([[3], [6]]), torch.tensor([2]))
    assert torch.allclose(out[1], alone[0], atol=1e-6)

def test_vocabulary_and_batches_replay_torchtext():
    v = lp.AuthorsVocab([["b", "a"], ["a", "c", "c"]])
    assert v.itos == ["<unk>", "<pad>", "a", "c", "b"]                         # freq 2 (a, c: alphabetical), then b
    lens = list(np.random.default_rng(0).integers(1, 9, 300))
    bs, _ = lp.bucket_batches(lens, 64, random.Random(0).getstate())
    assert sorted(i for b in bs for i in b) == list(range(300)) and [len(b) for b in bs].count(64) == 4

def test_split_is_the_authors_procedure():
    ents = [(k, "Female" if k % 4 == 0 else "Male") for k in range(200)]     # 50 women: 5 test, 45 train each
    tr, te, _ = lp.authors_split(ents, "gender", 456)
    assert (len(tr), len(te)) == (90, 10) and sum(k % 4 == 0 for k in te) == 5
    random.seed(456); m = [e for e in ents if e[1] == "Male"]; f = [e for e in ents if e[1] == "Female"]
    a = [m.pop(random.randrange(len(m)))[0] for _ in range(45)] + [f.pop(random.randrange(len(f)))[0] for _ in range(45)]
    b = [m.pop(random.randrange(len(m)))[0] for _ in range(5)] + [f.pop(random.randrange(len(f)))[0] for _ in range(5)]
    random.shuffle(a); random.shuffle(b)
    assert (tr, te) == (a, b)

def test_tokeniser_keeps_punctuation_and_possessive():
    assert lp.authors_tokens("A man's dog, on a tv.") == ["A", "genderword", "'s", "dog", ",", "on", "a", "tv", "."]
    assert lp.authors_tokens("Two Women talk", "skin") == ["Two", "Women", "talk"]
    assert lp.authors_tokens("Two WOMEN talk", human=True) == ["two", "genderword", "talk"]

@needs_release
@pytest.mark.parametrize("captioner", ["NIC", "OSCAR", "Transformer"])
def test_tokeniser_reproduces_the_released_vocabulary(captioner):
    "Each released vocabulary (spaCy tokens of a split of the captioner's masked captions) is covered by our tokens of its captions."
    V = lp.released_vocabulary(captioner)
    ours = {t for r in lp.released_entries(captioner, "gender") for t in lp.authors_tokens(r[3], "gender")}
    missing = V - ours - {"<unk>", "<pad>", "cowboy"}     # 'cowboy': unmasked in the released files (an older mask list)
    assert not missing, sorted(missing)[:10]
    assert "genderword" in V & ours
    if captioner == "NIC": assert {"'s", ".", "<", ">"} <= V                # NIC's vocabulary shows spaCy's tokens

def _fake_unit(monkeypatch, calls):
    "A unit whose run is a counted stub (the store is what is under test)."
    monkeypatch.setattr(lp, "unit_data", lambda u: {"files": {"lic:f.pkl": "00"}})
    def run(u, device="cpu", epochs=None, max_images=0):
        calls.append(u); return {"LIC": 40.0 + u.seed, "n_train": 1, "n_test": 1}
    monkeypatch.setattr(lp, "run_unit", run)
    return lp.LICUnit("NIC", "gender", "model", 0)

def test_store_skips_finished_units(tmp_path, monkeypatch):
    calls = []; u = _fake_unit(monkeypatch, calls)
    r1 = lp.finish_unit(u, tmp_path); r2 = lp.finish_unit(u, tmp_path)
    assert len(calls) == 1 and r1["LIC"] == r2["LIC"] == 40.0
    files = list(tmp_path.rglob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["key"] == r1["key"] and not list(tmp_path.rglob("*.claim"))

def test_changed_parameter_or_data_gives_a_new_key(tmp_path, monkeypatch):
    calls = []; u = _fake_unit(monkeypatch, calls)
    k0 = lp.finish_unit(u, tmp_path)["key"]
    k1 = lp.finish_unit(u, tmp_path, epochs=2)["key"]
    monkeypatch.setattr(lp, "unit_data", lambda u: {"files": {"lic:f.pkl": "01"}})
    k2 = lp.finish_unit(u, tmp_path)["key"]
    assert len({k0, k1, k2}) == 3 and len(calls) == 3 and len(list(tmp_path.rglob("*.json"))) == 3

def test_killed_write_leaves_no_record(tmp_path, monkeypatch):
    calls = []; u = _fake_unit(monkeypatch, calls)
    def boom(path, obj): 
        with atomic_path(path) as tmp:
            Path(tmp).write_text('{"LIC": 1')                                 # half a file, then killed
            raise KeyboardInterrupt
    monkeypatch.setattr(lp, "write_json_atomic", boom)
    with pytest.raises(KeyboardInterrupt): lp.finish_unit(u, tmp_path)
    assert not list(tmp_path.rglob("*.json")) and not list(tmp_path.rglob("*.part")) and not list(tmp_path.rglob("*.claim"))

def test_a_unit_claimed_by_a_live_process_is_left_alone(tmp_path, monkeypatch):
    calls = []; u = _fake_unit(monkeypatch, calls)
    key, _ = lp.unit_key(u, {"lic:f.pkl": "00"})
    p = lp.unit_path(u, key, tmp_path); p.parent.mkdir(parents=True)
    p.with_suffix(".claim").write_text(str(os.getppid()))
    assert lp.finish_unit(u, tmp_path) is None and not calls

def test_tiny_protocol_run_end_to_end(tmp_path):
    "The one-command path (CPU here, `--device cuda --jobs N` on a GPU) at tiny scale: two units in two worker processes."
    if not has_release("lic"): pytest.skip("needs the LIC release")
    units = [lp.LICUnit("FC", "skin", "model", s) for s in lp.PAPER_SEEDS[:2]]
    recs = lp.run_protocol(units, tmp_path, "cpu", jobs=2, epochs=1, max_images=400)
    assert [r["seed"] for r in recs] == [0, 12] and all(0 <= r["LIC"] <= 100 for r in recs)
    assert len(lp.stored_units(tmp_path)) == 2
    again = lp.run_protocol(units, tmp_path, "cpu", jobs=1, epochs=1, max_images=400)
    assert [r["LIC"] for r in again] == [r["LIC"] for r in recs]

"""The LIC release reader (vlbias_nb.data.lic_release): planted pickles in the released layout, the restricted unpickler
through the reader, and the paper's §5 counts on the real files (skipped without the shared data)."""
import os, pickle
import pytest
from vlbias_nb.paths import InputFormatError, MissingDataError
from vlbias_nb.data.releases import has_release
from vlbias_nb.data.lic_release import (PAPER_CAPTIONERS, LIC_CAPTIONERS, lic_caption_file, load_lic_captions, lic_labels,
                                        load_lic_vocabulary, lic_counts, balanced_split_sizes)

def _rec(i, pred, g="Male", s="Light", split="train"):
    return {"img_id": i, "pred": pred, "bb_gender": g, "bb_skin": s, "race": f"['{s}']", "ratio": "[0.3]", "split": split}

@pytest.fixture
def planted(tmp_path):
    "A release folder with NIC's gender and skin-tone files and its vocabulary, in the authors' layout."
    recs = [_rec(1, "a man riding a horse"), _rec(2, "a woman with an umbrella", "Female", "Dark", "val"),
            _rec(3, "a girl eating", "Female", "Both"), _rec(4, "a man on a bench", "Male", "Dark", "val"), _rec(5, "a boy", "Male", "Unsure")]
    for att in ("gender", "skin"):
        p = tmp_path / lic_caption_file("NIC", att)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(pickle.dumps(recs))
    (tmp_path / "model_vocab").mkdir()
    (tmp_path / "model_vocab" / "nic_vocab.pkl").write_bytes(pickle.dumps(["<unk>", "<pad>", "a", "genderword", "horse"]))
    return tmp_path

def test_mapping_names_the_paper_s_nine_and_every_released_file():
    assert PAPER_CAPTIONERS == ["NIC", "SAT", "FC", "Att2in", "UpDn", "Transformer", "OSCAR", "NIC+", "NIC+Equalizer"]
    assert LIC_CAPTIONERS.loc["OSCAR", "stem"] == "cider_oscar" and LIC_CAPTIONERS.loc["NIC+Equalizer", "stem"] == "snowboard"
    from vlbias_nb.data.releases import release_checksums
    files = set(release_checksums("lic"))
    named = {lic_caption_file(n) for n in LIC_CAPTIONERS.index} | {lic_caption_file(n, "skin") for n in LIC_CAPTIONERS.index[LIC_CAPTIONERS.race == "yes"]}
    assert named <= files
    assert {f for f in files if not f.startswith("model_vocab/")} == named          # every released caption file has a name

def test_reader_on_planted_files(planted):
    g = load_lic_captions("NIC", root=planted)
    assert lic_labels(g) == {1: "male", 2: "female", 3: "female", 4: "male", 5: "male"}
    assert lic_labels(load_lic_captions("NIC", "skin", planted), "skin") == {1: "lighter", 2: "darker", 4: "darker"}   # Both, Unsure: no label
    assert lic_labels(g, split="val") == {2: "female", 4: "male"}
    assert load_lic_vocabulary("NIC", planted)[3] == "genderword"
    c = lic_counts("NIC", planted).set_index(["attribute", "quantity"]).images
    assert (c["gender", "male"], c["gender", "female"], c["skin", "labelled images"]) == (3, 2, 3)
    assert (c["gender", "balanced train images"], c["gender", "balanced test images"]) == balanced_split_sizes({"m": 3, "f": 2}) == (4, 0)
    with pytest.raises(MissingDataError, match="gender_val_sat_cap_mw_entries.pkl"):
        load_lic_captions("SAT", root=planted)

def test_reader_refuses_a_pickle_that_would_run_code(planted, tmp_path):
    marker = tmp_path / "ran"
    class RunsCode:
        def __reduce__(self): return (os.system, (f"touch {marker}",))
    (planted / lic_caption_file("NIC")).write_bytes(pickle.dumps([RunsCode()]))
    with pytest.raises(InputFormatError, match="refused to load"):
        load_lic_captions("NIC", root=planted)
    assert not marker.exists()

def test_reader_refuses_malformed_files(planted):
    p = planted / lic_caption_file("NIC")
    for bad, msg in [([{"img_id": 1}], "lacks one of"), ([_rec(1, "a"), _rec(1, "b")], "has 2 records"), ("text", "non-empty list")]:
        p.write_bytes(pickle.dumps(bad))
        with pytest.raises(InputFormatError, match=msg) as e:
            load_lic_captions("NIC", root=planted)
        assert str(p) in str(e.value)

@pytest.mark.skipif(not has_release("lic"), reason="the LIC release is not here (set VLBIAS_LIC_RELEASE or VLBIAS_DATA)")
def test_section_5_counts_on_the_release():
    c = lic_counts("NIC").set_index(["attribute", "quantity"]).images
    assert (c["gender", "labelled images"], c["gender", "male"], c["gender", "female"]) == (10780, 7466, 3314)
    assert (c["skin", "labelled images"], c["skin", "lighter"], c["skin", "darker"]) == (10969, 9873, 1096)
    assert (c["gender", "balanced train images"], c["gender", "balanced test images"]) == (5966, 662)
    assert (c["skin", "balanced train images"], c["skin", "balanced test images"]) == (1972, 220)
    assert (c["gender", "records (COCO 2017 val subset)"], c["skin", "records (COCO 2017 val subset)"]) == (1312, 1360)
    for n in PAPER_CAPTIONERS:                                  # every captioner's gender file: the same images and labels
        assert lic_labels(load_lic_captions(n)) == lic_labels(load_lic_captions("NIC"))

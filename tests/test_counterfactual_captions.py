import json
import pytest
from conftest import requires_shared
from vlbias_nb.paths import shared_path
from vlbias_nb.papers.social_counterfactuals.counterfactual_captions import (caption_sets, load_released_sets, compare_caption_sets, RELEASED_FILES,
                                               with_article, caption_counts, counterfactual_sets, paper_counts, SEGMENTS,
                                               CAPTION_FILE_ATTRIBUTES, PHYSICAL_CHARACTERISTICS, CAPTION_FILE_PHYSICAL)

@pytest.mark.parametrize("segment", list(RELEASED_FILES))
def test_reproduces_released_sets_exactly(segment):
    rel = RELEASED_FILES[segment]
    if not shared_path(rel, required=False).exists(): pytest.skip(f"{rel} absent (set VLBIAS_DATA)")
    res = compare_caption_sets(caption_sets(segment, attributes=CAPTION_FILE_ATTRIBUTES), load_released_sets(f"shared:{rel}"))
    assert res["identical"], res["mismatches"]
    assert res["sets_equal"] == 1044 and res["n_sets_ours"] == 1044
    assert res["captions_equal"] == 1044 * (12 if segment == "race_gender" else 28)

@requires_shared("socialcounterfactuals/race_gender_occupation.jsonl")
def test_released_lines_match_records():
    "Each released line, read directly, equals our set record (caption, output_i, filename)."
    sets = counterfactual_sets(caption_sets("race_gender"))
    lines = shared_path(RELEASED_FILES["race_gender"]).read_text().splitlines()
    for s, line in zip(sets, lines):
        d = json.loads(line)
        assert [d["caption"]] + [d[f"output_{i}"] for i in range(1, 12)] == s["captions"]
        assert d["filename"] == s["filename"]

def test_articles_and_hand_examples():
    cs = caption_sets("physical_race", occupations=["doctor"], prefixes=["A photo of a"])
    assert len(cs) == 5 * 6                                   # the released data set's 5 traits × 6 races (Tab. 1: 30)
    assert cs.caption.iloc[0] == "A photo of a skinny White doctor"
    assert cs.caption.iloc[12] == "A photo of an obese White doctor"
    cf = caption_sets("physical_race", occupations=["doctor"], prefixes=["A photo of a"], attributes=CAPTION_FILE_ATTRIBUTES)
    assert len(cf) == 14 * 6 and cf.caption.iloc[0] == "A photo of an attractive White doctor"   # the caption file's 14
    assert "A photo of an old Asian doctor" in set(cs.caption)
    assert cs.filename.iloc[0] == "a_photo_of_physical_race_doctor"
    assert with_article("a", "unattractive female nurse") == "an unattractive female nurse"
    assert with_article("a", "Middle Eastern male nurse") == "a Middle Eastern male nurse"

def test_paper_counts_and_custom_lists():
    p = paper_counts()
    assert caption_counts(260, 4, 6, 5, 2) == dict(n_captions=p["n_captions"], n_sets=p["n_sets"])
    cs = caption_sets("race_gender", occupations=["pilot", "chef"], attributes={"race": ["Asian", "Black"]})
    assert len(cs) == 2 * 4 * 4 and cs["set_index"].nunique() == 8
    with pytest.raises(ValueError, match="occupations"): caption_sets("race_gender", occupations=[])
    with pytest.raises(KeyError, match="segment"): caption_sets("age_race")

def test_load_released_bad_file(tmp_path):
    p = tmp_path / "x.jsonl"; p.write_text(json.dumps({"caption": "a"}) + "\n")
    with pytest.raises(ValueError, match="filename"): load_released_sets(p)
    with pytest.raises(FileNotFoundError): load_released_sets(tmp_path / "missing.jsonl")

@pytest.mark.parametrize("segment, n", [("race_gender", 12), ("physical_gender", 4), ("physical_race", 12)])
def test_every_segment_generates_sets_with_a_smoke_subset(segment, n):
    "All three segments make their sets (physical × race too, whose released file is absent); positions run 0..n-1."
    attrs = {"physical": ["young", "old"]}
    sets = counterfactual_sets(caption_sets(segment, occupations=["doctor", "nurse"], prefixes=["a", "A photo of a"], attributes=attrs))
    assert len(sets) == 4 and all(len(s["captions"]) == n == len(set(s["captions"])) for s in sets)
    assert sets[0]["filename"] == f"{segment}_doctor" and sets[1]["filename"] == f"a_photo_of_{segment}_doctor"
    if segment == "physical_race":
        assert sets[1]["captions"][6] == "A photo of an old White doctor"

def test_physical_characteristics_are_the_released_data_sets_five():
    "The project's physical list is the released data set's 5 traits, a subset of the caption file's 14 in the same order."
    assert PHYSICAL_CHARACTERISTICS == ["skinny", "young", "obese", "tattooed", "old"]
    idx = [CAPTION_FILE_PHYSICAL.index(p) for p in PHYSICAL_CHARACTERISTICS]
    assert idx == sorted(idx) and len(CAPTION_FILE_PHYSICAL) == 14
    assert caption_counts(260, 4, 6, len(PHYSICAL_CHARACTERISTICS), 2) == dict(n_captions=54_080, n_sets=3_120)

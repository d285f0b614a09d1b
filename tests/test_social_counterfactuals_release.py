"""The reader of the released SocialCounterfactuals data set's metadata (vlbias_nb.data.social_counterfactuals_release):
planted files in the released layout, each kind of damage named in one error, and Tab. 1's counts on the real files."""
import numpy as np
import pandas as pd
import pytest
from vlbias_nb.paths import MissingDataError, InputFormatError
from vlbias_nb.data.releases import has_release
from vlbias_nb.data.social_counterfactuals_release import (read_release_segment, read_release, release_layout, planted_release_rows,
                                                           RELEASE_FILES, RELEASE_NAME)

def _write(tmp_path, segment, edit=None, **kw):
    t = planted_release_rows(segment, **kw)
    if edit: edit(t)
    t.to_csv(tmp_path / RELEASE_FILES[segment], index=False)
    return t

@pytest.mark.parametrize("segment, k, cols", [("race_gender", 12, list(range(12))),
                                               ("physical_gender", 10, [10, 11, 12, 13, 20, 21, 24, 25, 26, 27]),
                                               ("physical_race", 30, [30 + i for i in range(12)] + [60 + i for i in range(6)] + [72 + i for i in range(12)])])
def test_planted_files_in_the_released_layout(tmp_path, segment, k, cols):
    "Each segment's columns are the caption-file positions of the data set's 5 traits; sets and images typed and parsed."
    assert release_layout(segment).column.tolist() == [f"caption_{i}" for i in cols]
    t = _write(tmp_path, segment, occupations=("plumber", "Civil Engineer", "electrician"), prefix_slug="an_image_of", seed=3)
    r = read_release_segment(segment, tmp_path)
    assert len(r.sets) == 3 and len(r.images) == 3 * k and (r.sets.n_images == k).all()
    assert r.sets.seed.tolist() == t.seed.tolist() and r.sets.dtypes["seed"] == np.int64 and r.sets.dtypes["rank"] == np.int64
    np.testing.assert_allclose(r.sets.cfg_scale, t.cfg_scale)
    assert r.sets.occupation.tolist() == ["plumber", "civil engineer", "electrician"] and r.sets.subject[1] == "Civil Engineer"
    assert (r.sets.prefix == "An image of a").all()
    assert r.images.position.tolist() == list(range(k)) * 3
    first = r.images.iloc[0]
    assert first.caption == f"An image of a {first.a1} {first.a2} plumber"

def test_hand_written_rows(tmp_path):
    "Two rows written by hand as the authors' files spell them (bare prefix 'a', an article before a vowel)."
    cols = release_layout("physical_gender").column.tolist()
    traits = [("skinny", "a"), ("young", "a"), ("obese", "an"), ("tattooed", "a"), ("old", "an")]
    caps = [f"{art} {t} {g} Carpenter" for t, art in traits for g in ("male", "female")]
    rows = pd.DataFrame([dict(seed=3918439167, p2p_threshold=0.864, cfg_scale=14.5, filename="physical_gender_carpenter", rank=0,
                              **dict(zip(cols, caps)))])
    rows.to_csv(tmp_path / "metadata_physical_gender.csv", index=False)
    r = read_release_segment("physical_gender", tmp_path)
    assert r.sets[["seed", "prefix", "occupation", "subject"]].values.tolist() == [[3918439167, "a", "carpenter", "Carpenter"]]
    assert r.images.caption[4] == "an obese male Carpenter" and r.images.a1[4] == "obese" and r.images.a2[5] == "female"

@pytest.mark.parametrize("edit, match", [
    (lambda t: t.drop(columns="caption_3", inplace=True), r"missing column\(s\) \['caption_3'\]"),
    (lambda t: t.__setitem__("seed", ["7", "x"]), "line 3: seed 'x' is not an integer"),
    (lambda t: t.__setitem__("cfg_scale", [-1.0, 9.0]), "line 2: cfg_scale -1.0 is outside"),
    (lambda t: t.__setitem__("filename", ["a_picture_of_age_gender_plumber", "x"]), "line 2: filename 'a_picture_of_age_gender_plumber'"),
    (lambda t: t.__setitem__("caption_5", ["A picture of an Indian male plumber"] * 2), "line 2: caption_5"),
    (lambda t: t.__setitem__("caption_7", ["A picture of a Asian female plumber"] * 2), "line 2: caption_7"),
])
def test_damaged_files_fail_naming_file_and_line(tmp_path, edit, match):
    _write(tmp_path, "race_gender", edit)
    with pytest.raises(InputFormatError, match=match) as e: read_release_segment("race_gender", tmp_path)
    assert "metadata_race_gender.csv" in str(e.value)

def test_missing_file_names_it(tmp_path):
    with pytest.raises(MissingDataError, match="metadata_physical_race.csv"): read_release_segment("physical_race", tmp_path)
    with pytest.raises(KeyError, match="age_gender"): read_release_segment("age_gender", tmp_path)

@pytest.mark.skipif(not has_release(RELEASE_NAME), reason="needs the released metadata ($VLBIAS_SC_RELEASE / VLBIAS_DATA)")
def test_real_release_is_tab1():
    "The released metadata holds Tab. 1's kept sets and images per set; p and the CFG scale lie in Brooks et al.'s ranges."
    rel = read_release()
    assert {s: (len(r.sets), len(r.images)) for s, r in rel.items()} == {
        "race_gender": (7936, 95_232), "physical_gender": (5052, 50_520), "physical_race": (836, 25_080)}
    for r in rel.values():
        assert r.sets.p2p_threshold.between(0.1, 0.9).all() and r.sets.cfg_scale.between(7.5, 15).all()
        assert r.sets.seed.is_unique

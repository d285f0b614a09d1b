import numpy as np
import pandas as pd
import pytest
from vlbias_nb.intersectional_probing import *
from vlbias_nb.paths import MissingDataError

def test_clip_filter_on_planted_scores():
    rng = np.random.default_rng(0)
    ti = rng.uniform(0.25, 0.4, (50, 12)); ii = np.full((50, 12, 12), 0.5)
    bad_t, bad_i = [3, 17], [8, 40]
    ti[3, 5] = 0.19; ti[17, 0] = 0.0
    ii[8, 2, 7] = ii[8, 7, 2] = 0.2; ii[40, 0, 11] = ii[40, 11, 0] = -0.1
    keep = clip_similarity_keep(ti, ii)
    assert set(np.flatnonzero(~keep)) == set(bad_t + bad_i)
    ti[5, 0] = 0.2; assert clip_similarity_keep(ti, ii)[5]     # >= 0.2 passes for text-image

def test_nsfw_and_detectability_on_planted():
    s = np.zeros((10, 4)); s[[2, 7], 1] = 0.8
    assert set(np.flatnonzero(~nsfw_keep(s))) == {2, 7}
    rng = np.random.default_rng(1); n = rng.integers(0, 13, 300)
    tau, tab = fit_detectability_threshold(n, n >= 8)
    assert tau == 8 and tab.agreement.max() == 1.0
    lab = pd.DataFrame(dict(segment="s", attribute_type=np.repeat(["race", "gender"], 300), n_detected=np.tile(n, 2),
                            human_keep=np.r_[n >= 8, n >= 11]))
    assert fit_detectability_thresholds(lab) == {("s", "gender"): 11, ("s", "race"): 8}
    kt = keep_rate_table({"a": [1, 1, 0, 1], "b": [1, 0, 1, 1]}, 12)
    assert kt.sets_kept.tolist() == [3, 2] and kt.images_kept.tolist() == [36, 24]
    with pytest.raises(ValueError): fit_detectability_threshold([1, 2], [True])

@pytest.mark.parametrize("m", [2, 3, 4])
def test_planted_preference_recovered(m):
    subjects = [f"o{i}" for i in range(8)]
    fav = {"o1": (5, m), "o6": (11, m)}
    pl = planted_probe_embeddings(subjects, n_values=12, n_sets=m, favoured=fav, seed=m)
    ms = intersectional_max_skew(pl["text_emb"], pl["image_emb"], pl["image_subject"], pl["codes"], range(8), 12)
    pr = retrieval_proportions(pl["text_emb"], pl["image_emb"], pl["image_subject"], pl["codes"], range(8), 12, k=12)
    np.testing.assert_allclose(ms[[1, 6]], np.log(m))
    assert pr[1, 5] == pr[1].max() and pr[6, 11] == pr[6].max()   # favoured pair is (one of) the most retrieved
    np.testing.assert_allclose(pr[[1, 6], [5, 11]], m / 12)

def test_max_skew_brute_force():
    rng = np.random.default_rng(0)
    T = rng.normal(size=(3, 8)); V = rng.normal(size=(60, 8))
    subj = rng.integers(0, 3, 60); codes = rng.integers(0, 4, 60)
    got = intersectional_max_skew(T, V, subj, codes, [0, 1, 2], n_values=4)
    for q in range(3):
        pool = np.flatnonzero(subj == q); top = pool[np.argsort(-(V[pool] @ T[q]))[:4]]
        d = np.bincount(codes[pool], minlength=4) / len(pool); p = np.bincount(codes[top], minlength=4) / 4
        with np.errstate(divide="ignore"): ref = np.max(np.where(d > 0, np.log(p) - np.log(d), -np.inf))
        assert np.isclose(got[q], ref)

def test_marginal_and_split_and_hooks():
    pl = planted_probe_embeddings(["a", "b"], n_values=12, n_sets=3, favoured={"a": (4, 3)}, seed=0)  # code 4 = race 2, male
    c = pl["codes"]
    ms = marginal_max_skew(pl["text_emb"], pl["image_emb"], pl["image_subject"], c // 2, c % 2, [0, 1], 2, a1_value=2)
    assert np.isclose(ms[0], np.log(2))              # top 2 among race 2 are both male
    tr, te = split_occupations([f"o{i}" for i in range(20)], 0.2, seed=1)
    assert len(te) == 4 and not set(tr) & set(te)
    assert neutral_prompts("engineer", ["A photo of a"]) == ["A photo of an engineer"]
    with pytest.raises(MissingDataError, match="VLBIAS_DATA"): real_benchmark_path("pata")
    with pytest.raises(MissingDataError, match="NSFW"): load_nsfw_classifier("no-such/model-xyz")

def test_real_benchmark_loaders_on_tiny_files(tmp_path):
    "VisoGender/PATA loaders read the authors' layouts; missing files name the path and what to download."
    import pytest
    from PIL import Image
    from vlbias_nb.intersectional_probing import load_visogender, load_pata
    from vlbias_nb.paths import MissingDataError
    (tmp_path / "OO").mkdir(); (tmp_path / "images").mkdir()
    (tmp_path / "OO" / "OO_Visogender_02102023.tsv").write_text(
        "IDX\tSector\tSpecialisation\tOccupation\tObject\tURL\tLICENSE OK?\tOccupation_Gender\n"
        "OO_1\tedu\tx\tteacher\tboard\thttp://u/1\tYes\twoman\nOO_2\tedu\tx\tbaker\tspoon\thttp://u/2\tYes\tman\n")
    with pytest.raises(MissingDataError, match="images"): load_visogender(tmp_path)
    Image.new("RGB", (8, 8)).save(tmp_path / "images" / "OO_2.png")
    vg = load_visogender(tmp_path)
    assert vg[["occupation", "gender", "context"]].values.tolist() == [["baker", "male", "OO"]]
    with pytest.raises(MissingDataError, match=str(tmp_path / "pata_fairness.files.lst")): load_pata(tmp_path)
    (tmp_path / "pata_fairness.files.lst").write_text("fashion_show_indian_male_young|http://a\nbad_line|http://b\n")
    with pytest.raises(ValueError, match="line 2"): load_pata(tmp_path)

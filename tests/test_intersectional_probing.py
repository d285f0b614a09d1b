import numpy as np
import pandas as pd
import pytest
from vlbias_nb.papers.social_counterfactuals.intersectional_probing import *
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
    from vlbias_nb.papers.social_counterfactuals.intersectional_probing import load_visogender, load_pata
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

# --- segments, smoke calibration, keep rates beside the paper, planted debiasing, default models -----------------

@pytest.mark.parametrize("segment, a1, a2, codes", [
    ("race_gender", ["White", "Asian", "Latino", "Middle Eastern"], ["male", "female", "female", "male"], [0, 7, 11, 8]),
    ("physical_gender", ["skinny", "young", "old", "obese"], ["male", "female", "female", "male"], [0, 3, 9, 4]),
    ("physical_race", ["skinny", "young", "old", "tattooed"], ["Black", "Latino", "White", "Asian"], [1, 11, 24, 21]),
])
def test_attribute_codes_hand_examples(segment, a1, a2, codes):
    "Code = index(a1)·|A2| + index(a2) in the segment's lists (§4.1), by hand for each segment; K = |A1|·|A2|."
    from vlbias_nb.papers.social_counterfactuals.intersectional_probing import attribute_codes, pair_labels, segment_values
    assert attribute_codes(segment, a1, a2).tolist() == codes
    A1, A2 = segment_values(segment)
    assert len(pair_labels(segment)) == len(A1) * len(A2) == {"race_gender": 12, "physical_gender": 10, "physical_race": 30}[segment]   # Tab. 1
    assert [pair_labels(segment)[c] for c in codes] == [f"{x} {y}" for x, y in zip(a1, a2)]

@pytest.mark.parametrize("segment", ["race_gender", "physical_gender", "physical_race"])
def test_attribute_codes_are_set_positions(segment):
    "With the smoke subset of physical characteristics too, an image's code is its position in the counterfactual set."
    from vlbias_nb.papers.social_counterfactuals.counterfactual_captions import caption_sets
    from vlbias_nb.papers.social_counterfactuals.intersectional_probing import attribute_codes
    for attrs in (None, {"physical": ["young", "old"]}):
        cs = caption_sets(segment, occupations=["nurse", "pilot"], prefixes=["a", "A photo of a"], attributes=attrs)
        assert attribute_codes(segment, cs.a1, cs.a2, attrs).tolist() == cs.position.tolist()
    with pytest.raises(ValueError, match="not attribute values"): attribute_codes(segment, ["nobody"], ["male"])

def test_marginal_by_value_hand_example():
    "Race 0's top 2 both male -> ln 2; race 1's top 2 one of each -> 0 (Fig. 4 per value of the first type)."
    x = np.array([.95, .9, .8, .7, .6, .5, .4, .3]); V = np.stack([x, np.sqrt(1 - x ** 2)], 1)
    out = marginal_max_skew_by_value(np.array([[1., 0]]), V, np.zeros(8, int), np.array([0, 0, 2, 1, 3, 1, 2, 3]), [0], 2, 2)
    np.testing.assert_allclose(out[:, 0], [np.log(2), 0.0])

def test_calibrated_thresholds_keep_the_stated_fraction():
    rng = np.random.default_rng(0)
    ti = rng.uniform(-0.4, 0.3, (40, 12)); ii = np.full((40, 12, 12), 0.999)     # like the tiny random models
    assert not clip_similarity_keep(ti, ii, 0.2).any()                             # the paper's 0.2 keeps none
    for f, n in ((0.8, 32), (0.5, 20), (0.25, 10), (1.0, 40)):
        assert clip_similarity_keep(ti, ii, calibrated_clip_threshold(ti, ii, f)).sum() == n
    assert threshold_for_keep_fraction([0.1, 0.3, 0.2, 0.4], 0.5) == pytest.approx(0.25)
    th = calibrated_detectability_thresholds({"race": np.arange(10), "gender": np.arange(10)[::-1]}, 0.49)   # 0.7 per type
    assert th == {"race": 2.5, "gender": 2.5}
    with pytest.raises(ValueError): threshold_for_keep_fraction([1.0], 1.5)

def test_keep_rates_beside_the_papers_numbers():
    kt = keep_rate_table({"CLIP similarity": [1, 1, 1, 0], "NSFW": [1, 1, 0, 1], "attribute detectability": [1, 0, 1, 1]}, 12)
    t = keep_rates_all_stages(kt, nsfw_image_removal=0.01)
    assert t.stage.tolist()[-1] == "all stages" and t.sets_kept.tolist() == [3, 2, 1, 1]
    assert t.iloc[-1].keep_rate == 0.25 and t.iloc[-1].sets_in == 4
    assert t.nsfw_image_removal.tolist()[1] == 0.01 and t.nsfw_image_removal.drop(1).isna().all()
    assert not any(c.startswith("paper") for c in t.columns)                 # the paper's numbers live in the comparison
    keep = pd.concat([t.assign(segment="physical_race", rule="calibrated"),
                      keep_rates_all_stages(kt, nsfw_image_removal=0.03).assign(segment="race_gender", rule="calibrated")])
    c = filter_vs_paper(keep, {"calibrated": "set by the keep fraction"}, nsfw_reason="tiny NSFW model")
    assert list(c.columns) == ["segment", "rule", "metric", "ours", "paper", "delta", "comparable", "reason", "n_segments"]
    r = c.set_index(["segment", "metric"])
    assert r.loc[("physical_race", "sets_kept"), ["ours", "paper", "delta"]].tolist() == [1, 836, -835]
    assert r.loc[("physical_race", "sets_in"), "paper"] == 104_000                 # 260 occupations × 4 prefixes × 100
    assert r.loc[("physical_race", "keep_rate"), "paper"] == pytest.approx(836 / 104_000)
    assert r.loc[("race_gender", "sets_kept"), "paper"] == 7936
    lo, hi = r.loc[(NSFW_RANGE, "nsfw_image_removal_min")], r.loc[(NSFW_RANGE, "nsfw_image_removal_max")]
    assert (lo.ours, lo.paper, hi.ours, hi.paper, hi.n_segments) == (0.01, 0.009, 0.03, 0.027, 2)   # our ends of the range beside the paper's
    assert hi.delta == pytest.approx(0.003)
    assert not c.comparable.any() and set(c.reason) == {"set by the keep fraction", "tiny NSFW model"}
    real = filter_vs_paper(keep, {"calibrated": ""})                          # no reason and no tiny model: comparable
    assert real.comparable.all() and (real.reason == "").all()
    with pytest.raises(ValueError, match="calibrated"): filter_vs_paper(keep, {})
    with pytest.raises(ValueError, match="rule"): filter_vs_paper(keep.drop(columns="rule"), {"calibrated": ""})
    assert paper_keep_rates("race_gender")["sets_kept"] == 7936 and paper_keep_rates("physical_gender")["sets_kept"] == 5052

def test_finetuning_on_planted_counterfactuals_reduces_withheld_max_skew():
    """§5 known answer: the shared prompt word carries a planted preference for one attribute pair, so every withheld
    occupation retrieves that pair's 4 images first (MaxSkew@6 = ln 4); contrastive fine-tuning on the balanced sets of
    the other occupations shrinks the planted component and MaxSkew@6 on the withheld occupations falls."""
    torch = pytest.importorskip("torch")
    d = planted_debiasing_data(n_subjects=20, n1=3, n2=2, n_sets=4, beta=1.0, seed=0)
    tr, te = split_occupations(d["subjects"], 0.2, seed=0)
    assert len(te) == 4 and not set(tr) & set(te)
    skew = lambda: withheld_max_skew(d["model"], te, [d["prefix"]], d["images"], d["image_subject"], d["codes"], d["n_values"])
    u = d["model"].word_vector("first0") + d["model"].word_vector("second0")
    planted_before = d["model"].word_vector("photo") @ u
    before = skew()
    np.testing.assert_allclose(before, np.log(4))
    idx = np.flatnonzero(np.isin(d["image_subject"], tr))
    assert not np.isin(d["image_subject"][idx], te).any()                          # withheld occupations never seen
    losses = finetune_contrastive(d["model"], [d["images"][i] for i in idx], [d["captions"][i] for i in idx], epochs=10,
                                  lr=3e-2, batch_size=24, seed=0, progress=False)
    after = skew()
    assert losses[-1] < losses[0]
    assert planted_before == pytest.approx(2.0) and d["model"].word_vector("photo") @ u < 1.4
    assert after.mean() <= 1.0 and before.mean() - after.mean() >= 0.38              # ln 4 = 1.386 -> at most 1.0
    assert (after <= before + 1e-9).all()
    unbiased = planted_debiasing_data(n_subjects=20, n1=3, n2=2, n_sets=4, beta=0.0, seed=0)
    floor = withheld_max_skew(unbiased["model"], te, [unbiased["prefix"]], unbiased["images"], unbiased["image_subject"],
                              unbiased["codes"], unbiased["n_values"])
    assert floor.mean() < 1.0                                                        # what no preference gives

def test_default_models_and_segments():
    "Smoke probes every tiny zoo model and all three segments; the full profile every zoo model the paper uses."
    from vlbias_nb.zoo.registry import MODEL_REGISTRY
    from vlbias_nb.run.parameters import analysis_notebooks, notebook_parameters
    from vlbias_nb.run.profiles import profile_overrides
    from vlbias_nb.papers.social_counterfactuals.counterfactual_captions import SEGMENTS
    params = notebook_parameters(analysis_notebooks()["social_counterfactuals"])
    tiny = [n for n, s in MODEL_REGISTRY.items() if s.random_init]
    assert params["models"].default == tiny and len(tiny) == 5
    assert params["segments"].default == list(SEGMENTS)
    full = profile_overrides("full", "social_counterfactuals", params)
    assert set(full["models"]) == {n for n, s in MODEL_REGISTRY.items() if "SocialCounterfactuals" in s.papers}
    assert full["models"][0] == "ViT-B-32/openai" and full["filter_keep_fraction"] == 0.0
    assert 0 < params["filter_keep_fraction"].default < 1 and params["clip_threshold"].default == 0.2

def test_seeds_derived_and_caller_stream_untouched():
    "The split draws from derive_seed(seed, 'withheld occupations'); fine-tuning is repeatable and leaves torch's global stream alone."
    import torch
    from vlbias_nb.seeds import numpy_rng
    subs = [f"o{i:02d}" for i in range(10)]
    perm = numpy_rng(3, "withheld occupations").permutation(10)
    assert split_occupations(subs, 0.2, seed=3)[1] == sorted(subs[i] for i in perm[:2])
    losses = []
    for _ in range(2):
        d = planted_debiasing_data(n_subjects=6, seed=0)
        torch.manual_seed(123)
        losses.append(finetune_contrastive(d["model"], d["images"], d["captions"], lr=1e-2, batch_size=8, seed=5, progress=False))
        after = torch.rand(3)
        torch.manual_seed(123); assert torch.equal(after, torch.rand(3))     # the caller's stream is where it was
    assert losses[0] == losses[1] and len(losses[0]) == 6 * 4 * 6 // 8       # 6 occupations × 4 sets × 6 pairs, batches of 8

def test_split_on_the_released_lists_has_no_twin_across():
    "Tab. 2 split on the released occupation lists: 261 entries, 244 strings, 181 occupations ignoring case; no overlap."
    from vlbias_nb.papers.social_counterfactuals.counterfactual_captions import segment_spec
    occ = segment_spec("race_gender")[2]
    keys = [occupation_key(o) for o in occ]
    assert (len(occ), len(set(occ)), len(set(keys))) == (261, 244, 181)
    assert len(occ) - len(set(occ)) == 17                                     # exact duplicates ("doctor" twice)
    assert len(set(occ)) - len(set(keys)) == 63                               # a second spelling ("doctor"/"Doctor")
    assert ("doctor" in occ and "Doctor" in occ)
    for seed in range(5):
        tr, te = split_occupations(occ, 0.2, seed=seed)
        assert not {occupation_key(o) for o in tr} & {occupation_key(o) for o in te}
        assert len({occupation_key(o) for o in te}) == round(0.2 * 181) == 36
        assert sorted(tr + te) == sorted(set(occ))                            # each distinct string once
    d = distinct_occupations(occ)
    assert len(d) == 181 and d[:2] == ["barber", "coach"]
    # the old split (case-sensitive strings, round(0.2 · 244) = 49 withheld) had twins on both sides
    u = sorted(set(occ)); perm = np.random.default_rng(0).permutation(len(u)); old_te = {u[i] for i in perm[:49]}
    assert {occupation_key(o) for o in old_te} & {occupation_key(o) for o in set(u) - old_te}

def test_chance_levels_hand_worked_and_at_the_papers_sizes():
    "Random-ranking MaxSkew@K: ln 2 / 3 for one pool of two complete 2-code sets (brute force over the 6 orders); the paper's sizes."
    from itertools import permutations
    orders = set(permutations([0, 1, 0, 1]))
    brute = np.mean([np.log(2) if o[0] == o[1] else 0.0 for o in orders])
    assert np.isclose(brute, np.log(2) / 3)
    assert abs(max_skew_chance([[0, 1, 0, 1]], 2, n_draws=20_000, seed=1).estimate - brute) < 0.01
    pcl = paper_chance_levels(n_draws=1000).set_index("segment")
    assert pcl.K.tolist() == [10, 30, 12] and np.allclose(pcl.sets_per_occupation, [5052 / 260, 836 / 260, 7936 / 260])
    assert abs(pcl.chance["race_gender"] - 1.01) < 0.03 and abs(pcl.chance["physical_gender"] - 0.96) < 0.03
    assert abs(pcl.chance_floor["physical_race"] - 0.97) < 0.03 and abs(pcl.chance_ceil["physical_race"] - 1.05) < 0.03

def test_detectability_labels_two_phases(tmp_path):
    "Phase 1 labels read and checked (one error naming the file each); phase 2 τ fitted on this run's detected counts."
    from vlbias_nb.paths import InputFormatError
    det = pd.DataFrame(dict(segment="physical_gender", attribute_type="gender", set_key=["a", "b", "c", "d"], n_detected=[4, 3, 1, 0]))
    f = tmp_path / "lab.csv"; f.write_text("segment,attribute_type,set_key,human_keep\n" + "".join(
        f"physical_gender,gender,{k},{y}\n" for k, y in zip("abcd", [1, 1, 0, 0])))
    assert fit_thresholds_to_labels(load_detectability_labels(f), det) == {("physical_gender", "gender"): 2}
    g = tmp_path / "other.csv"; g.write_text("segment,attribute_type,set_key,human_keep\nphysical_gender,gender,zz,1\n")
    with pytest.raises(InputFormatError, match="not sets of this run"): fit_thresholds_to_labels(load_detectability_labels(g), det, source=str(g))
    for name, text, msg in [("missing.csv", None, "not found"), ("cols.csv", "segment,set_key\nx,y\n", "lacks column"),
                            ("vals.csv", "segment,attribute_type,set_key,human_keep\ns,t,k,0.5\n", "must be 0"),
                            ("twice.csv", "segment,attribute_type,set_key,human_keep\ns,t,k,1\ns,t,k,0\n", "labelled twice")]:
        p = tmp_path / name
        if text is not None: p.write_text(text)
        with pytest.raises((InputFormatError, MissingDataError), match=msg) as e: load_detectability_labels(p)
        assert name in str(e.value)

def test_exact_chance_of_complete_sets_against_brute_force():
    "P(largest code count = t) among the top K of m complete sets, exact, against enumerating every K-subset (m=2, K=3)."
    from itertools import combinations
    from collections import Counter
    from vlbias_nb.papers.social_counterfactuals.intersectional_probing import complete_sets_max_skew_pmf, uneven_sets_chance
    pool = [c for _ in range(2) for c in range(3)]
    counts = Counter(max(Counter(pool[i] for i in s).values()) for s in combinations(range(6), 3))
    brute = np.array([counts.get(t, 0) for t in range(4)]) / sum(counts.values())
    np.testing.assert_allclose(complete_sets_max_skew_pmf(2, 3), brute)
    # uneven pools: the exact mean is the mean of the occupations' own chance levels (one set: 0)
    u = uneven_sets_chance([1, 2], 3, n_draws=300)
    assert u.estimate == pytest.approx(brute @ np.log(np.maximum(np.arange(4), 1)) / 2)

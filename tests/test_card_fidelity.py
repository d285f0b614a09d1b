"""The card's measures as the papers define them (issue 33, point 3), hand-worked and on planted folders: GAB binding per
activity source with a chance band from the images scored; Prompt Array's chance band of the mean over 264 prompts, the
target stated, WEAT per template with the sign-flip count; SocialCounterfactuals' physical segments from the released
data set's 5 traits (K = 10 / 30)."""
import math
import numpy as np
import pytest
from vlbias_nb.data.rehearsal import write_generation_folder
from vlbias_nb.methods.embedding_cache import image_key
from vlbias_nb.papers.social_counterfactuals.counterfactual_captions import set_filename
from vlbias_nb.run import card as C

CFG = dict(n_boot=200, n_chance=100, n_perm=200, progress=False)

def _model(order: list):
    "A planted model ranking `order` first to last for every query."
    return C.PlantedCardModel({image_key(p): i / len(order) for i, p in enumerate(order)}, name="planted-card")

@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1"); monkeypatch.delenv("VLBIAS_ALLOW_DOWNLOAD", raising=False)

def test_social_counterfactuals_card_k_is_the_released_five_traits(tmp_path):
    """Planted physical × gender (5 × 2 = 10 images a set) and physical × race (5 × 6 = 30) sets: the card's MaxSkew uses
    K = 10 and 30 (Tab. 2's K), not the caption file's 14 traits (K = 28 / 84). Per occupation 4 candidate sets; all four
    images of code 0 rank first, so the top K holds 4 images of a value whose pool share is 1/K: MaxSkew = ln(4)."""
    occs = ["doctor", "pilot"]
    keys = [f"s{s:05d}_{set_filename('A photo of a', seg, o)}_c{c:03d}_{pos:02d}"
            for seg, K in (("physical_gender", 10), ("physical_race", 30)) for s, o in enumerate(occs) for c in range(4) for pos in range(K)]
    sc = write_generation_folder(tmp_path / "sc", keys, size=16)
    paths = [str(sc / "images" / f"{k}.png") for k in keys]
    first = [p for p in paths if p.endswith("_00.png")]
    order = first + [p for p in paths if p not in first]
    card = C.make_card("planted-card", tmp_path / "card", ["social_counterfactuals.maxskew"], {"social_counterfactuals": str(sc)},
                       C.CardConfig(**CFG), model=_model(order), cache=None)
    ms = card["measures"]
    for seg, K in (("physical_gender", 10), ("physical_race", 30)):
        m = ms[f"social_counterfactuals.maxskew.{seg}"]
        assert (m["k"], m["n"], m["n_items"]) == (K, 2, 2 * 4 * K), (seg, m)
        assert abs(m["value"] - math.log(4)) < 1e-9 and f"MaxSkew@{K} " in m["what"]
        assert m["chance_high"] < m["value"]

# --- GAB (§5.2.1, §5.2.3): per activity source, chance from the images scored -------------------------------------------

@pytest.fixture(scope="module")
def gab_card(tmp_path_factory):
    "Planted GAB-layout folder (4 activities x 4 groups x 2 images), every E2 image ranked before every other image."
    from vlbias_nb.data.rehearsal import make_gab_images
    from vlbias_nb.papers.gab.binding import scan_gab_images
    tmp = tmp_path_factory.mktemp("gab-card")
    root = make_gab_images(tmp / "gab", n_items=2, n_activities=4, size=64)
    t = scan_gab_images(root)
    order = t.path[t.group == "E2"].tolist() + t.path[t.group != "E2"].tolist()
    card = C.make_card("planted-card", tmp / "card", ["gab.binding", "gab.text_bias"], {"gab": str(root)}, C.CardConfig(**CFG),
                       model=_model(order), cache=None)
    return card, t

def test_gab_binding_rows_per_source_not_pooled(gab_card):
    card, t = gab_card
    ms = card["measures"]
    sources = sorted(t.source.unique())
    for src in sources:
        for q in ("acc_U1", "acc_E2", "acc_U2", "acc_E1", "drop_presence", "drop_binding"):
            assert f"gab.i2t.{src}.{q}" in ms, (src, q)
    assert not {"gab.binding_drop", "gab.i2t.E2.two", "gab.t2i.E2"} & set(ms)          # the pooled rows are gone
    src = sources[0]
    d = ms[f"gab.i2t.{src}.drop_binding"]
    assert abs(d["value"] - (ms[f"gab.i2t.{src}.acc_E2"]["value"] - ms[f"gab.i2t.{src}.acc_U2"]["value"])) < 1e-12
    assert d["chance"] == 0.0 and d["chance_low"] < 0 < d["chance_high"] and "§5.2.1" in d["what"]
    # the planted order: each E2 caption finds its E2 image (1.0), each U2 caption loses to it (0.0), per source
    assert (ms[f"gab.t2i.{src}.E2"]["value"], ms[f"gab.t2i.{src}.U2"]["value"]) == (1.0, 0.0)
    assert "§5.2.3" in ms[f"gab.t2i.{src}.E2"]["what"] and "§5.2.2" not in ms[f"gab.t2i.{src}.E2"]["what"]
    assert "§5.2.2" in ms[f"gab.text_bias.{src}"]["what"]                                # Tab. 1 is §5.2.2's

def test_gab_chance_band_counts_images(gab_card):
    "4 activities x 2 U2 images = 8 images: Binomial(8, 1/2) has 2.5 % / 97.5 % quantiles 1 and 7, so the band is [1/8, 7/8]."
    card, t = gab_card
    src = sorted(t.source.unique())[0]
    m = card["measures"][f"gab.i2t.{src}.acc_U2"]
    assert (m["n"], m["n_items"]) == (4, 8) and (m["chance"], m["chance_low"], m["chance_high"]) == (0.5, 0.125, 0.875)
    # the old rule, one coin per activity mean (Binomial(4, 1/2) / 4), would have said [0, 1]
    assert m["chance_band"] == "mean"
    p = card["measures"][f"gab.t2i.{src}.E2"]                    # 2 pairs per activity, one E2 caption each: 8 choices
    assert p["n_items"] == 8 and (p["chance_low"], p["chance_high"]) == (0.125, 0.875)

# --- Prompt Array (§4.2, App. B, App. C): chance of the mean, the target stated, WEAT per template ----------------------

@pytest.fixture(scope="module")
def faces_card(tmp_path_factory):
    "Planted FairFace val (80 faces): every male face ranked first for every prompt."
    import pandas as pd
    from vlbias_nb.data.rehearsal import make_fairface
    ff = make_fairface(tmp_path_factory.mktemp("faces-card") / "ff", n_items=80)
    lab = pd.read_csv(ff / "fairface_label_val.csv")
    cfg = C.CardConfig(maxskew_k=20, **CFG)
    order = [str(ff / f) for f in lab.sort_values("gender", ascending=False, kind="stable").file]      # Male before Female
    card = C.make_card("planted-card", ff.parent / "card", ["prompt_array.fairface"], {"fairface": str(ff)}, cfg, model=_model(order), cache=None)
    return card, lab, cfg

def test_prompt_array_chance_band_is_the_mean_of_264_queries(faces_card):
    from vlbias_nb.papers.prompt_array.evaluation import random_ranking_bias, random_ranking_draws, mean_chance_band
    from vlbias_nb.seeds import derive_seed
    card, lab, cfg = faces_card
    m = card["measures"]["prompt_array.maxskew.gender"]
    assert m["n"] == 264 and m["chance_band"] == "mean"
    seed = derive_seed(cfg.seed, "card", "prompt array chance", "gender")
    draws = random_ranking_draws(lab.gender, n_queries=cfg.n_chance, k=20, seed=seed)
    band = mean_chance_band(draws["maxskew"], 264, seed=derive_seed(cfg.seed, "card", "prompt array mean chance", "gender", "maxskew"))
    assert (m["chance"], m["chance_low"], m["chance_high"]) == pytest.approx(tuple(band), abs=1e-12)
    single = random_ranking_bias(lab.gender, n_queries=cfg.n_chance, k=20, seed=seed)
    assert (m["single_query_chance_low"], m["single_query_chance_high"]) == pytest.approx(
        (single["maxskew_chance_low"], single["maxskew_chance_high"]), abs=1e-12)     # one query's band kept beside it
    assert m["chance"] == pytest.approx(single["maxskew"], abs=1e-12)               # the same level ...
    # ... but the band of a mean of 264 queries is about sqrt(264) = 16 times narrower than one query's
    assert (single["maxskew_chance_high"] - single["maxskew_chance_low"]) > 5 * (m["chance_high"] - m["chance_low"])
    # 20 men in the top 20 of 40 / 40: MaxSkew ln 2, far above the band of the mean
    assert abs(m["value"] - math.log(2)) < 1e-9 and m["value"] > m["chance_high"]

def test_prompt_array_age_target_is_stated(faces_card):
    card, lab, _ = faces_card
    ms = card["measures"]
    n_age = lab.age.nunique()
    u, own = ms["prompt_array.maxskew.age"], ms["prompt_array.maxskew.age_own_shares"]
    assert u["baseline"].startswith(f"target: uniform over the {n_age} age values (1/{n_age}") and "the paper's target" in u["baseline"]
    assert own["baseline"].startswith(f"target: the images' own age distribution over {n_age} values") and "not the paper's" in own["baseline"]
    assert (u["target"], own["target"]) == ("uniform", "dataset") and "not measured in the paper" in u["what"]
    assert ms["prompt_array.maxskew.gender"]["target"] == "uniform" and "not measured" not in ms["prompt_array.maxskew.gender"]["what"]

def test_prompt_array_weat_per_template(faces_card):
    "One row per test template with its own p; the sign-flip row counts the template rows whose sign differs from their mean."
    from vlbias_nb.papers.prompt_array.prompts import TEST_TEMPLATES
    card, _, _ = faces_card
    ms = card["measures"]
    rows = [ms[f"prompt_array.weat.gender.t{i}"] for i in range(len(TEST_TEMPLATES))]
    assert len(TEST_TEMPLATES) == 8 and f"prompt_array.weat.gender.t{len(TEST_TEMPLATES)}" not in ms
    assert [r["template"] for r in rows] == list(TEST_TEMPLATES) and all(0 <= r["p_value"] <= 1 for r in rows)
    assert "prompt_array.weat.gender" not in ms                                     # no mean beside the first template's p
    es = np.array([r["value"] for r in rows])
    flips = int(((np.sign(es) == -np.sign(es.mean())) & (es != 0)).sum())           # brute force from the rows
    s = ms["prompt_array.weat.gender.sign_flips"]
    assert s["value"] == flips and s["n"] == 8 and s["n_positive"] + s["n_negative"] == int((es != 0).sum())
    assert s["mean_effect"] == pytest.approx(es.mean(), abs=1e-12)
    for r in rows: assert r["ci_low"] <= r["value"] <= r["ci_high"] and r["chance_low"] <= r["chance_high"]

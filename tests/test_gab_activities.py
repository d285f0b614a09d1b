"Tests of vlbias_nb.gab_activities: lists, eq. 1, selection statistics on planted counts (GAB §4.1)."
import math
import numpy as np, pandas as pd, pytest
from conftest import requires_shared
from vlbias_nb.gab_activities import (DEFAULT_GAB_ACTIVITIES, load_gab_activities, activity_table, mlm_log_ratio,
    mlm_bias_scores, tiny_roberta_mlm, identifier_token_ids, MALE_IDENTIFIERS, FEMALE_IDENTIFIERS, shapiro_wilk,
    select_tail, select_gendered_activities, verb_object_log_ratios, z_test_pairs, mined_activities, gerund)
from vlbias_nb.paths import MissingDataError

@requires_shared("gab/activities.json")
def test_builtin_lists_equal_shared():
    assert load_gab_activities() == {**DEFAULT_GAB_ACTIVITIES, "about": load_gab_activities()["about"]}

def test_builtin_without_shared(monkeypatch):
    monkeypatch.setenv("VLBIAS_DATA", "/nonexistent")
    t = activity_table(load_gab_activities())
    assert len(t) == 37 and set(t.expected) == {"man", "woman"}
    with pytest.raises(MissingDataError, match="path"): load_gab_activities("/nonexistent/a.json")

def test_eq1_sums_identifiers():
    p = np.array([[0.2, 0.1, 0.05, 0.3, 0.0]])
    assert math.isclose(mlm_log_ratio(p, [0, 1], [2, 3])[0], math.log(0.3 / 0.35))

def test_planted_mlm_bias_real_model():
    m, t = tiny_roberta_mlm(1)
    ids = identifier_token_ids(t, MALE_IDENTIFIERS + FEMALE_IDENTIFIERS)
    import torch
    with torch.no_grad():
        m.lm_head.decoder.weight.zero_(); m.lm_head.bias.zero_()
        m.lm_head.bias[[ids[w] for w in FEMALE_IDENTIFIERS]] = math.log(3.0)
    s = mlm_bias_scores(["doing pilates", "playing poker", "x y z"], m, t, progress=False)
    np.testing.assert_allclose(s.log_ratio, -math.log(3.0), atol=1e-5)

def test_selection_statistics_planted_counts():
    counts = pd.DataFrame(dict(verb=["ride", "hold", "eat", "throw", "fly"], object=["horse", "umbrella", "pizza", "frisbee", "kite"],
                               n_male=[90, 10, 50, 30, 2], n_female=[10, 90, 50, 10, 1], verb_form=["riding", "holding", "eating", "throwing", "flying"]))
    r = verb_object_log_ratios(counts, min_total=5, pseudo=0.5)
    assert list(r.verb) == ["ride", "hold", "eat", "throw"]
    lr = np.log([90.5 / 10.5, 10.5 / 90.5, 1.0, 30.5 / 10.5])
    np.testing.assert_allclose(r.log_ratio, lr)
    se = np.sqrt([1 / 90.5 + 1 / 10.5, 1 / 10.5 + 1 / 90.5, 2 / 50.5, 1 / 30.5 + 1 / 10.5])
    z = z_test_pairs(r)
    np.testing.assert_allclose(z.z, (lr - lr.mean()) / se)
    from scipy.stats import norm
    np.testing.assert_allclose(z.p_value, 2 * norm.sf(np.abs((lr - lr.mean()) / se)))
    m = mined_activities(counts, lambda a: np.where([x.startswith("riding") for x in a], 1.0, -1.0))
    assert set(m.activity) == set(z[z.significant].verb_form + " " + z[z.significant].object)
    assert m.set_index("verb").loc["ride", "agrees"]

def test_tails_and_normality():
    rng = np.random.default_rng(0)
    df = pd.DataFrame(dict(activity=[f"a{i}" for i in range(100)], log_ratio=rng.normal(1, 1, 100), expected="man"))
    assert shapiro_wilk(df.log_ratio).normal
    top = select_tail(df, "right", n=5)
    assert list(top.log_ratio) == sorted(df.log_ratio, reverse=True)[:5]
    both = select_gendered_activities(df.drop(columns="expected"), n=2)
    assert list(both.selected_as) == ["man", "man", "woman", "woman"]
    assert not shapiro_wilk(rng.exponential(size=300)).normal
    with pytest.raises(ValueError, match="exactly one"): select_tail(df, "left")

def test_gerund():
    assert [gerund(v) for v in ["make", "stop", "tie", "carry", "visit"]] == ["making", "stopping", "tying", "carrying", "visiting"]

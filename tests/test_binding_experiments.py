"Tests of vlbias_nb.papers.gab.binding: the four groups, captions, and known answers of every experiment (GAB §5)."
import numpy as np, pandas as pd, pytest
from vlbias_nb.papers.gab.activities import activity_table, load_gab_activities
from vlbias_nb.papers.gab.binding import (GROUPS, group_performer, group_persons, group_of, group_folder, gab_caption,
    reversed_caption, group_table, planted_binding_data, PlantedTextEncoder, text_encoder_bias, text_encoder_bias_share,
    image_to_text_experiment, image_to_text_scores, binding_drops, text_to_image_experiment, t2i_accuracy, pair_groups,
    activity_recognition, activity_recognition_summary, neutral_preference_share)

ACTS = activity_table(load_gab_activities())

@pytest.mark.parametrize("exp", ["man", "woman"])
def test_four_groups(exp):
    other = "woman" if exp == "man" else "man"
    assert [(group_performer(g, exp), group_persons(g)) for g in GROUPS] == [(exp, 1), (exp, 2), (other, 1), (other, 2)]
    for g in GROUPS: assert group_of(group_performer(g, exp), group_persons(g), exp) == g
    assert group_folder("U2", exp) == f"{other.title()} {exp.title()}"

def test_captions():
    assert gab_caption("man", "Holding Baby", "two") == "a man is holding baby and a woman is in the scene"
    assert reversed_caption("man", "Holding Baby", "two") == "a woman is holding baby and a man is in the scene"
    with pytest.raises(ValueError, match="template"): gab_caption("man", "x", "three")

@pytest.mark.parametrize("seed", [0, 3])
def test_tab1_planted(seed):
    rng = np.random.default_rng(seed)
    biased = set(ACTS.activity[rng.random(len(ACTS)) < 0.6])
    share = text_encoder_bias_share(text_encoder_bias(ACTS, PlantedTextEncoder(ACTS, biased, seed=seed))).set_index("source").share
    np.testing.assert_allclose(share, ACTS.assign(b=ACTS.activity.isin(biased)).groupby("source").b.mean())

@pytest.mark.parametrize("rates", [{"E1": 0, "U1": 0, "E2": 0, "U2": 0.5}, {"E1": 0.1, "U1": 0.2, "E2": 0.15, "U2": 0.4}])
def test_i2t_drop_planted(rates):
    imgs, X, enc = planted_binding_data(ACTS, rates, n_per_group=20, seed=1)
    acc = image_to_text_experiment(imgs, X, enc)
    for (g, t), d in acc.groupby(["group", "template"]):
        np.testing.assert_allclose(d.accuracy, 1 - rates[g])
    d = binding_drops(acc)
    np.testing.assert_allclose(d.drop_presence, rates["U2"] - rates["U1"]); np.testing.assert_allclose(d.drop_binding, rates["U2"] - rates["E2"])

def test_t2i_hand_worked():
    # 1 activity, E2 image at its own caption, U2 image at its own caption: both captions retrieve their image
    acts = ACTS.head(1); imgs = group_table(acts, 1, ("E2", "U2"))
    caps = [gab_caption(p, a, "two") for p, a in zip(imgs.performer, imgs.activity)]
    V = {c: np.eye(4)[i] for i, c in enumerate(caps)}
    enc = lambda ts: np.stack([V.get(t, np.eye(4)[3]) for t in ts])
    X = np.stack([V[c] for c in caps])
    r = text_to_image_experiment(imgs, X, enc, ("E2", "U2"), "two")
    assert list(r.correct) == [1.0, 1.0]
    r2 = text_to_image_experiment(imgs, X[::-1].copy(), enc, ("E2", "U2"), "two")  # images swapped: both wrong
    assert list(r2.correct) == [0.0, 0.0]
    # neutral caption equidistant: p_male = 0.5, a tie, which the authors' rule gives to the man's image: right only when
    # the expected performer (the right image's) is a man
    rn = text_to_image_experiment(imgs, X, enc, ("E2", "U2"), "neutral")
    assert list(rn.p_male) == [0.5] and list(rn.correct) == [1.0 if acts.expected.iloc[0] == "man" else 0.0]

def test_pairing_one_to_one():
    imgs = group_table(ACTS.head(3), 5)
    imgs = imgs.drop(imgs.index[(imgs.group == "U2")][:2])
    p = pair_groups(imgs, "E2", "U2", seed=0)
    assert p.i_a.is_unique and p.i_b.is_unique and len(p) == 13

def test_activity_recognition_ranks():
    acts = ACTS.head(1); near = load_gab_activities()["near_actions"]
    imgs = group_table(acts, 1, ("E1", "U2"))
    src, act = acts.source.iloc[0], acts.activity.iloc[0]
    cands = [act] + near[src][act]
    rng = np.random.default_rng(0); D = 64
    V = {}
    def enc(ts):
        for t in ts: V.setdefault(t, rng.normal(size=D))
        return np.stack([V[t] for t in ts])
    # E1 image sits at its true caption -> rank 1; U2 image sits at the 3rd distractor's caption
    enc([gab_caption("woman" if acts.expected.iloc[0] == "woman" else "man", c, "one") for c in cands])
    e1 = V[gab_caption(group_performer("E1", acts.expected.iloc[0]), act, "one")]
    u2cap = gab_caption(group_performer("U2", acts.expected.iloc[0]), cands[3], "two"); enc([u2cap])
    X = np.stack([e1, V[u2cap]])
    r = activity_recognition(imgs, X, enc, near)
    assert r["rank"].iloc[0] == 1 and r["rank"].iloc[1] > 1
    s = activity_recognition_summary(r)
    m = s[s.metric == "MRR"].set_index("n_persons")
    assert m.loc[1, "value"] == 1.0 and m.loc[2, "value"] == 1 / r["rank"].iloc[1]
    n = len(cands)                                                                   # chance: a uniformly random ranking of n
    assert np.isclose(m.loc[1, "chance"], sum(1 / k for k in range(1, n + 1)) / n)
    assert np.isclose(s[(s.metric == "R@3") & (s.n_persons == 1)].chance.iloc[0], 3 / n)


def test_drops_carry_chance_and_intervals_over_activities():
    "Planted errors on half the activities only: the drop is the mean over activities; its interval spans the spread."
    acts = ACTS[ACTS.source == "phaze3"]
    imgs, X, enc = planted_binding_data(acts, {"E1": 0.0, "U1": 0.0, "E2": 0.0, "U2": 0.0}, n_per_group=4, seed=0)
    # flip every U2 image of the first 6 activities to the wrong performer: their U2 accuracy 0, the others 1
    bad = imgs.activity.isin(acts.activity.iloc[:6]) & (imgs.group == "U2")
    X = X.copy()
    for i in np.flatnonzero(bad.to_numpy()):
        r = imgs.iloc[i]; wrong = "woman" if r.performer == "man" else "man"
        X[i] = enc([gab_caption(wrong, r.activity, "one")])[0] + enc([gab_caption(wrong, r.activity, "two")])[0]
    acc, pa = image_to_text_experiment(imgs, X, enc, per_activity=True)
    d = binding_drops(acc, per_activity=pa).iloc[0]
    assert np.isclose(d.drop_binding, 0.5) and np.isclose(d.drop_presence, 0.5) and d.drop_chance == 0
    assert 0.1 < d.drop_binding_ci_low < 0.5 < d.drop_binding_ci_high < 0.9
    u2 = acc[(acc.group == "U2") & (acc.template == "two")].iloc[0]
    assert np.isclose(u2.accuracy, 0.5) and u2.chance == 0.5 and u2.ci_low < 0.5 < u2.ci_high

def test_bad_input():
    imgs = group_table(ACTS.head(1), 1)
    with pytest.raises(ValueError, match="image_emb"): image_to_text_scores(imgs, np.zeros((2, 3)), lambda t: np.ones((len(t), 3)))
    with pytest.raises(ValueError, match="error_rates"): planted_binding_data(ACTS.head(1), {"U2": 1.5})

def test_experiments_with_fewer_images_after_filtering():
    "Filtering (§4.3) leaves some activities without a group: the experiments use what is left, values as planted."
    imgs, X, enc = planted_binding_data(ACTS, {g: 0.0 for g in GROUPS}, n_per_group=4, seed=2)
    rng = np.random.default_rng(0)
    a, b = ACTS[ACTS.source == "phaze2"].activity.iloc[:2]
    keep = (rng.random(len(imgs)) < 0.7) & ~((imgs.activity == a) & (imgs.group == "E1")).to_numpy() \
           & ~((imgs.activity == b) & imgs.group.isin(["E2", "U2"])).to_numpy()
    i1, X1 = imgs[keep], X[keep]
    acc = image_to_text_experiment(i1, X1, enc)
    assert (acc.accuracy == 1.0).all()
    assert acc.n_images.sum() == keep.sum() + i1.group.isin(["E2", "U2"]).sum()  # one-person template on all, two on E2/U2
    assert acc.query("source == 'phaze2' and group == 'E2' and template == 'two'").n_activities.item() == 14
    d = binding_drops(acc)
    assert np.allclose(d.drop_presence, 0) and np.allclose(d.drop_binding, 0)
    ns = neutral_preference_share(i1, X1, enc).set_index("source").n_activities
    present = i1.groupby(["source", "activity"]).group.agg(lambda g: {"E1", "U1"} <= set(g)).groupby("source").sum()
    assert ns.to_dict() == present.to_dict() and ns["phaze2"] <= 14
    t = text_to_image_experiment(i1, X1, enc, ("E2", "U2"), "two")
    assert b not in set(t.activity) and t.correct.all()
    n_pairs = i1.groupby(["source", "activity"]).apply(lambda d: min((d.group == "E2").sum(), (d.group == "U2").sum()))
    assert len(t) == 2 * n_pairs.sum()
    ar = activity_recognition(i1, X1, enc, load_gab_activities()["near_actions"])
    assert len(ar) == keep.sum() and set(ar.index) == set(range(keep.sum()))
    # a whole group gone: NaN drops, no pairs, no Fig. 8 activities — no error
    no_u = ~imgs.group.isin(["U1", "U2"]).to_numpy()
    d = binding_drops(image_to_text_experiment(imgs[no_u], X[no_u], enc))
    assert d.acc_U1.isna().all() and d.drop_presence.isna().all() and (d.acc_E2 == 1).all()
    assert len(text_to_image_experiment(imgs[no_u], X[no_u], enc)) == 0
    assert len(neutral_preference_share(imgs[no_u], X[no_u], enc)) == 0

"""CLIP-clip (Wang et al. 2021a) on planted data: embeddings where a few planted dimensions carry the attribute, and
those are exactly the ones removed; both m conventions (GenSynth: removed, Prompt Array: kept); clipping of image and
text embeddings; the GenSynth authors' reference selection."""
import numpy as np
import pytest
import torch
from vlbias_nb.methods.clip_clip import (ClipClip, fit_clip_clip, feature_mutual_information, attribute_codes,
                                 reference_kept_dims, compare_dims, GENSYNTH_KEPT_DIMS)
from vlbias_nb.methods.zero_shot import ZeroShotClassifier
from conftest import requires_shared

def planted(n=600, d=48, dims=(5, 11, 40), shift=1.5, seed=0, labels=("man", "woman")):
    "Unit embeddings whose `dims` are shifted by `shift` for the second attribute value; returns (emb, labels, y)."
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    e = rng.normal(size=(n, d)); e[:, list(dims)] += shift * y[:, None]
    return e / np.linalg.norm(e, axis=1, keepdims=True), np.array(labels)[y], y

@pytest.mark.parametrize("seed,dims", [(0, (5, 11, 40)), (1, (0, 47)), (2, (3, 4, 5, 6, 30)), (3, (17,))])
def test_planted_dimensions_are_exactly_the_removed_ones(seed, dims):
    emb, lab, _ = planted(dims=dims, seed=seed)
    cc = fit_clip_clip(emb, lab, n_remove=len(dims))
    assert cc.removed.tolist() == sorted(dims)
    assert cc.kept.tolist() == [i for i in range(48) if i not in dims]
    assert sorted(cc.order[:len(dims)].tolist()) == sorted(dims)

def test_both_m_conventions_agree():
    emb, lab, _ = planted()
    a = fit_clip_clip(emb, lab, n_remove=3)            # GenSynth: m = dimensions removed
    b = fit_clip_clip(emb, lab, n_keep=45)             # Prompt Array: m = dimensions kept
    assert a.removed.tolist() == b.removed.tolist() == [5, 11, 40] and a.n_keep == b.n_keep == 45
    assert a.with_n_keep(45).removed.tolist() == a.removed.tolist()
    with pytest.raises(ValueError, match="exactly one"): fit_clip_clip(emb, lab)
    with pytest.raises(ValueError, match="exactly one"): fit_clip_clip(emb, lab, n_remove=1, n_keep=47)
    with pytest.raises(ValueError, match="n_remove must be"): a.with_n_remove(48)

def test_mi_ranks_stronger_planting_first():
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 800)
    e = rng.normal(size=(800, 20))
    for dim, s in [(7, 2.5), (2, 1.5), (13, 0.8)]: e[:, dim] += s * y
    cc = fit_clip_clip(e, y, n_remove=3)
    assert cc.order[:3].tolist() == [7, 2, 13]
    assert cc.with_n_remove(1).removed.tolist() == [7]

def test_intersectional_labels():
    "A 2-D label array is the intersection of its columns; the dims planted on either attribute are found."
    rng = np.random.default_rng(5)
    g, r = rng.integers(0, 2, 900), rng.integers(0, 3, 900)
    e = rng.normal(size=(900, 24)); e[:, 4] += 2 * g; e[:, 9] += 1.5 * r
    labels = np.stack([np.array(["m", "f"])[g], np.array(["a", "b", "c"])[r]], 1)
    assert len(set(attribute_codes(labels))) == 6
    assert fit_clip_clip(e, labels, n_remove=2).removed.tolist() == [4, 9]

def test_clipping_applies_to_images_and_text_and_renormalises():
    emb, lab, y = planted()
    cc = fit_clip_clip(emb, lab, n_remove=3)
    out = cc(emb)
    assert out.shape == (600, 45) and out.dtype == emb.dtype
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1, atol=1e-6)
    gap = lambda e: np.abs(e[y == 1].mean(0) - e[y == 0].mean(0)).max()
    assert gap(out) < gap(emb) / 3
    t = torch.tensor(emb[:7], dtype=torch.float32)
    np.testing.assert_allclose(cc(t).numpy(), out[:7], atol=1e-5)
    assert cc(emb[0]).shape == (45,)                                           # one embedding
    with pytest.raises(ValueError, match="fit on 48"): cc(np.ones((2, 10)))

def test_clipping_removes_attribute_from_zero_shot():
    "Text queries that differ only in the planted dims: gender zero-shot is near perfect before clipping, chance after."
    rng = np.random.default_rng(6)
    y = rng.integers(0, 2, 600)
    emb = rng.normal(size=(600, 48)); emb[:, [5, 11, 40]] += 1.5 * (2 * y[:, None] - 1)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    base = rng.normal(size=48)
    man, woman = base.copy(), base.copy(); man[[5, 11, 40]] = -1.0; woman[[5, 11, 40]] = 1.0
    W = np.stack([man, woman]); W /= np.linalg.norm(W, axis=1, keepdims=True)
    clf = ZeroShotClassifier(["man", "woman"], W.astype(np.float32))
    acc_before = (clf.predict(emb) == y).mean()
    cc = fit_clip_clip(emb, np.array(["man", "woman"])[y], n_remove=3)
    assert cc.removed.tolist() == [5, 11, 40]
    clipped = clf.transform(cc)
    np.testing.assert_allclose(clipped.weights[0], clipped.weights[1], atol=1e-6)  # the queries are now identical
    p = clipped.predict_proba(cc(emb))
    np.testing.assert_allclose(p, 0.5, atol=1e-4)                                  # no gender information left
    assert acc_before > 0.95

def test_mutual_information_inputs():
    emb, lab, _ = planted(n=200)
    mi = feature_mutual_information(torch.tensor(emb), lab)
    assert mi.shape == (48,) and (mi >= 0).all()
    np.testing.assert_array_equal(mi, feature_mutual_information(emb, lab))   # seeded estimator: reproducible
    with pytest.raises(ValueError, match="200 embeddings but 3 labels"): feature_mutual_information(emb, lab[:3])
    with pytest.raises(ValueError, match="single value"): feature_mutual_information(emb, np.ones(200))
    with pytest.raises(ValueError, match="1-D"): attribute_codes(np.zeros((2, 2, 2)))

def test_from_kept_and_compare():
    cc = ClipClip.from_kept([0, 2, 3], 5)
    assert cc.kept.tolist() == [0, 2, 3] and cc.removed.tolist() == [1, 4] and cc.n_remove == 2
    with pytest.raises(ValueError, match="lie in"): ClipClip.from_kept([0, 9], 5)
    c = compare_dims([0, 1, 2], [1, 2, 3], 5)
    assert c["kept_overlap"] == 2 and c["removed_overlap"] == 1 and c["kept_jaccard"] == 0.5

@requires_shared(GENSYNTH_KEPT_DIMS)
def test_gensynth_reference_selection():
    ref = reference_kept_dims()
    assert ref["model"] == "ViT-B-32/openai"
    kept = ref["kept_dims"]
    assert len(kept) == 412 == len(set(kept)) and 0 <= min(kept) and max(kept) <= 511
    cc = ClipClip.from_kept(kept, 512)
    assert cc.n_remove == 100 and cc.kept.tolist() == sorted(kept)
    x = np.random.default_rng(0).normal(size=(4, 512)).astype(np.float32)
    np.testing.assert_allclose(cc(x), x[:, sorted(kept)] / np.linalg.norm(x[:, sorted(kept)], axis=1, keepdims=True), atol=1e-6)
    c = compare_dims(kept, kept, 512)
    assert c["kept_overlap"] == 412 and c["removed_overlap"] == 100 and c["removed_jaccard"] == 1.0

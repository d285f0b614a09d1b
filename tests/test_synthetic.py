import numpy as np, pytest
from hypothesis import given, strategies as st, settings
from vlbias_nb.data.synthetic import make_planted_coco, PlantedContext, DEFAULT_CONTEXTS, write_planted_coco
from vlbias_nb.text import gender_labels
from vlbias_nb.data.coco import load_coco_captions

@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=5), st.integers(40, 400), st.floats(0, 0.8), st.integers(0, 10**6))
def test_realised_shares_match_planted(shares, n, undef, seed):
    ctxs = [PlantedContext(f"c{i}", ["holding"], ["ball"], ["outside"], male_share=s) for i, s in enumerate(shares)]
    p = make_planted_coco(ctxs, n_images=n, undefined_share=undef, seed=seed)
    ct = p.context_truth()
    assert ct.n_images.sum() == n
    for r in ct.itertuples():
        ng = r.n_male + r.n_female
        if ng: assert abs(r.realised_male_share - r.planted_male_share) <= 0.5 / ng + 1e-9
        assert abs(r.n_undefined - undef * r.n_images) <= 0.5 + 1e-9

def test_planted_30_point_skew_and_labels():
    ctxs = [PlantedContext("sport", ["playing"], ["ball"], ["on a field"], 0.80),
            PlantedContext("home", ["washing"], ["dishes"], ["at home"], 0.50)]
    p = make_planted_coco(ctxs, n_images=1000, seed=7)
    ct = p.context_truth().set_index("context")
    assert ct.realised_male_share["sport"] - ct.realised_male_share["home"] == pytest.approx(0.30, abs=0.01)
    lab = gender_labels(p.captions.captions_by_image())
    assert [lab[i] for i in p.truth.image_id] == p.truth.gender.tolist()

def test_deterministic_and_written(tmp_path):
    a = make_planted_coco(n_images=50, seed=1, image_dir=tmp_path / "img", image_size=48)
    b = make_planted_coco(n_images=50, seed=1)
    assert a.captions.captions.equals(b.captions.captions) and a.truth.equals(b.truth)
    paths = write_planted_coco(a, tmp_path)
    assert load_coco_captions(paths["captions"]).captions.caption.tolist() == a.captions.captions.caption.tolist()
    assert len(list((tmp_path / "img").glob("*.png"))) == 50

def test_bad_config():
    with pytest.raises(ValueError, match="male_share"):
        make_planted_coco([PlantedContext("x", ["a"], ["b"], ["c"], 1.5)])

@settings(max_examples=20, deadline=None)
@given(st.lists(st.floats(0.05, 0.95), min_size=2, max_size=5), st.floats(0.2, 0.8), st.integers(0, 10**6))
def test_overall_imbalance_is_planted(shares, target, seed):
    "overall_male_share sets the male share of all gendered images; context order is kept; truth reports both."
    ctxs = [PlantedContext(f"c{i}", ["holding"], ["ball"], ["outside"], male_share=s) for i, s in enumerate(shares)]
    p = make_planted_coco(ctxs, n_images=1000, seed=seed, overall_male_share=target)
    ov, ct = p.overall_truth(), p.context_truth()
    assert ov["planted_male_share"] == pytest.approx(target, abs=0.01)
    assert ov["realised_male_share"] == pytest.approx(target, abs=0.01)
    assert ov["n_male"] + ov["n_female"] + ov["n_undefined"] == 1000
    order_in = np.argsort(shares, kind="stable"); planted = ct.planted_male_share.to_numpy()
    assert (np.diff(planted[order_in]) >= -1e-12).all()

def test_instances_round_trip_and_boxes_inside_images(tmp_path):
    from vlbias_nb.data.coco import load_coco_instances
    p = make_planted_coco(n_images=30, seed=2, image_dir=tmp_path / "img", image_size=64)
    paths = write_planted_coco(p, tmp_path)
    inst = load_coco_instances(paths["instances"])
    assert inst.person_counts().tolist() == [1] * 30
    for iid in p.truth.image_id:
        for x, y, w, h in inst.person_boxes(int(iid)):
            assert 0 <= x and 0 <= y and w > 0 and h > 0 and x + w <= 64 and y + h <= 64

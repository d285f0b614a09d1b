"Tests of vlbias_nb.gensynth: crop/paste geometry on real coco-mini boxes, the KNN filter, caption editing, selection."
import numpy as np, pandas as pd, pytest
from PIL import Image
from conftest import requires_shared
from vlbias_nb import gensynth as gs
from vlbias_nb.paths import shared_path
from vlbias_nb.text import gender_label

INST = "coco-mini/annotations/instances_train2017.json"
CAPS = "coco-mini/annotations/captions_train2017.json"

def _coco_mini():
    from vlbias_nb.data import load_coco_instances, load_coco_captions
    return load_coco_instances(shared_path(INST)), load_coco_captions(shared_path(CAPS)).captions_by_image()

@requires_shared(INST)
def test_crop_paste_geometry_on_real_boxes():
    from vlbias_nb.data import load_image
    inst, _ = _coco_mini()
    boxes = inst.boxes[inst.boxes.category_id == 1].head(12)
    files = inst.images.set_index("id").file_name
    for b in boxes.itertuples():
        im = load_image(shared_path("coco-mini/train2017") / files[b.image_id])
        W, H = im.size
        l, t, r, bt = gs.pixel_box((b.x, b.y, b.w, b.h), W, H)
        # integer rounding: floor of the top-left, ceil of the bottom-right, clipped to the image (covers the float box)
        assert l == max(0, int(np.floor(b.x))) and t == max(0, int(np.floor(b.y)))
        assert r == min(W, int(np.ceil(round(b.x + b.w, 6)))) and bt == min(H, int(np.ceil(round(b.y + b.h, 6))))
        assert l <= b.x + 1e-6 and t <= b.y + 1e-6 and r >= min(W, b.x + b.w - 1e-6) and bt >= min(H, b.y + b.h - 1e-6)
        crop = gs.crop_person(im, (b.x, b.y, b.w, b.h))
        assert crop.size == (r - l, bt - t)
        patch = Image.new("RGB", (7, 5), (1, 2, 3))                      # any size: resized into the box
        out = np.asarray(gs.paste_crop(im, patch, (b.x, b.y, b.w, b.h)))
        src = np.asarray(im)
        mask = np.ones(src.shape[:2], bool); mask[t:bt, l:r] = False
        np.testing.assert_array_equal(out[mask], src[mask])              # outside unchanged
        np.testing.assert_array_equal(out[t:bt, l:r], np.asarray(patch.resize((r - l, bt - t), Image.BICUBIC)))
        np.testing.assert_array_equal(np.asarray(gs.paste_crop(im, crop, (b.x, b.y, b.w, b.h))), src)  # crop round-trips

def test_box_clipped_to_image_and_bad_boxes():
    im = Image.fromarray(np.arange(20 * 30 * 3, dtype=np.uint8).reshape(20, 30, 3))
    assert gs.pixel_box((-5.5, 15.2, 40, 10), 30, 20) == (0, 15, 30, 20)
    out = np.asarray(gs.paste_crop(im, Image.new("RGB", (1, 1), (9, 9, 9)), (25.5, -3, 10, 8)))
    assert (out[0:5, 25:30] == 9).all() and np.array_equal(out[5:], np.asarray(im)[5:])
    for bad in [(0, 0, -1, 3), (np.nan, 0, 3, 3), (40, 40, 3, 3)]:
        with pytest.raises(ValueError, match="box"): gs.pixel_box(bad, 30, 20)

def _brute_force(R, S, rg, sg, k_real, k_gender):
    X = np.concatenate([R, S]); is_real = [True] * len(R) + [False] * len(S); g = list(rg) + list(sg)
    pr, pg = [], []
    for i in range(len(S)):
        q = len(R) + i
        d = sorted((float(np.sqrt(((X[j] - X[q]) ** 2).sum())), j) for j in range(len(X)) if j != q)
        pr.append(sum(is_real[j] for _, j in d[:k_real]) / k_real)
        pg.append(sum(g[j] == sg[i] for _, j in d[:k_gender]) / k_gender)
    return np.array(pr), np.array(pg)

def test_knn_filter_matches_brute_force():
    rng = np.random.default_rng(3)
    R, S = rng.standard_normal((25, 6)), rng.standard_normal((40, 6)) * 1.3
    rg, sg = rng.choice(["male", "female"], 25), rng.choice(["male", "female"], 40)
    for kr, kg in [(5, 5), (12, 7), (64, 3)]:
        got = gs.knn_filter_scores(R, S, rg, sg, k_real=kr, k_gender=kg, block=7)
        pr, pg = _brute_force(R, S, rg, sg, kr, kg)
        np.testing.assert_allclose(got.p_real, pr); np.testing.assert_allclose(got.p_gender, pg)

def test_knn_filter_planted_accept_set():
    R, S, rg, sg, expected = gs.planted_knn_embeddings(n_real=60, n_synth=30, seed=1)
    res = gs.knn_filter(R, S, rg, sg, k_real=50, tau_real=0.08, tau_gender=0.5)
    np.testing.assert_array_equal(res.accepted.to_numpy(), expected)
    far = ~expected & np.array([(s[1] > 20) for s in S])
    assert (res.p_real[far] == 0).all()                                # unrealistic edits have no real neighbour
    with pytest.raises(ValueError, match="k_real"): gs.knn_filter_scores(R, S, rg, sg, k_real=0)
    with pytest.raises(ValueError, match="same width"): gs.knn_filter_scores(R, S[:, :3], rg, sg)

def test_knn_accept_thresholds_strict_and_inclusive():
    np.testing.assert_array_equal(gs.knn_accept([0.08, 0.1, 0.1], [0.9, 0.5, 0.52]), [False, False, True])
    np.testing.assert_array_equal(gs.knn_accept([1 / 5000], [0.5], **{k: v for k, v in gs.KNN_DINO.items() if k.startswith(("tau", "incl"))}), [True])

def test_select_edits_one_per_gender_seeded():
    e = pd.DataFrame({"key": [f"k{i}" for i in range(8)], "image_id": [1] * 4 + [2] * 4,
                      "target_gender": ["male", "male", "female", "female"] * 2})
    acc = [True, True, True, False, True, True, False, False]
    a, b = gs.select_edits(e, acc, seed=5), gs.select_edits(e, acc, seed=5)
    assert a.key.tolist() == b.key.tolist() and a.image_id.tolist() == [1, 1]
    assert a.key[0] in ("k0", "k1") and a.key[1] == "k2"

def test_edit_items_cover_templates_genders_scales(tmp_path):
    from vlbias_nb.synthetic import make_planted_coco
    p = make_planted_coco(n_images=10, seed=0, image_dir=tmp_path, image_size=48)
    src = gs.select_sources(p.instances, p.captions.captions_by_image())
    items = gs.build_edit_items(src, tmp_path, seed=1)
    assert len(items) == 16 * len(src)
    one = [it for it in items if it["image_id"] == src.image_id[0]]
    assert {(it["target_gender"], it["template"], it["guidance_scale"]) for it in one} == \
        {(g, t, s) for g in ("male", "female") for t in range(4) for s in (9.5, 15.0)}
    assert gs.build_edit_items(src, tmp_path, seed=1)[0]["seed"] == items[0]["seed"] != gs.build_edit_items(src, tmp_path, seed=2)[0]["seed"]

@requires_shared(CAPS)
def test_caption_gender_editing_on_coco_mini_sources():
    inst, caps = _coco_mini()
    src = gs.select_sources(inst, caps)
    assert len(src) == 8 and set(src.gender) == {"male", "female"}  # coco-mini train: 15 single-person, 8 gendered
    for i in src.image_id:
        for g in ("male", "female"):
            assert gender_label(gs.edit_captions(caps[i], g)) == g
    assert gs.edit_captions(["A man and his son at the beach with her."], "female") == \
        ["A woman and her daughter at the beach with her."]

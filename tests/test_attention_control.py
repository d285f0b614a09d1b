import numpy as np
import pytest
from vlbias_nb.methods.attention_control import (token_alignment, set_alignment, generate_counterfactual_set, control_check,
                                         candidate_items, attribute_masks, outside_attribute_difference)
from vlbias_nb.zoo.tiny import tiny_text_to_image_pipeline, offline_clip_tokenizer

@pytest.fixture(scope="module")
def pipe(): return tiny_text_to_image_pipeline(seed=0)

CAPS = ["A photo of a White male doctor", "A photo of a Middle Eastern female doctor", "A photo of an Asian male doctor"]

def test_alignment_marks_attribute_tokens():
    tok = offline_clip_tokenizer()
    mp, al, attr = set_alignment(tok, CAPS)
    ids = tok(CAPS[1]).input_ids
    assert [tok.decode(ids[j]) for j in attr[1]] == ["middle", "eastern", "female"]
    assert al[1, len(ids):].min() == 1 and int(mp[1, len(ids)]) == len(tok(CAPS[0]).input_ids)

def test_control_check_mechanism(pipe):
    "Under control, shared-token attention equals the base caption's exactly; without it, it does not."
    chk = control_check(pipe, CAPS, seed=1, p=1.0, num_inference_steps=2)
    assert chk["shared_attention_dev_with"] < 1e-6
    assert chk["shared_attention_dev_without"] > 1e-5
    assert np.isfinite(chk["ratio"])

def test_partial_p_injects_only_early_steps(pipe):
    _, c = generate_counterfactual_set(pipe, CAPS[:2], p=0.5, seed=0, num_inference_steps=4)
    dev = np.array(c.shared_dev).reshape(4, -1).mean(1)   # per step (same number of cross layers each step)
    assert dev[:2].max() < 1e-6 and dev[2:].min() > 1e-6

def test_shared_latent_and_seed(pipe):
    a, _ = generate_counterfactual_set(pipe, CAPS, p=0.7, seed=3, num_inference_steps=2)
    b, _ = generate_counterfactual_set(pipe, CAPS, p=0.7, seed=3, num_inference_steps=2)
    assert all((np.asarray(x) == np.asarray(y)).all() for x, y in zip(a, b))
    same, _ = generate_counterfactual_set(pipe, [CAPS[0]] * 2, p=0.0, seed=3, num_inference_steps=2)
    assert np.abs(np.asarray(same[0], float) - np.asarray(same[1], float)).max() <= 1   # one latent for the whole set

def test_candidate_items_and_outside_difference():
    sets = [dict(set_index=0, filename="race_gender_doctor", captions=CAPS)]
    its = candidate_items(sets, n_candidates=5, seed=0)
    assert len(its) == 15 and len({it["p"] for it in its}) == 5 and all(0.1 <= it["p"] <= 0.9 for it in its)
    assert candidate_items(sets, 5, seed=0) == its
    with pytest.raises(ValueError, match="p_range"): candidate_items(sets, 2, p_range=(0.9, 0.1))
    from PIL import Image
    x = np.zeros((4, 4, 3), np.uint8); y = x.copy(); y[0, 0] = 200
    m = np.zeros((2, 4, 4), bool); m[1, 0, 0] = True
    assert outside_attribute_difference([Image.fromarray(x), Image.fromarray(y)], m)[0] == 0
    assert attribute_masks(np.arange(16.).reshape(1, 4, 4), 0.75).sum() == 4   # values above the 75 % quantile 11.25

def test_shared_token_states_change_only_after_the_attribute(pipe):
    "The causal text encoder leaves the prefix unchanged and changes every shared token after the first attribute."
    from vlbias_nb.methods.attention_control import shared_token_state_change
    sc = shared_token_state_change(pipe, CAPS)
    assert sc.change_before.tolist() == [0.0, 0.0] and sc.n_shared_before.tolist() == [5, 4]   # "an" is not shared
    assert (sc.change_after > 0.05).all() and (sc.n_shared_after >= 69).all()

def test_control_check_self_attention_variant(pipe):
    "Brooks et al.'s variant (self-attention maps copied) leaves the uncontrolled run untouched and returns images."
    a = control_check(pipe, CAPS[:2], seed=2, p=1.0, p_self=1.0, num_inference_steps=2, return_images=True)
    b = control_check(pipe, CAPS[:2], seed=2, p=1.0, p_self=0.0, num_inference_steps=2, return_images=True)
    assert all((np.asarray(x) == np.asarray(y)).all() for x, y in zip(a["images_without"], b["images_without"]))
    assert len(a["images_with"]) == 2 and a["masks"].shape == (2, 32, 32)

def test_control_confines_differences_when_layout_follows_attention(pipe):
    """Image level (§3.3): on a tiny pipeline whose layout follows its cross-attention, control cuts the difference of a
    set's images outside the attribute tokens' attention on every seed; on the plain random pipeline it cannot."""
    from vlbias_nb.methods.attention_control import sharpened_cross_attention
    sharp = sharpened_cross_attention(pipe)
    chks = [control_check(sharp, CAPS, seed=s, p=0.9, num_inference_steps=10) for s in range(6)]
    ratios = [c["ratio"] for c in chks]                 # measured 0.58-0.70, mean 0.64
    assert max(ratios) < 0.75 and np.mean(ratios) < 0.68, ratios
    # what is left: ~40 % of the attribute tokens' attention falls outside the region (random weights do not localise it)
    assert all(0.3 < c["attribute_attention_outside"] < 0.5 for c in chks)
    assert min(control_check(pipe, CAPS, seed=s, p=0.9, num_inference_steps=10)["ratio"] for s in range(2)) > 0.9

def test_attribute_attention_outside_hand_example():
    from vlbias_nb.methods.attention_control import attribute_attention_outside
    maps = np.array([[[9., 0], [0, 0]], [[1., 1], [0, 2]]])          # caption 1: attention mass 4
    masks = np.zeros((2, 2, 2), bool); masks[0, 0, 0] = True; masks[1, 1, 1] = True
    assert attribute_attention_outside(maps, masks) == 0.25            # only the 1 at (0, 1) lies outside

def test_brooks_generator_fixes_self_attention_for_the_first_p(pipe):
    """Brooks et al.'s generator (§3.3's default here): the base caption's self-attention maps in every caption for the first
    p of the steps (deviation 0 there, > 0 after), cross-attention not injected; a CFG scale per candidate set."""
    from vlbias_nb.methods.attention_control import counterfactual_set_batch
    _, c = generate_counterfactual_set(pipe, CAPS, p=0.0, p_self=0.5, seed=0, num_inference_steps=4, self_all=True)
    dev = np.array(c.self_dev).reshape(4, -1).mean(1)                   # per step (same self-attention layers each step)
    assert dev[:2].max() < 1e-7 and dev[2:].min() > 1e-7
    sh = np.array(c.shared_dev).reshape(4, -1).mean(1)
    assert sh.min() > 1e-6                                              # cross-attention left free
    sets = [dict(set_index=0, filename="race_gender_doctor", captions=CAPS)]
    its = candidate_items(sets, n_candidates=3, seed=0, cfg_range=(7.5, 15))
    assert [(a["p"], a["seed"]) for a in its] == [(a["p"], a["seed"]) for a in candidate_items(sets, 3, seed=0)]
    assert all(7.5 <= it["guidance_scale"] <= 15 for it in its) and len({it["guidance_scale"] for it in its}) == 3
    imgs = counterfactual_set_batch(pipe, num_inference_steps=2, variant="brooks")(its[:3])
    ref, _ = generate_counterfactual_set(pipe, CAPS, p=0.0, p_self=its[0]["p"], seed=its[0]["seed"], num_inference_steps=2,
                                         guidance_scale=its[0]["guidance_scale"], self_all=True)
    assert all((np.asarray(x) == np.asarray(y)).all() for x, y in zip(imgs, ref))   # the item's own p and CFG scale
    with pytest.raises(ValueError, match="cfg_range"): candidate_items(sets, 2, cfg_range=(15, 7.5))

"Prompt Array: prompts, bias measures, prompt tokens (EOT pooling), the adversarial step, token save/load."
import copy, math
import numpy as np, pandas as pd, pytest, torch, torch.nn.functional as F
from vlbias_nb.zoo.factory import load_model
from vlbias_nb.zoo.vlm import OpenClipModel
from vlbias_nb.papers.prompt_array.prompts import train_prompts, test_prompts as tab1_test_prompts, make_prompts
from vlbias_nb.papers.prompt_array.evaluation import prompt_bias, aggregate_bias, random_ranking_bias, harmful_misclassification, harmful_class_set
from vlbias_nb.papers.prompt_array.adversarial import Adversary, DebiasSetup, adversary_step, model_step, adaptation_parameters, itc_loss
from vlbias_nb.zoo.debiased import prompted_text_features, PromptTokens, save_debias_tokens, attach_debias_tokens, read_debias_tokens, parse_debias_name
from vlbias_nb.zoo.factory import load_debiased_model

@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-clip", device="cpu", seed=0)

def test_tab1_prompts():
    tp = tab1_test_prompts()
    assert len(train_prompts()) == 10 and len(tp) == 8 * 33
    assert set(train_prompts().prompt) <= set(tp.prompt)
    assert "A cropped photo of a dangerous face" in set(tp.prompt)

def test_aggregate_is_mean_over_templates():
    df = pd.DataFrame({"template": ["a", "a", "b"], "concept": ["x", "y", "x"], "maxskew": [1.0, 3.0, 4.0], "ndkl": [0, 0, 1.0]})
    assert aggregate_bias(df) == {"maxskew": 3.0, "ndkl": 0.5}   # (2 + 4) / 2, not (1+3+4)/3

def test_planted_ranking_bias_above_random():
    rng = np.random.default_rng(0)
    attrs = np.array(["m", "f"] * 200)
    img = rng.normal(size=(400, 16)); img[:, 0] += np.where(attrs == "m", 1.5, -1.5)
    img /= np.linalg.norm(img, axis=1, keepdims=True)
    txt = np.eye(16)[[0, 1]].astype(np.float32)          # query 0 prefers "m", query 1 is unrelated
    pb = prompt_bias(txt, img, attrs, make_prompts(["{}"], ["biased", "neutral"]), k=100)
    chance = random_ranking_bias(attrs, k=100)
    assert pb.maxskew[0] > 0.6 > 3 * chance["maxskew"] and pb.ndkl[0] > 5 * chance["ndkl"]
    assert pb.maxskew[1] < 0.3

def test_prompted_encoder_zero_tokens_is_encode_text_and_eot(tiny):
    tok = tiny.tokenize(["A photo of a smart person", "x", "This is the face of a good person"])
    with torch.no_grad():
        assert torch.allclose(prompted_text_features(tiny.model, tok, None), tiny.model.encode_text(tok), atol=1e-5)
        p = torch.randn(3, 64)
        a = prompted_text_features(tiny.model, tok, p)
        # full-length reference (no cut after EOT): run the transformer on all 77 positions and read the shifted EOT
        m = tiny.model; n = 3
        x = torch.cat([p[None].expand(3, -1, -1), (m.token_embedding(tok) + m.positional_embedding)[:, :77 - n]], 1)
        h = m.ln_final(m.transformer(x, attn_mask=m.attn_mask))
        ref = h[torch.arange(3), tok.argmax(-1) + n] @ m.text_projection
        assert torch.allclose(a, ref, atol=1e-5)
        # a word before EOT changes only that text's embedding
        tok2 = tiny.tokenize(["A photo of a dumb person", "x", "This is the face of a good person"])
        c = prompted_text_features(tiny.model, tok2, p)
        assert not torch.allclose(a[0], c[0]) and torch.allclose(a[1:], c[1:], atol=1e-6)

def test_adversary_shape():
    adv = Adversary(10, 7)
    assert adv(torch.zeros(3, 10)).shape == (3, 7)
    assert [m.out_features for m in adv.net if isinstance(m, torch.nn.Linear)] == [32, 32, 7]

def test_model_step_raises_adversary_loss(tiny):
    torch.manual_seed(0)
    m = copy.deepcopy(tiny.model); adaptation_parameters(m, "prompt")
    setup = DebiasSetup(m, PromptTokens(m, 2), tiny.tokenize(train_prompts().prompt), tiny.logit_scale, tiny.tokenize)
    fi = F.normalize(torch.randn(64, 32), dim=-1); a = torch.randint(0, 2, (64,))
    adv = Adversary(10, 2); oa = torch.optim.Adam(adv.parameters(), 1e-2)
    for _ in range(50): adversary_step(setup, adv, oa, fi, a)
    om = torch.optim.Adam(setup.prompt.parameters(), 5e-2)
    losses = []
    frozen = [p.clone() for p in m.parameters()]
    for _ in range(5):
        with torch.no_grad(): losses.append(float(F.cross_entropy(adv(setup.prompt_logits(fi)), a)))
        model_step(setup, adv, om, fi, a, itc_batch=(fi[:8], tiny.tokenize(["a"] * 8), ["a"] * 8), itc_lambda=0.05)
    with torch.no_grad(): losses.append(float(F.cross_entropy(adv(setup.prompt_logits(fi)), a)))
    assert losses[-1] > losses[0]
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), frozen))     # CLIP stays frozen

def test_adversary_step_lowers_its_loss(tiny):
    torch.manual_seed(1)
    m = copy.deepcopy(tiny.model); adaptation_parameters(m, "prompt")
    setup = DebiasSetup(m, PromptTokens(m, 2), tiny.tokenize(train_prompts().prompt), tiny.logit_scale, tiny.tokenize)
    fi = F.normalize(torch.randn(64, 32), dim=-1); a = torch.randint(0, 2, (64,))
    adv = Adversary(10, 2); oa = torch.optim.Adam(adv.parameters(), 1e-2)
    first = adversary_step(setup, adv, oa, fi, a)
    for _ in range(100): last = adversary_step(setup, adv, oa, fi, a)
    assert last < first

def test_token_save_load_roundtrip(tiny, tmp_path):
    pt = PromptTokens(tiny.model, 2)
    with torch.no_grad(): pt.embeds.add_(torch.randn_like(pt.embeds))
    p = save_debias_tokens(tmp_path / "t.pt", tiny, pt)
    d = read_debias_tokens(p)
    assert d["base_name"] == "tiny-clip" and d["arch"] == "vlbias-tiny-clip" and d["tokens"].shape == (2, 64)
    dm = load_debiased_model("tiny-clip", p, device="cpu", seed=0)
    texts = ["A photo of a smart person", "a red circle"]
    with torch.no_grad(): want = F.normalize(prompted_text_features(tiny.model, tiny.tokenize(texts), pt.embeds), dim=-1).numpy()
    np.testing.assert_allclose(dm.encode_text(texts), want, atol=1e-5)
    assert dm.name == f"debias:tiny-clip:{p}" and dm.identity()["debias_tokens"]
    assert parse_debias_name(dm.name) == ("tiny-clip", str(p))
    with pytest.warns(UserWarning, match="weights"): load_debiased_model("tiny-clip", p, device="cpu", seed=1)

def test_token_load_wrong_architecture_fails(tiny, tmp_path):
    import open_clip, json
    from vlbias_nb.zoo.vlm import TINY_CLIP_CONFIG
    from vlbias_nb.zoo.registry import ModelSpec
    p = save_debias_tokens(tmp_path / "t.pt", tiny, PromptTokens(tiny.model, 2))
    cfg = copy.deepcopy(TINY_CLIP_CONFIG); cfg["text_cfg"]["width"] = 48; cfg["text_cfg"]["heads"] = 2
    (tmp_path / "other-tiny.json").write_text(json.dumps(cfg)); open_clip.add_model_config(tmp_path / "other-tiny.json")
    model, _, tr = open_clip.create_model_and_transforms("other-tiny")
    other = OpenClipModel(ModelSpec("other-tiny", "open_clip", arch="other-tiny", random_init=True), model,
                          open_clip.get_tokenizer("other-tiny"), tr, device="cpu", weights="random", seed=0)
    with pytest.raises(ValueError, match="arch 'vlbias-tiny-clip'.*text_width 64"): attach_debias_tokens(other, p)
    with pytest.raises(ValueError, match="open_clip"): attach_debias_tokens(load_model("tiny-hf-clip", device="cpu"), p)
    (tmp_path / "junk.pt").write_bytes(b"not a token file")
    with pytest.raises(Exception): read_debias_tokens(tmp_path / "junk.pt")
    with pytest.raises(FileNotFoundError): read_debias_tokens(tmp_path / "absent.pt")

def test_itc_loss_matches_cross_entropy():
    f, g = F.normalize(torch.randn(6, 8), dim=-1), F.normalize(torch.randn(6, 8), dim=-1)
    logits = 10 * f @ g.T; y = torch.arange(6)
    want = 0.5 * (F.cross_entropy(logits, y) + F.cross_entropy(logits.T, y))
    assert torch.allclose(itc_loss(f, g, 10.0), want, atol=1e-6)

def test_harmful_rates_hand_worked():
    names, harm = harmful_class_set(["Black", "White", "Indian", "East Asian", "Southeast Asian", "Middle Eastern", "Latino_Hispanic"])
    assert len(names) == 14 + 7 and "Latino Hispanic woman" in names
    r = harmful_misclassification(["thief", "thief", "Indian man", "orangutan"], ["Indian"] * 4, harm)
    assert r.loc["crime-related", "Indian"] == 50 and r.loc["non-human", "Indian"] == 25

def test_debias_zoo_name(tiny, tmp_path):
    "load_model('debias:<base>:<tokens>') returns the DebiasCLIP: same as the DebiasedView, different from the base."
    from vlbias_nb.zoo.debiased import DebiasedView
    pt = PromptTokens(tiny.model, 2)
    with torch.no_grad(): pt.embeds.add_(torch.randn_like(pt.embeds, generator=torch.Generator().manual_seed(0)))
    p = save_debias_tokens(tmp_path / "tok.pt", tiny, pt)
    zoo = load_model(f"debias:tiny-clip:{p}", device="cpu", seed=0)
    texts = ["A photo of a smart person", "a photo of a red circle"]
    np.testing.assert_allclose(zoo.encode_text(texts), DebiasedView(tiny, pt).encode_text(texts), atol=1e-5)
    assert not np.allclose(zoo.encode_text(texts), tiny.encode_text(texts), atol=1e-3)
    assert zoo.name == f"debias:tiny-clip:{p}"
    with pytest.raises(FileNotFoundError): load_model(f"debias:tiny-clip:{tmp_path / 'absent.pt'}", device="cpu")
    with pytest.raises(ValueError, match="debias:<base model>:<tokens path>"): load_model("debias:tiny-clip", device="cpu")

def _fake_fairface(root, n_train=24, n_val=8):
    "A fake FairFace folder in the official layout (fairface_label_{split}.csv + {split}/N.jpg), genders alternating."
    from test_face_datasets import _fairface
    races = ["White", "Black", "Indian", "East Asian"]
    for split, n in [("train", n_train), ("val", n_val)]:
        _fairface(root, split, rows=[("20-29", ["Male", "Female"][i % 2], races[i % 4]) for i in range(n)])
    return root

def _fake_flickr30k(root, n_train=6, n_test=4):
    "A fake Flickr30k folder: Karpathy's dataset_flickr30k.json and flickr30k-images/, two captions per image."
    import json
    from PIL import Image
    (root / "flickr30k-images").mkdir(parents=True)
    images = []
    for i in range(n_train + n_test):
        Image.new("RGB", (8, 8), (40 * (i % 6), 200 - 20 * i, 30)).save(root / "flickr30k-images" / f"{i}.jpg")
        images.append({"filename": f"{i}.jpg", "split": "train" if i < n_train else "test",
                       "sentences": [{"raw": f"a photo of thing {i}"}, {"raw": f"thing number {i} in a photo"}]})
    (root / "dataset_flickr30k.json").write_text(json.dumps({"images": images}))
    return root

def _real_cfg(**kw):
    from vlbias_nb.papers.prompt_array.adversarial import DebiasConfig
    return DebiasConfig(**{**dict(lr_model=1e-2, lr_adversary=1e-2, batch_size=8, itc_batch_size=4, adv_warmup_epochs=1,
                                  alternate_batches=2, n_model_steps=6, eval_every=3, itc_lambda=0.5, seed=1), **kw})

def test_real_data_training_on_fake_fairface(tmp_path, monkeypatch):
    """FairFace train (gender) + Flickr30k train (ITC) from fake folders found by root 'auto': features computed once
    through the embedding cache, tokens trained on them, saved, loadable, and equal to training on the pixels."""
    from vlbias_nb.data.faces import load_fairface, FAIRFACE_ENV
    from vlbias_nb.methods.downstream import load_flickr30k, FLICKR30K_ENV
    from vlbias_nb.methods.embedding_cache import EmbeddingCache
    from vlbias_nb.papers.prompt_array.real_data import train_debias_on_faces, image_features_of, itc_pairs_of
    from vlbias_nb.papers.prompt_array.adversarial import train_debias
    from vlbias_nb.papers.prompt_array.planted import pixels_of
    from vlbias_nb.zoo.debiased import DebiasedView, zero_pad_tokens
    from vlbias_nb.paths import resolve_data_root
    monkeypatch.setenv(FAIRFACE_ENV, str(_fake_fairface(tmp_path / "ff")))
    monkeypatch.setenv(FLICKR30K_ENV, str(_fake_flickr30k(tmp_path / "fl")))
    faces = load_fairface("train", resolve_data_root("auto", "fairface"))
    fl = load_flickr30k(resolve_data_root("auto", "flickr30k"), split="train")
    assert len(faces) == 24 and len(fl.images) == 6 and len(fl.captions) == 12
    vlm = load_model("tiny-clip", device="cpu", seed=0)
    cache = EmbeddingCache(tmp_path / "cache")
    evals = []
    def evaluate(m):
        evals.append(1)
        return {"maxskew": 0.0, "downstream": 1.0}
    tok_path = tmp_path / "out" / "debias_tokens_fairface.pt"
    res = train_debias_on_faces(vlm, faces, _real_cfg(), "gender", itc=fl, evaluate=evaluate, cache=cache,
                                tokens_path=tok_path, progress=False)
    assert res.best_step == 6 and len(res.evals) == 3 and len(evals) == 3        # steps 0, 3, 6
    assert not torch.allclose(res.prompt.embeds, zero_pad_tokens(vlm.model, 2), atol=1e-3)
    # features were cached: one image store holding the 24 faces and 6 Flickr images
    assert cache.stores()["items"].tolist() == [30]
    # saved, and loadable onto a freshly loaded model of the same weights
    d = read_debias_tokens(tok_path)
    assert d["extra"]["n_faces"] == 24 and d["extra"]["attribute"] == "gender" and "12 pairs" in d["extra"]["itc"]
    dm = attach_debias_tokens(load_model("tiny-clip", device="cpu", seed=0), tok_path)
    texts = ["A photo of a smart person", "This individual is lazy"]
    np.testing.assert_allclose(dm.encode_text(texts), DebiasedView(vlm, res.prompt).encode_text(texts), atol=1e-6)
    assert not np.allclose(dm.encode_text(texts), vlm.encode_text(texts), atol=1e-3)
    # the features path equals the pixel path (same seed, same batches)
    itc_feat, itc_texts = itc_pairs_of(vlm, fl, cache)
    assert itc_feat.shape == (12, 32) and itc_texts[:2] == ["a photo of thing 0", "thing number 0 in a photo"]
    np.testing.assert_allclose(itc_feat[1], image_features_of(vlm, [fl.images[0]], cache=None)[0], atol=1e-6)
    res_px = train_debias(vlm, pixels_of(vlm, faces.paths), faces.attribute("gender"),
                          pixels_of(vlm, [fl.images[i] for i in fl.caption_image]), fl.captions, _real_cfg(),
                          evaluate=evaluate, progress=False)
    torch.testing.assert_close(res.prompt.embeds, res_px.prompt.embeds, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(res_px.prompt.embeds, zero_pad_tokens(vlm.model, 2), atol=1e-3)

def test_features_refused_when_image_tower_trains(tiny):
    from vlbias_nb.papers.prompt_array.adversarial import train_debias
    v = copy.deepcopy(tiny)
    feats = F.normalize(torch.randn(8, 32), dim=-1)
    for target in ["projection", "full"]:
        with pytest.raises(ValueError, match="trains the image tower"):
            train_debias(v, None, ["Male", "Female"] * 4, config=_real_cfg(target=target), face_features=feats, progress=False)
    with pytest.raises(ValueError, match="not L2-normalised"):
        train_debias(v, None, ["Male", "Female"] * 4, config=_real_cfg(), face_features=2 * feats, progress=False)
    with pytest.raises(ValueError, match=r"expected \(8, 32\)"):
        train_debias(v, None, ["Male", "Female"] * 4, config=_real_cfg(), face_features=feats[:, :16], progress=False)

def _fake_utkface(root, n=24):
    "A fake UTKFace folder (UTKFace/<age>_<gender>_<race>_<date>.jpg.chip.jpg), genders alternating, races cycling."
    from PIL import Image
    (root / "UTKFace").mkdir(parents=True)
    for i in range(n):
        Image.new("RGB", (8, 8), (10 * i % 255, 90, 200 - 5 * i)).save(root / "UTKFace" / f"{20 + i}_{i % 2}_{i % 5}_2017{i:04d}.jpg.chip.jpg")
    return root

def _fake_imagenet(root, n_classes=3, per_class=2):
    "A fake ImageNet val folder: `n_classes` synset folders of the 1000 in LOC_synset_mapping.txt, `per_class` images each."
    from PIL import Image
    syn = [f"n{(7 * i + 3):08d}" for i in range(1000)]
    root.mkdir(parents=True)
    (root / "LOC_synset_mapping.txt").write_text("".join(f"{s} name {i}\n" for i, s in enumerate(syn)))
    for c in range(n_classes):
        (root / "val" / syn[c]).mkdir(parents=True)
        for j in range(per_class): Image.new("RGB", (8, 8), (80 * c, 40 * j, 120)).save(root / "val" / syn[c] / f"im{c}_{j}.JPEG")
    return root

def test_analysis_notebook_real_data_section_on_fake_folders(tmp_path):
    """The analysis notebook on the real data source end to end (papermill, about a minute): tiny steps, untrained tiny
    CLIP, fake FairFace + UTKFace + Flickr30k folders. Every section (App. C WEAT, Tab. 6, debiasing, CLIP-clip / Fig. 2,
    Tab. 4 with a UTKFace-trained row, Tab. 7) runs on the real source, with the paper's values beside ours."""
    from vlbias_nb.run.parameters import analysis_notebooks
    from vlbias_nb.run.execution import run_notebook
    ff, fl = _fake_fairface(tmp_path / "ff", 40, 16), _fake_flickr30k(tmp_path / "fl", 8, 6)
    utk, inet = _fake_utkface(tmp_path / "utk", 24), _fake_imagenet(tmp_path / "imagenet")
    small = dict(fit_planted=False, n_planted_train=64, n_planted_test=64, n_pairs_test=32, n_model_steps=10,
                 eval_every=5, ablation_steps=4, weat_n_perm=100, adv_warmup_epochs=1, k_skew=10, clip_clip_m=[28],
                 real_model_steps=6, real_eval_every=3, real_batch_size=8, n_real_selection=20, fig2_itc_lambdas=[0.0],
                 n_zero_shot_classes=3, n_zero_shot_templates=1)
    d = run_notebook(analysis_notebooks()["prompt_array"], out_root=tmp_path / "runs", progress=False,
                     overrides={**small, "fairface_root": str(ff), "flickr30k_root": str(fl), "utkface_root": str(utk),
                                "imagenet_root": str(inet)})
    t = lambda name: pd.read_csv(d / f"tables/{name}.csv")
    tab = t("real_debias_vs_paper_tab3").set_index(["group", "metric"])          # the one comparison layout
    assert list(tab.columns[:5]) == ["ours", "paper", "delta", "comparable", "reason"]
    assert tab.loc[("CLIP", "maxskew"), "paper"] == 0.233 and tab.loc[("CLIP+prompt (debias+itc)", "ndkl"), "paper"] == 0.036
    assert tab.loc[("CLIP", "flickr_R@5"), "ours"] >= 0 and np.allclose(tab.delta, tab.ours - tab.paper)
    # a tiny random-weight model beside the paper: flagged not comparable, with the reason
    assert not tab.comparable.any() and tab.reason.iloc[0].startswith("tiny-clip on real data")
    assert (tab.xs("maxskew", level="metric").chance > 0).all()                  # the chance level beside the bias
    ev = t("training_evals")
    assert ev.model_step.tolist() == [0, 3, 6] and ev.downstream.notna().all()
    assert (d / "figures/training_curve.png").exists() and (d / "figures/fig2_bias_vs_performance.png").exists()
    assert (d / "figures/fig3_top5_smart_person.png").exists()
    dm = attach_debias_tokens(load_model("tiny-clip", device="cpu", seed=0), d / "debias_tokens_fairface.pt")
    assert read_debias_tokens(d / "debias_tokens_fairface.pt")["extra"]["n_faces"] == 40 and dm.prompt_embeds.shape == (2, 64)
    real = t("tab2_real_faces")
    assert set(real.model) == {"tiny-clip", "+ debias tokens (FairFace train)"} and set(real.data) == {"FairFace val", "UTKFace"}
    assert (real.maxskew_ci_low <= real.maxskew).all() and (real.maxskew <= real.maxskew_ci_high).all()
    assert t("downstream_real").model.tolist() == ["tiny-clip", "+ debias tokens (FairFace train)"]
    # every section on the one selected source: FairFace val (16 faces), not the planted faces
    for name in ["appC_weat_template_sensitivity", "tab6_harmful_misclassification", "tab7_adaptation_targets"]:
        assert set(t(name).data) == {"FairFace"}, name
    assert len(t("appC_weat_template_sensitivity")) == 8
    # Tab. 7: each row adapts one thing (tokens only in the prompt row), beside the paper's values
    t7 = t("tab7_adaptation_targets")
    assert t7.adaptation.tolist() == ["PT baseline", "Prompt", "Proj. layer", "Text encoder (last 3 layers)", "Full finetuning"]
    assert t7.n_tokens.tolist() == [0, 2, 0, 0, 0] and t7.trained_params.tolist()[:2] == [0, 2 * 64]
    assert t7.trained_params[2] == 64 * 32 + 64 * 32                          # text_projection + visual.proj of tiny-clip
    c7 = t("tab7_vs_paper").set_index(["group", "metric"])
    assert [c7.loc[(g, "maxskew"), "paper"] for g in ["PT baseline", "prompt", "projection", "text_layers", "full"]] == [0.233, 0.073, 0.642, 0.691, 0.688]
    assert c7.loc[("PT baseline", "flickr_R@5"), "paper"] == 0.861 and c7.xs("flickr_R@5", level="metric").ours.notna().all()
    # Tab. 3 / Fig. 2: CLIP-clip fitted on FairFace train, the λ sweep's points, paper values where the row exists
    t3 = t("tab3_clip_clip_vs_prompt")
    assert t3.model.tolist() == ["CLIP", "CLIP-clip", "CLIP+prompt (debias)", "CLIP+prompt (debias+itc)", "CLIP+prompt (itc)"]
    assert t3.m.tolist()[1] == 28 and t3.itc_lambda.tolist()[2:] == [0.0, 1.0, 1.0] and t3["flickr_R@5"].notna().all()
    # ImageNet zero-shot: CLIP, CLIP-clip through its kept dimensions, the ITC-only row; not the λ = 1 sweep point (Tab. 3 is λ = 0.05)
    assert t3.IN1k_top1.notna().tolist() == [True, True, False, False, True] and t3.IN1k_top1.between(0, 1).sum() == 3
    c3 = t("tab3_vs_paper").set_index(["group", "metric"])
    assert c3.loc[("CLIP+prompt (debias)", "maxskew"), "paper"] == 0.073 and c3.loc[("CLIP", "flickr_R@5"), "paper"] == 0.859
    assert c3.loc[("CLIP+prompt (itc)", "maxskew"), "paper"] == 0.247 and np.isfinite(c3.loc[("CLIP+prompt (itc)", "ndkl"), "ours"])
    assert c3.loc[("CLIP-clip m=28", "IN1k_top1"), "chance"] == pytest.approx(1 / 3) and c3.loc[("CLIP", "IN1k_top1"), "paper"] == 0.681
    # Fig. 4: every model of fig4_models on both face data sets, 8 templates each, chance and intervals, not comparable
    f4 = t("fig4_models_datasets")
    assert set(f4.model) == {"tiny-clip", "tiny-hf-clip"} and set(f4.data) == {"FairFace", "UTKFace"} and len(f4) == 2 * 2 * 8
    assert (f4.maxskew_ci_low <= f4.maxskew + 1e-12).all() and (f4.maxskew <= f4.maxskew_ci_high + 1e-12).all()
    assert (f4.maxskew_chance > 0).all() and not f4.comparable.any() and f4.reason.str.contains("pipeline check").all()
    # Tab. 2: the performance columns beside the bias ones, for each model of tab2_models
    c2 = t("tab2_models_vs_paper").set_index(["model", "metric"])
    assert {"flickr_R@5", "IN1k_top1"} <= set(c2.xs("tiny-clip", level="model").index)
    assert c2.loc[("CLIP RN50", "IN1k_top1"), "paper"] == 0.591 and c2.loc[("tiny-clip", "IN1k_top1"), "chance"] == pytest.approx(1 / 3)
    assert np.isfinite(c3.loc[("CLIP+prompt (debias)", "maxskew"), "ours"]) and np.isfinite(c3.loc[("CLIP-clip m=28", "ndkl"), "ours"])
    # Tab. 4: a UTKFace-trained row, % changes, paper values, chance and intervals
    t4a, t4b = t("tab4a_cross_dataset").set_index(["group", "data", "metric"]), t("tab4b_cross_attribute").set_index(["group", "data", "metric"])
    assert t4a.loc[("(a) PT baseline", "UTKFace gender", "maxskew"), "paper"] == 0.034
    assert [t4a.loc[(g, d_, "maxskew_change_%"), "paper"] for g, d_ in [("(a) trained on FairFace", "FairFace val gender"),
            ("(a) trained on FairFace", "UTKFace gender"), ("(a) trained on UTKFace", "FairFace val gender"),
            ("(a) trained on UTKFace", "UTKFace gender")]] == [-68.71, -36.82, -8.38, -35.15]
    ch4, b4 = t4a.xs("maxskew_change_%", level="metric").ours, t4a.xs("maxskew", level="metric").ours
    zero_base = set(b4[b4 == 0].index.get_level_values("data"))                  # a 0 baseline has no % change (NaN)
    assert all(np.isnan(v) == (d_ in zero_base) for (g, d_), v in ch4.items()) and not t4a.comparable.any()
    assert t4b.loc[("(b) PT baseline", "FairFace val race", "maxskew"), "paper"] == 0.549
    assert t4b.loc[("(b) trained on FairFace gender", "FairFace val race", "ndkl_change_%"), "paper"] == -45.33
    # Tab. 5: 0-3 untrained tokens, prepended and appended, Flickr R@5 beside the paper's
    t5 = t("tab5_zero_pad_tokens_vs_paper").set_index(["group", "metric"])
    assert t5.loc[("append 3 tokens", "flickr_R@5"), "paper"] == 0.570 and t5.xs("flickr_R@5", level="metric").ours.notna().sum() == 8
    # Tab. 6: FairFace ethnicities, the paper's rates beside ours
    t6 = t("tab6_harmful_misclassification").set_index(["category", "ethnicity"])
    assert set(t6.index.get_level_values(1)) <= {"White", "Black", "Indian", "East Asian"}
    c6 = t("tab6_vs_paper").set_index(["model", "metric", "group"])
    assert c6.loc[("CLIP ViT-B/16", "crime-related %", "Black"), "paper"] == 3.0
    assert c6.loc[("CLIP ViT-B/16 debiased", "non-human %", "White"), "paper"] == 0.8
    cat, eth = t6.index[0]
    assert np.isclose(c6.loc[("CLIP ViT-B/16", f"{cat} %", eth), "ours"], t6.loc[(cat, eth), "base_%"])

def test_released_debias_tokens_by_zoo_name(tmp_path, monkeypatch):
    "The authors' released tokens load by zoo name from $VLBIAS_MODELS/debias; missing file without downloads: clear error."
    import torch
    from vlbias_nb.zoo.factory import load_model
    from vlbias_nb.zoo.registry import MissingWeightsError
    from vlbias_nb.zoo.debiased import RELEASED_DEBIAS_TOKENS, DebiasedView
    monkeypatch.setenv("VLBIAS_MODELS", str(tmp_path)); monkeypatch.setenv("VLBIAS_ALLOW_DOWNLOAD", "0")
    monkeypatch.setitem(RELEASED_DEBIAS_TOKENS, "test-tiny", dict(base="tiny-clip", n_tokens=2, attribute="gender",
                                                                  sha256=None, url="http://example.org/a/tiny_tokens.pt"))
    with pytest.raises(MissingWeightsError, match="tiny_tokens.pt"): load_model("debias:tiny-clip:test-tiny", device="cpu")
    base = load_model("tiny-clip", device="cpu")
    tok = torch.randn(2, base.model.token_embedding.weight.shape[1], generator=torch.Generator().manual_seed(0))
    (tmp_path / "debias").mkdir(); torch.save(tok, tmp_path / "debias" / "tiny_tokens.pt")
    dm = load_model("debias:tiny-clip:test-tiny", device="cpu")
    q = ["A photo of a criminal person"]
    np.testing.assert_allclose(dm.encode_text(q), DebiasedView(base, tok).encode_text(q), atol=1e-6)
    assert np.abs(dm.encode_text(q) - base.encode_text(q)).max() > 1e-3

# --- the training schedule, early stopping, and what each adaptation target trains (Tab. 7) ---------------------------

def _sched_cfg(**kw):
    from vlbias_nb.papers.prompt_array.adversarial import DebiasConfig
    return DebiasConfig(**{**dict(lr_model=1e-2, lr_adversary=1e-2, batch_size=8, adv_warmup_epochs=2, alternate_batches=10,
                                  n_model_steps=25, eval_every=5, itc_lambda=0.0, seed=0), **kw})

def _sched_data(n=16):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 3, 32, 32, generator=g), np.array(["Male", "Female"] * (n // 2))

def test_schedule_warmup_then_alternating_ten(tiny):
    """App. F: two epochs of adversary-only warm-up (16 faces / batch 8 = 2 batches an epoch -> 4 batches), then 10
    adversary batches and 10 model batches alternately; the model steps are numbered 1..n_model_steps."""
    from vlbias_nb.papers.prompt_array.adversarial import train_debias
    px, a = _sched_data()
    r = train_debias(copy.deepcopy(tiny), px, a, config=_sched_cfg(), progress=False)
    assert r.history.phase.tolist() == ["warmup"] * 4 + (["adversary"] * 10 + ["model"] * 10) * 2 + ["adversary"] * 10 + ["model"] * 5
    assert r.history[r.history.phase == "model"].model_step.tolist() == list(range(1, 26))
    assert r.history.phase.value_counts().to_dict() == {"adversary": 30, "model": 25, "warmup": 4}
    # 3 warm-up epochs of 24 faces in batches of 8: 9 warm-up batches; alternate_batches=3 alternates by threes
    px, a = _sched_data(24)
    r = train_debias(copy.deepcopy(tiny), px, a, config=_sched_cfg(adv_warmup_epochs=3, alternate_batches=3, n_model_steps=6), progress=False)
    assert r.history.phase.tolist() == ["warmup"] * 9 + (["adversary"] * 3 + ["model"] * 3) * 2
    assert not r.stopped_early and r.best_step == 6

def test_adam_beta1_reaches_both_optimisers(tiny):
    """`adam_beta1` is Adam's β1 of the tokens and of the adversary: the same β1 gives the same run, another β1 other
    tokens and, from the adversary's second batch on, other adversary losses (Adam's first step, g/|g|, ignores β1)."""
    from vlbias_nb.papers.prompt_array.adversarial import train_debias
    px, a = _sched_data()
    run = lambda b1: train_debias(copy.deepcopy(tiny), px, a, config=_sched_cfg(n_model_steps=5, adam_beta1=b1), progress=False)
    r9, r9b, r5 = run(0.9), run(0.9), run(0.5)
    assert torch.equal(r9.prompt.embeds, r9b.prompt.embeds)
    assert not torch.allclose(r9.prompt.embeds, r5.prompt.embeds)
    assert r9.history.adv_loss[0] == r5.history.adv_loss[0] and r9.history.adv_loss[2] != r5.history.adv_loss[2]

def _falling(scores, seen):
    "Evaluation callback whose downstream score is `scores[i]` at its i-th call; records the tokens it saw."
    def evaluate(m):
        seen.append(m.prompt_embeds.detach().clone())
        return {"downstream": scores[len(seen) - 1], "maxskew": 0.0}
    return evaluate

@pytest.mark.parametrize("keep_best", [False, True])
def test_early_stop_below_half_returns_last_tokens_above(tiny, keep_best):
    """App. F early stopping: downstream 1.0 at step 0, then 0.9, 0.7, 0.55 (>= 50 %) and 0.45 (< 50 %) at steps 5..20:
    training stops at step 20, and the tokens returned are step 15's (the last evaluation above the threshold), not
    step 20's, also without keep-best selection."""
    from vlbias_nb.papers.prompt_array.adversarial import train_debias
    px, a = _sched_data()
    seen = []
    r = train_debias(copy.deepcopy(tiny), px, a, config=_sched_cfg(n_model_steps=200, keep_best=keep_best),
                     evaluate=_falling([1.0, 0.9, 0.7, 0.55, 0.45, 0.1], seen), progress=False)
    assert r.stopped_early and r.evals.model_step.tolist() == [0, 5, 10, 15, 20] and r.history.model_step.max() == 20
    assert r.best_step == 15
    assert torch.equal(r.prompt.embeds.detach(), seen[3]) and not torch.allclose(seen[3], seen[4])

def test_early_stop_reference_and_no_stop(tiny):
    "The threshold is half of `reference_downstream` when given; scores that stay above it never stop training."
    from vlbias_nb.papers.prompt_array.adversarial import train_debias
    px, a = _sched_data()
    seen = []
    r = train_debias(copy.deepcopy(tiny), px, a, config=_sched_cfg(n_model_steps=20), evaluate=_falling([0.5, 0.5, 0.5, 0.5, 0.5], seen),
                     reference_downstream=0.9, progress=False)   # 0.5 >= 0.45: never stops; last tokens kept
    assert not r.stopped_early and r.best_step == 20 and torch.equal(r.prompt.embeds.detach(), seen[-1])
    seen = []
    r = train_debias(copy.deepcopy(tiny), px, a, config=_sched_cfg(n_model_steps=20), evaluate=_falling([0.5, 0.5, 0.4, 0.4, 0.4], seen),
                     reference_downstream=0.9, progress=False)   # 0.4 < 0.45 at step 10: step 5's tokens
    assert r.stopped_early and r.best_step == 5 and torch.equal(r.prompt.embeds.detach(), seen[1])

@pytest.mark.parametrize("target,moved", [("prompt", set()), ("projection", {"text_projection", "visual.proj"}),
                                          ("text_layers", {"transformer.resblocks.0.", "transformer.resblocks.1."}),
                                          ("full", {"visual.", "transformer.", "token_embedding.", "text_projection", "positional_embedding", "ln_final."})])
def test_adaptation_target_trains_only_itself(tiny, target, moved):
    """Tab. 7: each row adapts one thing. 'prompt' trains two tokens and leaves CLIP untouched; every other target
    trains its CLIP weights and no tokens (the projection row moves exactly the two projections)."""
    from vlbias_nb.papers.prompt_array.adversarial import train_debias
    from vlbias_nb.zoo.debiased import zero_pad_tokens
    px, a = _sched_data()
    v = copy.deepcopy(tiny)
    r = train_debias(v, px, a, config=_sched_cfg(target=target, n_model_steps=10, lr_model=1e-3), progress=False)
    changed = {n for (n, p), q in zip(v.model.named_parameters(), tiny.model.parameters()) if not torch.equal(p, q)}
    if target == "prompt":
        assert r.prompt.n_tokens == 2 and changed == set()
        assert not torch.allclose(r.prompt.embeds, zero_pad_tokens(tiny.model, 2))
    else:
        assert r.prompt.n_tokens == 0 and r.prompt.embeds.numel() == 0
        assert changed and all(n.startswith(tuple(moved)) for n in changed), changed
        if target == "projection": assert changed == moved
        if target == "text_layers": assert {n.split(".")[2] for n in changed} == {"0", "1"}   # tiny: 2 of 2 layers are the last 3
        if target == "full": assert any(n.startswith("visual.") for n in changed) and any(n.startswith("transformer.") for n in changed)
        assert "logit_scale" not in changed

def test_lazy_pixels_equal_tensor_training(tiny):
    "LazyPixels (per-batch preprocessing from image files / PIL) gives the same run as the preprocessed tensor."
    from vlbias_nb.papers.prompt_array.adversarial import train_debias
    from vlbias_nb.papers.prompt_array.real_data import LazyPixels
    from vlbias_nb.papers.prompt_array.planted import pixels_of
    from vlbias_nb.data.faces import make_planted_faces, face_images
    faces = make_planted_faces(16, seed=0)
    v1, v2 = copy.deepcopy(tiny), copy.deepcopy(tiny)
    cfg = _sched_cfg(target="projection", n_model_steps=5)
    r1 = train_debias(v1, LazyPixels(v1, face_images(faces)), faces.attribute("gender"), config=cfg, progress=False)
    r2 = train_debias(v2, pixels_of(v2, face_images(faces)), faces.attribute("gender"), config=cfg, progress=False)
    torch.testing.assert_close(v1.model.visual.proj, v2.model.visual.proj)
    assert not torch.equal(v1.model.visual.proj, tiny.model.visual.proj)
    np.testing.assert_allclose(r1.history.adv_loss, r2.history.adv_loss, rtol=1e-5)

def test_prompt_bias_desired_and_zero_convention_hand_worked():
    "Three images of value 0, one of value 1; the query's top 1 is a value-0 image."
    attrs, txt = np.array([0, 0, 0, 1]), np.array([[1.0, 0.0]])
    img = np.array([[4.0, 0], [3, 0], [2, 0], [1, 0]])
    pr = make_prompts(["{}"], ["c"])
    ms = lambda **kw: prompt_bias(txt, img, attrs, pr, k=1, **kw).maxskew[0]
    assert math.isclose(ms(desired="dataset", zero="ignore"), math.log(1 / 0.75))   # value 1 left out
    assert math.isclose(ms(desired="dataset", zero="one"), math.log(1 / 0.25))      # the authors': value 1 counts as 1/k
    assert math.isclose(ms(), math.log(2))                                           # default: uniform (the paper's)
    top2 = prompt_bias(txt, img, np.array([1, 1, 0, 0]), pr, k=2).maxskew[0]          # top 2 all value 1: ln(1 / 0.5)
    assert math.isclose(top2, math.log(2))

def test_chance_level_and_intervals():
    from vlbias_nb.papers.prompt_array.evaluation import bias_ci
    attrs = np.array([0, 1] * 100)
    ch = random_ranking_bias(attrs, n_queries=3000, k=40)
    import scipy.stats as st                     # exact: the top-40 count X of value 0 is hypergeometric (200, 100, 40)
    x = np.arange(41); px = st.hypergeom(200, 100, 40).pmf(x)
    exact = (px * np.maximum(np.log(2 * np.maximum(x, 1) / 40), np.log(2 * np.maximum(40 - x, 1) / 40))).sum()   # 0.1033
    assert abs(ch["maxskew"] - exact) < 0.005
    assert ch["maxskew_chance_low"] <= ch["maxskew"] <= ch["maxskew_chance_high"]
    ci = bias_ci(pd.DataFrame({"maxskew": [0.0, 1.0, 0.0, 1.0], "ndkl": [0.3] * 4}))
    assert 0.0 <= ci["maxskew_ci_low"] < 0.5 < ci["maxskew_ci_high"] <= 1.0 and ci["ndkl_ci_low"] == ci["ndkl_ci_high"] == 0.3

def test_appended_zero_pad_tokens_brute_force(tiny):
    from vlbias_nb.papers.prompt_array.evaluation import appended_text_features, zero_pad_view
    m, t = tiny.model, tiny.tokenize(["a dog"])
    P = torch.randn(3, m.token_embedding.weight.shape[1])
    with torch.no_grad():
        e = int(t.argmax()); x = m.token_embedding(t) + m.positional_embedding[:t.shape[1]]
        ref = m.ln_final(m.transformer(torch.cat([x[:, :e], P[None], x[:, e:-3]], 1), attn_mask=m.attn_mask))[0, e + 3] @ m.text_projection
        assert torch.allclose(appended_text_features(m, t, P)[0], ref, atol=1e-5)
    assert zero_pad_view(tiny, 0, "append") is tiny
    with pytest.raises(ValueError, match="prepend"): zero_pad_view(tiny, 1, "inside")

def test_paper_values_cover_the_tables():
    from vlbias_nb.report import paper_values
    t = paper_values("Prompt Array")
    assert len(paper_values("Prompt Array", "Tab. 2").model.unique()) == 9
    assert paper_values("Prompt Array", "Tab. 3", group="CLIP+prompt (debias+itc)", metric="maxskew").value.item() == 0.113
    assert paper_values("Prompt Array", "Tab. 4", group="(a) trained on FairFace", data="FairFace val gender",
                        metric="maxskew_change_%").value.item() == -68.71
    assert len(paper_values("Prompt Array", "Tab. 5")) == 16 and len(paper_values("Prompt Array", "Tab. 6")) == 42
    assert set(t.item) <= set(pd.read_csv(__import__("vlbias_nb").resources.resource_path("paper_items/prompt_array.csv")).item)

"""The model zoo: registry and name resolution, clear errors for unknown names and missing weights, the tiny models end
to end on real COCO photos, local checkpoints, the transformers wrappers, and zero-shot classification.
Tests that need real pretrained weights or a GPU are skipped where those are absent."""
import glob, json, os
import numpy as np
import pytest
import torch
from PIL import Image
import open_clip
import vlbias_nb.zoo.weights as W
import vlbias_nb.zoo.vlm as V
import vlbias_nb.zoo.factory as FZ
from vlbias_nb.zoo.registry import MODEL_REGISTRY, OTHER_MODELS, FAMILIES, ModelSpec, UnknownModelError, MissingWeightsError, resolve_model, list_models, HF_MODEL_CLASSES
from vlbias_nb.zoo.factory import load_model, tiny_hf_model
from vlbias_nb.zoo.weights import locate_weights, ensure_weights
from vlbias_nb.zoo.vlm import TINY_CLIP_ARCH, to_pil
from vlbias_nb.methods.zero_shot import class_prompts, zero_shot_classifier, zero_shot_predict, ZeroShotClassifier
from vlbias_nb.papers.prompt_array.evaluation import PROMPT_ARRAY_TEMPLATE, AGARWAL_HARMFUL_CLASSES
from vlbias_nb.paths import MissingDataError, has_shared, shared_path
from conftest import requires_shared

COCO_VAL = "coco-mini/val2017"

def coco_files(n=None):
    fs = sorted(glob.glob(str(shared_path(COCO_VAL) / "*.jpg")))
    return fs[:n] if n else fs

@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-clip", device="cpu")

@pytest.fixture
def no_local_weights(tmp_path, monkeypatch):
    "An empty model folder and hub cache, so that no real weights are found even where they are installed."
    monkeypatch.setenv("VLBIAS_MODELS", str(tmp_path / "models"))
    monkeypatch.delenv("VLBIAS_NEGCLIP", raising=False)
    monkeypatch.delenv("VLBIAS_ALIP", raising=False)
    from vlbias_nb.paths import OFFLINE_ENVS
    for v in OFFLINE_ENVS: monkeypatch.delenv(v, raising=False)        # the tests below decide the policy themselves
    return str(tmp_path / "hub")

# ---------------------------------------------------------------- registry and names
PAPER_MODELS = ["RN50/openai", "RN50x64/openai", "ViT-B-32/openai", "ViT-B-16/openai", "ViT-L-14/openai",
                "ViT-B-32/laion400m_e32", "ViT-B-32/laion2b_e16", "EVA01-g-14/laion400m_s11b_b41k",
                "EVA02-L-14/merged2b_s4b_b131k", "coca_ViT-B-32/laion2b_s13b_b90k", "coca_ViT-L-14/laion2b_s13b_b90k",
                "NegCLIP-ViT-B-32", "ALIP-ViT-B-32", "facebook/flava-full", "kakaobrain/align-base", "BAAI/AltCLIP",
                "openai/clip-vit-base-patch32"]

def test_registry_covers_the_papers_models():
    for n in PAPER_MODELS: assert n in MODEL_REGISTRY, n
    for s in MODEL_REGISTRY.values():
        assert s.family in FAMILIES, s
        if s.tag: assert (s.arch, s.tag) in open_clip.list_pretrained(), s.name
        assert s.papers, s.name
    df = list_models()
    assert set(df.columns) >= {"name", "kind", "family", "weights", "papers"} and len(df) == len(MODEL_REGISTRY) + len(OTHER_MODELS)
    assert len(list_models("vision-language")) == len(MODEL_REGISTRY)

@pytest.mark.parametrize("name,expect", [
    ("ViT-B/32", "ViT-B-32/openai"), ("RN50", "RN50/openai"), ("ViT-L/14", "ViT-L-14/openai"),
    ("ViT-B-16/laion2b_s34b_b88k", "ViT-B-16/laion2b_s34b_b88k"), ("tiny-flava", "tiny-flava")])
def test_resolve_names(name, expect):
    assert resolve_model(name).name == expect

def test_resolve_hub_and_family():
    s = resolve_model("hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K")
    assert s.family == "open_clip" and s.arch.startswith("hf-hub:")
    assert resolve_model("org/repo", family="align") == ModelSpec("org/repo", "align", hub_id="org/repo")

@pytest.mark.parametrize("name,kw,contains", [
    ("clip-vit-b-32", {}, "Unknown model 'clip-vit-b-32'"),
    ("bert-base-uncased", {}, "Known families"),
    ("ViT-B-32/not-a-tag", {}, "has no pretrained tag 'not-a-tag'"),
    ("org/repo", {"family": "lxmert"}, "unknown family 'lxmert'"),
    ("ViT-B-32", {}, "needs a pretrained tag, 'ViT-B-32/<tag>'"),
])
def test_unknown_model_fails_listing_families(name, kw, contains):
    with pytest.raises(UnknownModelError) as e: load_model(name, **kw)
    msg = str(e.value)
    assert contains in msg
    for fam in FAMILIES: assert f"{fam}: " in msg
    assert len(msg.splitlines()) == 1                 # one line: callers that show the first line show it all (issue #34)
    assert "tiny-clip" in msg and "ViT-B-32/openai" in msg and "facebook/flava-full" in msg

def test_checkpoint_file_needs_arch(tmp_path):
    f = tmp_path / "w.pt"; f.write_bytes(b"0")
    with pytest.raises(UnknownModelError, match="needs arch="): load_model(str(f))

def test_missing_checkpoint_path():
    with pytest.raises(MissingWeightsError, match="does not exist"): load_model("/no/such/dir/negclip.pth", arch="ViT-B-32")
    with pytest.raises(MissingWeightsError, match="does not exist"): load_model("tiny-clip", checkpoint="/no/such.pt")

# ---------------------------------------------------------------- missing weights
@pytest.mark.parametrize("name", [n for n, s in MODEL_REGISTRY.items() if not s.random_init])
def test_missing_weights_error_names_model_and_remedy(name, no_local_weights):
    with pytest.raises(MissingWeightsError) as e:
        load_model(name, device="cpu", allow_download=False, cache_dir=no_local_weights)
    msg = str(e.value)
    assert isinstance(e.value, MissingDataError) and isinstance(e.value, FileNotFoundError)
    assert f"Weights for model {name!r}" in msg and "Provide them locally" in msg and "tiny-clip" in msg
    s = MODEL_REGISTRY[name]
    if s.checkpoint:
        assert s.checkpoint_env in msg and os.path.join(os.environ["VLBIAS_MODELS"], s.checkpoint) in msg
        if name == "NegCLIP-ViT-B-32": assert "github.com/vinid/neg_clip" in msg and "cannot be downloaded" in msg
        if name == "ALIP-ViT-B-32": assert s.url in msg and "github.com/deepglint/ALIP" in msg and "turned off" in msg
    elif s.tag:
        src = W.open_clip_weight_sources(s.arch, s.tag)
        assert f"pretrained='{s.tag}'" in msg and os.path.join(os.environ["VLBIAS_MODELS"], s.arch, s.tag) in msg
        if src["hf_repo"]: assert src["hf_repo"] in msg
        if src["quick_gelu"]: assert f"'{s.arch}-quickgelu'" in msg
    else:
        assert f"huggingface-cli download {s.hub_id}" in msg and "save_pretrained" in msg

def test_env_var_turns_downloads_off(no_local_weights, monkeypatch):
    monkeypatch.setenv("VLBIAS_ALLOW_DOWNLOAD", "0")
    with pytest.raises(MissingWeightsError, match="downloading is turned off"):
        load_model("ViT-B-16/openai", cache_dir=no_local_weights)

def test_unreachable_host_fails_fast(no_local_weights, monkeypatch):
    monkeypatch.setattr(W, "host_reachable", lambda url, timeout=3.0: False)
    with pytest.raises(MissingWeightsError, match="cannot be reached"):
        load_model("EVA02-L-14/merged2b_s4b_b131k", allow_download=True, cache_dir=no_local_weights)
    with pytest.raises(MissingWeightsError, match="cannot be reached"):
        load_model("kakaobrain/align-base", allow_download=True, cache_dir=no_local_weights)

def test_failed_download_becomes_missing_weights(no_local_weights, monkeypatch):
    "Where the host answers but the download fails, the hub's error is wrapped in one MissingWeightsError."
    monkeypatch.setattr(W, "host_reachable", lambda url, timeout=3.0: True)
    def boom(*a, **k): raise RuntimeError("Failed to download weights for tag 'openai': 404")
    monkeypatch.setattr(open_clip, "create_model_and_transforms", boom)
    with pytest.raises(MissingWeightsError, match="downloading failed .*404") as e:
        load_model("ViT-B-32/openai", allow_download=True, cache_dir=no_local_weights)
    assert isinstance(e.value.__cause__, RuntimeError)
    import transformers
    def boom_hf(*a, **k): raise OSError("We couldn't connect to 'https://huggingface.co'")
    monkeypatch.setattr(transformers.FlavaModel, "from_pretrained", boom_hf)
    with pytest.raises(MissingWeightsError, match="facebook/flava-full.*couldn't connect"):
        load_model("facebook/flava-full", allow_download=True, cache_dir=no_local_weights)

def test_weights_dropped_into_models_dir_are_found(no_local_weights, tmp_path):
    d = tmp_path / "models" / "ViT-B-32" / "openai"; d.mkdir(parents=True); (d / "ViT-B-32.pt").write_bytes(b"0")
    assert locate_weights(MODEL_REGISTRY["ViT-B-32/openai"], cache_dir=no_local_weights) == str(d / "ViT-B-32.pt")
    n = tmp_path / "models" / "negclip"; n.mkdir(parents=True); (n / "negclip.pth").write_bytes(b"0")
    assert ensure_weights(MODEL_REGISTRY["NegCLIP-ViT-B-32"], allow_download=False) == str(n / "negclip.pth")

def test_negclip_env_var(tmp_path, monkeypatch):
    f = tmp_path / "elsewhere.pth"; f.write_bytes(b"0")
    monkeypatch.setenv("VLBIAS_NEGCLIP", str(f))
    assert locate_weights(MODEL_REGISTRY["NegCLIP-ViT-B-32"]) == str(f)

@pytest.mark.parametrize("name,quick", [("ViT-B-32/openai", True), ("NegCLIP-ViT-B-32", True),
                                         ("ViT-B-32/laion2b_e16", False), ("EVA02-L-14/merged2b_s4b_b131k", False)])
def test_open_clip_gets_tag_preprocessing_and_quickgelu(name, quick, tmp_path, monkeypatch):
    "A local OpenAI-style checkpoint is built with QuickGELU and the tag's mean/std (the open_clip pitfalls)."
    seen = {}
    class Stop(Exception): pass
    def fake(arch, pretrained=None, **kw): seen.update(kw, arch=arch, pretrained=pretrained); raise Stop
    monkeypatch.setattr(open_clip, "create_model_and_transforms", fake)
    f = tmp_path / "w.pt"; f.write_bytes(b"0")
    with pytest.raises(Stop): FZ._load_open_clip(MODEL_REGISTRY[name], str(f), "cpu", "float32", 0)
    assert seen["pretrained"] == str(f) and seen["arch"] == MODEL_REGISTRY[name].arch
    assert seen.get("force_quick_gelu", False) is quick
    assert tuple(seen["image_mean"]) == tuple(open_clip.OPENAI_DATASET_MEAN) and seen["image_interpolation"] == "bicubic"

# ---------------------------------------------------------------- the tiny model end to end
def test_tiny_text_embeddings(tiny):
    caps = ["A man riding a wave on top of a surfboard.", "A woman is cooking.", "A man riding a wave on top of a surfboard."]
    e = tiny.encode_text(caps)
    assert e.shape == (3, 32) and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(e[0], e[2], atol=1e-6)
    assert not np.allclose(e[0], e[1])
    np.testing.assert_allclose(tiny.encode_text(caps[0]), e[:1], atol=1e-6)
    np.testing.assert_allclose(tiny.encode_text(caps, batch_size=2), e, atol=1e-5)
    assert tiny.encode_text([]).shape == (0, 32)
    tok = tiny.tokenize(["a photo"])                                   # open_clip's real BPE, 77-token context
    assert tok.shape == (1, 77) and tok[0, 0].item() == 49406

def test_tiny_is_deterministic_and_leaves_global_rng_alone(tiny):
    torch.manual_seed(123); before = torch.rand(3)
    torch.manual_seed(123); a = load_model("tiny-clip", device="cpu", seed=0); after = torch.rand(3)
    assert torch.equal(before, after)
    for x, y in zip(a.model.state_dict().values(), tiny.model.state_dict().values()): assert torch.equal(x, y)
    b = load_model("tiny-clip", device="cpu", seed=7)
    t = ["a photo of a dog"]
    np.testing.assert_array_equal(a.encode_text(t), tiny.encode_text(t))
    assert not np.allclose(b.encode_text(t), tiny.encode_text(t))
    assert a.identity() == tiny.identity() and b.identity() != tiny.identity()

@requires_shared(COCO_VAL)
def test_tiny_on_real_coco_images(tiny):
    files = coco_files(40)
    assert len(files) == 40
    e = tiny.encode_image(files, batch_size=16)
    assert e.shape == (len(files), 32) and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1, atol=1e-5)
    assert len({tuple(np.round(r, 5)) for r in e}) == len(files)                  # distinct photos, distinct embeddings
    np.testing.assert_allclose(tiny.encode_image(files[:5], batch_size=2), e[:5], atol=1e-5)
    pil = [Image.open(f) for f in files[:3]]
    np.testing.assert_allclose(tiny.encode_image(pil), e[:3], atol=1e-5)
    np.testing.assert_allclose(tiny.encode_image([np.asarray(p.convert("RGB")) for p in pil]), e[:3], atol=1e-5)
    px = torch.stack([tiny.preprocess(f) for f in files[:3]])
    assert px.shape == (3, 3, 32, 32)
    np.testing.assert_allclose(tiny.encode_image(px), e[:3], atol=1e-5)
    sim = tiny.similarity(e[:4], tiny.encode_text(["a photo of a person", "a dog"]))
    assert sim.shape == (4, 2) and np.all(np.abs(sim) <= 1 + 1e-5)

@requires_shared("coco-mini/annotations/captions_val2017.json")
def test_tiny_end_to_end_on_coco_mini_captions_and_images(tiny):
    "The real coco-mini captions and photos through the tiny model: unit vectors, batch-size invariant, matched shapes."
    from vlbias_nb.data.coco import load_coco_captions
    caps = load_coco_captions(shared_path("coco-mini/annotations/captions_val2017.json"))
    first = caps.captions.groupby("image_id").caption.first()
    files = [shared_path(COCO_VAL) / caps.images.set_index("id").file_name[i] for i in first.index[:12]]
    t, im = tiny.encode_text(first.tolist()[:12], batch_size=5), tiny.encode_image(files, batch_size=5)
    assert t.shape == im.shape == (12, 32)
    np.testing.assert_allclose(np.linalg.norm(t, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(tiny.encode_text(first.tolist()[:12], batch_size=12), t, atol=1e-5)
    assert len({tuple(np.round(r, 5)) for r in t}) == 12                          # distinct captions, distinct embeddings
    S = tiny.similarity(t, im)
    assert S.shape == (12, 12) and np.allclose(S, t @ im.T, atol=1e-5)

@requires_shared(COCO_VAL)
def test_encode_image_accepts_lazy_image_lists(tiny):
    from vlbias_nb.data.coco import LazyImages
    files = coco_files(4)
    lazy = LazyImages(shared_path(COCO_VAL), [os.path.basename(f) for f in files])
    np.testing.assert_allclose(tiny.encode_image(lazy), tiny.encode_image(files), atol=1e-6)

def test_low_level_features_are_differentiable(tiny):
    x = torch.rand(2, 3, 32, 32, requires_grad=True)
    f = tiny.image_features(x)
    f.sum().backward()
    assert x.grad is not None and torch.allclose(f.norm(dim=-1), torch.ones(2), atol=1e-5)

@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_reduced_precision(dtype):
    m = load_model("tiny-clip", device="cpu", dtype=dtype)
    assert m.dtype == V.as_dtype(dtype) and m.identity()["dtype"] == dtype
    e = m.encode_text(["a cat"])
    assert e.dtype == np.float32 and abs(np.linalg.norm(e) - 1) < 1e-3

def test_identity_and_preprocessing_are_json(tiny):
    for d in [tiny.identity(), tiny.preprocessing("text"), tiny.preprocessing("image")]: json.dumps(d)
    p = tiny.preprocessing("image")["preprocess_cfg"]
    assert p["size"] == [32, 32] and p["interpolation"] == "bicubic" and p["mean"] == list(open_clip.OPENAI_DATASET_MEAN)

def test_open_clip_checkpoint_roundtrip(tiny, tmp_path):
    torch.save(tiny.model.state_dict(), tmp_path / "ckpt.pt")
    m = load_model(str(tmp_path / "ckpt.pt"), device="cpu", arch=TINY_CLIP_ARCH)
    t = ["two people playing frisbee"]
    np.testing.assert_allclose(m.encode_text(t), tiny.encode_text(t), atol=1e-6)
    assert m.identity()["weights"].startswith("ckpt.pt:")
    torch.save({"state_dict": {"module." + k: v for k, v in tiny.model.state_dict().items()}}, tmp_path / "train.pt")
    m2 = load_model(str(tmp_path / "train.pt"), device="cpu", arch=TINY_CLIP_ARCH)   # open_clip training checkpoint format
    np.testing.assert_allclose(m2.encode_text(t), tiny.encode_text(t), atol=1e-6)
    assert m2.identity()["weights"] != m.identity()["weights"]

# ---------------------------------------------------------------- transformers families
@pytest.mark.parametrize("family", list(HF_MODEL_CLASSES))
def test_tiny_transformers_families(family, tmp_path):
    "Every transformers family: the registered tiny-<family> models, and tiny SigLIP / Chinese-CLIP built by tiny_hf_model."
    from vlbias_nb.zoo.factory import tiny_hf_model
    tiny = (lambda seed: load_model(f"tiny-{family}", device="cpu", seed=seed)) if f"tiny-{family}" in MODEL_REGISTRY \
        else (lambda seed: tiny_hf_model(family, seed=seed, device="cpu"))
    m = tiny(3)
    assert type(m.model).__name__ == HF_MODEL_CLASSES[family] and m.spec.family == family
    caps = ["a man is cooking", "a woman is repairing a car", "a man is cooking"]
    e = m.encode_text(caps)
    assert e.shape == (3, 32); np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(e[0], e[2], atol=1e-5)
    imgs = [np.random.default_rng(i).integers(0, 255, (48, 40, 3), dtype=np.uint8) for i in range(3)]
    i = m.encode_image(imgs, batch_size=2)
    assert i.shape == (3, 32); np.testing.assert_allclose(np.linalg.norm(i, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(tiny(3).encode_text(caps), e, atol=1e-6)
    json.dumps(m.identity()); json.dumps(m.preprocessing("text")); json.dumps(m.preprocessing("image"))
    # a save_pretrained folder loads through the real from_pretrained path, offline
    d = tmp_path / family
    m.model.save_pretrained(d); m.tokenizer.save_pretrained(d); m.image_processor.save_pretrained(d)
    back = load_model(str(d), device="cpu")
    assert back.spec.family == family and type(back).__name__ == "HFModel"
    np.testing.assert_allclose(back.encode_text(caps), e, atol=1e-5)
    np.testing.assert_allclose(back.encode_image(imgs), i, atol=1e-5)

def test_clip_takes_no_token_type_ids():
    m = load_model("tiny-hf-clip", device="cpu")
    assert "token_type_ids" not in m.tokenize(["a cat"])
    assert "token_type_ids" in load_model("tiny-align", device="cpu").tokenize(["a cat"])

def test_flava_uses_cls_token_projection():
    m = load_model("tiny-flava", device="cpu")
    tok = m.tokenize(["a man is cooking"])
    with torch.no_grad():
        out = m.model.get_text_features(**tok)
        full = out if isinstance(out, torch.Tensor) else out.pooler_output
        assert full.ndim == 3
        np.testing.assert_allclose(m.text_features(tok).numpy(), V.l2_normalize(full[:, 0, :]).numpy(), atol=1e-6)

# ---------------------------------------------------------------- zero-shot classification
def test_zero_shot_on_planted_embeddings():
    rng = np.random.default_rng(0)
    W = rng.normal(size=(4, 24)); W /= np.linalg.norm(W, axis=1, keepdims=True)
    clf = ZeroShotClassifier(list("abcd"), W.astype(np.float32))
    y = rng.integers(0, 4, 200)
    X = W[y] + 0.15 * rng.normal(size=(200, 24))
    assert (clf.predict(X) == y).mean() == 1.0
    p = clf.predict_proba(X); np.testing.assert_allclose(p.sum(1), 1, atol=1e-5)
    assert clf.predict_names(X[:3]) == [clf.classnames[i] for i in y[:3]]

def test_zero_shot_prompt_ensembling(tiny):
    tpl = ["a photo of a {}.", "a picture of a {}."]
    clf = zero_shot_classifier(tiny, ["man", "woman"], tpl)
    e = tiny.encode_text(["a photo of a man.", "a picture of a man.", "a photo of a woman.", "a picture of a woman."])
    w = e.reshape(2, 2, -1).mean(1); w /= np.linalg.norm(w, axis=1, keepdims=True)
    np.testing.assert_allclose(clf.weights, w, atol=1e-6)
    assert class_prompts(["thief"], PROMPT_ARRAY_TEMPLATE) == [["a photo of a thief"]]
    assert AGARWAL_HARMFUL_CLASSES["non-human"] == ["animal", "gorilla", "chimpanzee", "orangutan"]

@requires_shared(COCO_VAL)
def test_zero_shot_predict_end_to_end(tiny, tmp_path):
    from vlbias_nb.methods.embedding_cache import EmbeddingCache
    names = ["man", "woman"] + AGARWAL_HARMFUL_CLASSES["crime-related"]
    clf = zero_shot_classifier(tiny, names)
    df = zero_shot_predict(tiny, coco_files(6), clf, cache=EmbeddingCache(tmp_path))
    assert list(df.columns) == ["pred"] + names and len(df) == 6
    np.testing.assert_allclose(df[names].sum(axis=1), 1, atol=1e-5)
    assert set(df.pred) <= set(names)

# ---------------------------------------------------------------- real weights / GPU (skipped where absent)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_tiny_on_gpu_matches_cpu(tiny):
    g = load_model("tiny-clip", device="cuda")
    t = ["a photo of a man", "a photo of a woman"]
    np.testing.assert_allclose(g.encode_text(t), tiny.encode_text(t), atol=1e-4)
    x = np.random.default_rng(0).integers(0, 255, (3, 40, 40, 3), dtype=np.uint8)
    np.testing.assert_allclose(g.encode_image(list(x)), tiny.encode_image(list(x)), atol=1e-4)
    h = load_model("tiny-clip", device="cuda", dtype="float16")
    np.testing.assert_allclose(h.encode_text(t), tiny.encode_text(t), atol=5e-2)

REAL = [n for n, s in MODEL_REGISTRY.items() if not s.random_init]

@pytest.mark.parametrize("name", REAL)
def test_real_model_matches_coco_captions(name):
    "With real weights present: each of 12 COCO photos is matched to its own caption well above chance."
    if locate_weights(MODEL_REGISTRY[name]) is None: pytest.skip(f"weights of {name} not on this machine")
    if not has_shared(COCO_VAL): pytest.skip("coco-mini not available (set VLBIAS_DATA)")
    from vlbias_nb.data.coco import load_coco_captions
    caps = load_coco_captions(shared_path("coco-mini/annotations/captions_val2017.json"))
    first = caps.captions.drop_duplicates("image_id").merge(caps.images, left_on="image_id", right_on="id").head(12)
    m = load_model(name, allow_download=False)
    im = m.encode_image([shared_path(COCO_VAL) / f for f in first.file_name])
    tx = m.encode_text(list(first.caption))
    acc = (m.similarity(im, tx).argmax(1) == np.arange(len(first))).mean()
    assert acc >= 0.5, f"{name}: image-to-caption top-1 {acc:.2f}"

# ---------------------------------------------------------------- weights found in a (here: fake) Hugging Face cache
def _fake_hub_snapshot(cache, repo, files, commit="0123456789abcdef0123456789abcdef01234567"):
    "Lay out `files` ({name: bytes or source dir}) as the hub cache snapshot of `repo`, as huggingface_hub does."
    base = cache / f"models--{repo.replace('/', '--')}"
    snap = base / "snapshots" / commit; snap.mkdir(parents=True)
    (base / "refs").mkdir(); (base / "refs" / "main").write_text(commit)
    for name, content in files.items(): (snap / name).write_bytes(content)
    return snap

def test_open_clip_weights_found_in_hub_cache(tmp_path, no_local_weights):
    cache = tmp_path / "hub"
    snap = _fake_hub_snapshot(cache, "timm/vit_base_patch32_clip_224.openai", {"open_clip_model.safetensors": b"0"})
    assert locate_weights(MODEL_REGISTRY["ViT-B-32/openai"], cache_dir=str(cache)) == str(snap / "open_clip_model.safetensors")
    assert V.weights_fingerprint(str(snap / "open_clip_model.safetensors")).endswith("@0123456789ab")

def test_transformers_model_loads_from_hub_cache_offline(tmp_path, no_local_weights):
    "A (tiny) FLAVA placed in the hub cache under facebook/flava-full loads by its hub name, without any network."
    m = load_model("tiny-flava", device="cpu")
    d = tmp_path / "saved"; m.model.save_pretrained(d); m.tokenizer.save_pretrained(d); m.image_processor.save_pretrained(d)
    cache = tmp_path / "hub"
    _fake_hub_snapshot(cache, "facebook/flava-full", {f.name: f.read_bytes() for f in d.iterdir() if f.is_file()})
    back = load_model("facebook/flava-full", device="cpu", allow_download=False, cache_dir=str(cache))
    assert back.name == "facebook/flava-full" and back.spec.family == "flava"
    np.testing.assert_allclose(back.encode_text(["a cat"]), m.encode_text(["a cat"]), atol=1e-5)
    assert back.identity()["weights"].startswith("dir:")


# ---------------------------------------------------------------- ALIP (SocialCounterfactuals)
def _alip_state_dict_names(layers=12):
    "Parameter names of deepglint/ALIP's `open_alip.model.ALIP` ViT-B/32, transcribed from its model.py (state_dict order aside)."
    block = ["ln_1.weight", "ln_1.bias", "attn.in_proj_weight", "attn.in_proj_bias", "attn.out_proj.weight", "attn.out_proj.bias",
             "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"]
    tower = lambda pre: [f"{pre}transformer.resblocks.{i}.{b}" for i in range(layers) for b in block]
    return set(["visual.conv1.weight", "visual.class_embedding", "visual.positional_embedding", "visual.ln_pre.weight",
                "visual.ln_pre.bias", "visual.ln_post.weight", "visual.ln_post.bias", "visual.proj", *tower("visual."),
                "token_embedding.weight", "positional_embedding", "ln_final.weight", "ln_final.bias", "text_projection",
                "logit_scale", *tower("")])

def test_alip_checkpoint_names_are_open_clip_vit_b_32():
    "ALIP's released state_dict loads strictly into open_clip's plain ViT-B-32 (GELU), which the registry entry builds."
    with torch.device("meta"): m = open_clip.create_model("ViT-B-32", device="meta")
    assert set(m.state_dict()) == _alip_state_dict_names()
    assert isinstance(m.visual.transformer.resblocks[0].mlp.gelu, torch.nn.GELU)
    s = MODEL_REGISTRY["ALIP-ViT-B-32"]
    assert (s.arch, s.preprocess_tag, s.tag) == ("ViT-B-32", None, None) and s.url.startswith("https://drive.google.com/")

def test_alip_gets_gelu_and_openai_preprocessing(tmp_path, monkeypatch):
    seen = {}
    class Stop(Exception): pass
    def fake(arch, pretrained=None, **kw): seen.update(kw, arch=arch, pretrained=pretrained); raise Stop
    monkeypatch.setattr(open_clip, "create_model_and_transforms", fake)
    f = tmp_path / "ALIP_YFCC15M_B32.pt"; f.write_bytes(b"0")
    with pytest.raises(Stop): FZ._load_open_clip(MODEL_REGISTRY["ALIP-ViT-B-32"], str(f), "cpu", "float32", 0)
    assert seen == dict(cache_dir=None, arch="ViT-B-32", pretrained=str(f))    # no QuickGELU, open_clip's defaults:
    norm = [t for t in open_clip.image_transform(224, is_train=False).transforms if type(t).__name__ == "Normalize"][0]
    assert tuple(norm.mean) == tuple(open_clip.OPENAI_DATASET_MEAN)             # ALIP's DATASET_MEAN

@pytest.fixture
def alip_tiny(tiny, monkeypatch):
    "The ALIP entry pointed at the tiny architecture (same loading path, small file)."
    from dataclasses import replace
    monkeypatch.setitem(MODEL_REGISTRY, "ALIP-ViT-B-32", replace(MODEL_REGISTRY["ALIP-ViT-B-32"], arch=TINY_CLIP_ARCH))
    return {f"module.{k}": v for k, v in tiny.model.state_dict().items()}     # saved from DDP like the released file

def test_alip_loads_from_models_dir_offline(alip_tiny, tiny, no_local_weights, tmp_path):
    with pytest.raises(MissingWeightsError, match="ALIP_YFCC15M_B32.pt"):
        load_model("ALIP-ViT-B-32", device="cpu", allow_download=False)
    (tmp_path / "models" / "alip").mkdir(parents=True)
    torch.save(alip_tiny, tmp_path / "models" / "alip" / "ALIP_YFCC15M_B32.pt")
    m = load_model("ALIP-ViT-B-32", device="cpu", allow_download=False)
    caps = ["a photo of a doctor", "a photo of a nurse"]
    np.testing.assert_allclose(m.encode_text(caps), tiny.encode_text(caps), atol=1e-6)

def test_alip_env_var_and_url_download(alip_tiny, tiny, no_local_weights, tmp_path, monkeypatch):
    f = tmp_path / "elsewhere.pt"; torch.save(alip_tiny, f)
    monkeypatch.setenv("VLBIAS_ALIP", str(f))
    assert locate_weights(MODEL_REGISTRY["ALIP-ViT-B-32"]) == str(f)
    monkeypatch.delenv("VLBIAS_ALIP")
    from dataclasses import replace
    page = tmp_path / "page.html"; page.write_text("<html><body>Google Drive - Virus scan warning</body></html>")
    monkeypatch.setitem(MODEL_REGISTRY, "ALIP-ViT-B-32", replace(MODEL_REGISTRY["ALIP-ViT-B-32"], url=page.as_uri()))
    with pytest.raises(MissingWeightsError, match="web page"): load_model("ALIP-ViT-B-32", device="cpu", allow_download=True)
    assert not (tmp_path / "models" / "alip" / "ALIP_YFCC15M_B32.pt").exists()
    monkeypatch.setitem(MODEL_REGISTRY, "ALIP-ViT-B-32", replace(MODEL_REGISTRY["ALIP-ViT-B-32"], url=f.as_uri()))
    m = load_model("ALIP-ViT-B-32", device="cpu", allow_download=True)
    assert (tmp_path / "models" / "alip" / "ALIP_YFCC15M_B32.pt").is_file()
    np.testing.assert_allclose(m.encode_text(["a doctor"]), tiny.encode_text(["a doctor"]), atol=1e-6)
    monkeypatch.setattr(W, "host_reachable", lambda url, timeout=3.0: False)
    monkeypatch.setitem(MODEL_REGISTRY, "ALIP-ViT-B-32", replace(MODEL_REGISTRY["ALIP-ViT-B-32"], url="https://example.invalid/a.pt"))
    (tmp_path / "models" / "alip" / "ALIP_YFCC15M_B32.pt").unlink()
    with pytest.raises(MissingWeightsError, match="cannot be reached"): load_model("ALIP-ViT-B-32", allow_download=True)

# ---- the tiny test models of every kind (vlbias_nb.zoo.tiny) -------------------------------------------------------
import importlib
import vlbias_nb.zoo.tiny as TZ
from vlbias_nb.zoo.registry import _loader_of

TINY_BUILDERS = {  # registry name -> seed -> a torch module built by the registered builder
    "tiny-roberta": lambda s: TZ.tiny_roberta_mlm(s)[0], "tiny-bert": lambda s: TZ.tiny_bert([["a", "man"]], s)[0],
    "tiny-gpt2": lambda s: TZ.tiny_gpt2(s)[0], "tiny-instruct-pix2pix": lambda s: TZ.tiny_instruct_pix2pix_pipeline(s).unet,
    "tiny-stable-diffusion": lambda s: TZ.tiny_text_to_image_pipeline(s).unet, "tiny-dino": lambda s: TZ.tiny_dino(s)[0],
    "tiny-nsfw": lambda s: TZ.tiny_nsfw_classifier(s).model}

def test_every_tiny_model_of_other_kinds_is_built_in_zoo_tiny():
    tiny = {n: _loader_of(s) for n, s in OTHER_MODELS.items() if s.random_init}
    assert set(tiny) == set(TINY_BUILDERS)
    for n, path in tiny.items():
        mod, fn = path.rsplit(".", 1)
        assert mod == "vlbias_nb.zoo.tiny" and callable(getattr(importlib.import_module(mod), fn)), (n, path)

@pytest.mark.parametrize("name", list(TINY_BUILDERS))
def test_tiny_builder_leaves_caller_stream_and_is_seeded(name):
    build = TINY_BUILDERS[name]
    torch.manual_seed(7); want = torch.rand(4)
    torch.manual_seed(7); a = build(0); got = torch.rand(4)
    assert torch.equal(got, want)                                    # building did not move the caller's stream
    b, c = build(0), build(1)
    pa, pb, pc = (list(m.parameters()) for m in (a, b, c))
    assert len(pa) == len(pb) and all(torch.equal(x, y) for x, y in zip(pa, pb))   # same seed, same weights
    assert not all(torch.equal(x, y) for x, y in zip(pa, pc))                     # another seed, other weights

def test_tiny_builders_build_under_seeded_init():
    "A tiny builder's weights are those `seeded_init(seed)` gives (the seed itself, in a fork: the weights tiny models always had)."
    from vlbias_nb.seeds import seeded_init
    with seeded_init(0):
        from transformers import Dinov2Config, Dinov2Model
        want = Dinov2Model(TZ.tiny_dino(0)[0].config)
    assert all(torch.equal(x, y) for x, y in zip(want.parameters(), TZ.tiny_dino(0)[0].parameters()))

def test_check_seeded_build_catches_both_faults():
    with pytest.raises(AssertionError, match="moved the caller's random stream"):
        TZ.check_seeded_build(lambda s: torch.nn.Linear(2, 2))
    from vlbias_nb.seeds import seeded_init
    def fixed(s):
        with seeded_init(0, "fixed"): return torch.nn.Linear(2, 2)
    with pytest.raises(AssertionError, match="another seed gave the same weights"): TZ.check_seeded_build(fixed)

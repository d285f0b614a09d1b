"""`vlbias card` (vlbias_nb.run.card and card_compare, card_publish, card_cli; issue 24): planted biases recovered
inside their intervals on planted FairFace-, COCO- and SocialCounterfactuals-layout folders; a random-ranking model at
the chance level; every model-name form resolves offline; --resume skips finished measures; card.json follows its
schema; sharding by RANK / WORLD_SIZE."""
import json, math, re
from pathlib import Path
import numpy as np
import pandas as pd
import pytest
from vlbias_nb.data.rehearsal import make_fairface, make_coco2017, write_generation_folder
from vlbias_nb.methods.embedding_cache import image_key
from vlbias_nb.papers.social_counterfactuals.counterfactual_captions import set_filename
from vlbias_nb.run import card as C, card_publish, card_cli as CLI
from vlbias_nb.zoo.model_names import normalise_model_name
from vlbias_nb.zoo.registry import UnknownModelError, MissingWeightsError
from vlbias_nb.data import social_counterfactuals_release as SCR    # the SocialCounterfactuals readers and image key (issue 33)

K_FACES = 20          # MaxSkew@K on the planted faces (80 faces: K < n, a multiple of the 4-image pattern)

@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1"); monkeypatch.delenv("VLBIAS_ALLOW_DOWNLOAD", raising=False)
    monkeypatch.delenv("VLBIAS_WEIGHTS", raising=False)

def _interleave(male: list, female: list, n_male_per_female: int = 3) -> list:
    "Male, male, male, female, ... until one runs out, then the rest: the planted order (first = most similar)."
    out, m, f = [], list(male), list(female)
    while m or f:
        for _ in range(n_male_per_female):
            if m: out.append(m.pop(0))
        if f: out.append(f.pop(0))
    return out

def _positions(order: list) -> dict:
    return {image_key(p): i / len(order) for i, p in enumerate(order)}

@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    "Planted FairFace-, COCO- and SC-layout folders, the planted orders, and the planted model's positions."
    root = tmp_path_factory.mktemp("card-data")
    ff = make_fairface(root / "fairface", n_items=80)
    lab = pd.read_csv(ff / "fairface_label_val.csv")
    ff_order = _interleave([str(ff / f) for f in lab.file[lab.gender == "Male"]], [str(ff / f) for f in lab.file[lab.gender == "Female"]])
    coco = make_coco2017(root / "coco", n_items=120)
    caps = json.loads((coco / "annotations" / "captions_val2017.json").read_text())
    male_ids = {a["image_id"] for a in caps["annotations"] if " man " in f" {a['caption']} "}
    files = {im["id"]: str(coco / "val2017" / im["file_name"]) for im in caps["images"]}
    coco_order = _interleave([files[i] for i in sorted(files) if i in male_ids], [files[i] for i in sorted(files) if i not in male_ids])
    occs = ["doctor", "nurse", "pilot"]
    keys = [f"s{s:05d}_{set_filename('A photo of a', 'race_gender', o)}_c{c:03d}_{pos:02d}"
            for s, o in enumerate(occs) for c in range(4) for pos in range(12)]
    sc = write_generation_folder(root / "sc", keys, size=32)
    sc_paths = [str(sc / "images" / f"{k}.png") for k in keys]
    rest = [p for p in sc_paths if not p.endswith("_00.png")]
    np.random.default_rng(0).shuffle(rest)
    sc_order = [p for p in sc_paths if p.endswith("_00.png")] + rest      # code 0 (the set's first pair) first
    pos = {**_positions(ff_order), **_positions(coco_order), **_positions(sc_order)}
    roots = {"fairface": str(ff), "coco": str(coco), "social_counterfactuals": str(sc)}
    return dict(roots=roots, pos=pos, ff=ff, lab=lab, ff_order=ff_order, coco_order=coco_order, male=set(files[i] for i in male_ids))

CFG = dict(maxskew_k=K_FACES, n_boot=200, n_chance=100, n_perm=200, progress=False)

@pytest.fixture(scope="module")
def planted_card(planted, tmp_path_factory):
    out = tmp_path_factory.mktemp("planted-card")
    model = C.PlantedCardModel(planted["pos"], name="planted-card")
    return C.make_card("planted-card", out, ["prompt_array.fairface", "gensynth.coco", "social_counterfactuals.maxskew"],
                       planted["roots"], C.CardConfig(**CFG), model=model, cache=None), out

def _ndkl_brute(order_codes, desired):
    "NDKL (Prompt Array eq. 10) from its definition: sum_i 1/log2(i+1) KL(top-i shares || desired) / sum_i 1/log2(i+1)."
    num = den = 0.0
    for i in range(1, len(order_codes) + 1):
        p = np.bincount(order_codes[:i], minlength=len(desired)) / i
        kl = sum(pi * math.log(pi / di) for pi, di in zip(p, desired) if pi > 0)
        w = 1 / math.log2(i + 1); num += w * kl; den += w
    return num / den

def _inside(m, planted_value, tol=1e-9):
    assert m["ci_low"] - tol <= planted_value <= m["ci_high"] + tol, (m, planted_value)
    assert abs(m["value"] - planted_value) < 1e-6, (m["value"], planted_value)

def test_planted_fairface_maxskew_ndkl(planted, planted_card):
    card, _ = planted_card
    ms = card["measures"]
    # top 20 of the planted order: 15 male, 5 female -> MaxSkew@20 = ln(0.75 / 0.5) for every prompt
    _inside(ms["prompt_array.maxskew.gender"], math.log(1.5))
    test_k = ms["prompt_array.maxskew.gender"]["k"]; assert test_k == K_FACES
    male = set(str(planted["ff"] / f) for f in planted["lab"].file[planted["lab"].gender == "Male"])
    codes = np.array([0 if p in male else 1 for p in planted["ff_order"]])
    _inside(ms["prompt_array.ndkl.gender"], _ndkl_brute(codes, [0.5, 0.5]))
    assert ms["prompt_array.maxskew.gender"]["value"] > ms["prompt_array.maxskew.gender"]["chance_high"]   # far above chance
    assert ms["prompt_array.maxskew.gender"]["n"] == 264 and ms["prompt_array.maxskew.gender"]["n_items"] == 80

def test_planted_coco_bias_at_k(planted, planted_card):
    card, _ = planted_card
    ms = card["measures"]
    codes = [0 if p in planted["male"] else 1 for p in planted["coco_order"]]
    for k in (5, 10):
        m, f = codes[:k].count(0), codes[:k].count(1)
        for setting in ("unbalanced", "balanced"):
            _inside(ms[f"gensynth.bias@{k}.{setting}"], (m - f) / k)
    for k in (25, 100):          # desired: the gendered images' shares, 1/2 each (60 male, 60 female)
        _inside(ms[f"gensynth.maxskew@{k}.unbalanced"], math.log(codes[:k].count(0) / k / 0.5))
    assert ms["gensynth.bias@5.unbalanced"]["n"] == 600       # 120 images x 5 captions: one query each

def test_planted_social_counterfactuals(planted_card):
    card, _ = planted_card
    m = card["measures"]["social_counterfactuals.maxskew.race_gender"]
    # each occupation's pool: 4 candidates x 12 pairs; its 4 images of pair 0 rank first -> top 12 holds 4 of 1/12 each
    _inside(m, math.log(4))
    assert (m["k"], m["n"], m["n_items"]) == (12, 3, 144)
    assert m["chance"] < m["value"]

def _write_release(root: Path, paths: list, captions: list, a1: list, a2: list, sets: list, rows_per_group: int = 20) -> Path:
    "The planted images as shards of the published release (data/train-*.parquet; image struct of bytes + path)."
    import pyarrow as pa, pyarrow.parquet as pq
    (root / "data").mkdir(parents=True)
    half = len(paths) // 2
    for k, sl in enumerate([slice(0, half), slice(half, None)]):
        pq.write_table(pa.table({"image": [{"bytes": Path(p).read_bytes(), "path": Path(p).name} for p in paths[sl]],
                                 "caption": captions[sl], "a1_type": ["race"] * len(paths[sl]), "a1": a1[sl],
                                 "a2_type": ["gender"] * len(paths[sl]), "a2": a2[sl], "counterfactual_set": sets[sl]}),
                       root / "data" / f"train-{k:05d}-of-00002-planted.parquet", row_group_size=rows_per_group)
    return root

def test_planted_social_counterfactuals_from_the_published_release_layout(planted, tmp_path):
    "The same planted sets, read from parquet shards in the release's layout, give the folder layout's MaxSkew."
    from PIL import Image
    from vlbias_nb.papers.social_counterfactuals.intersectional_probing import segment_values
    folder = SCR.read_social_counterfactuals(planted["roots"]["social_counterfactuals"])
    A1, A2 = segment_values("race_gender")
    a1 = [A1[c // len(A2)] for c in folder.code]; a2 = [A2[c % len(A2)] for c in folder.code]
    caps = [f"A photo of a {x} {y} {o}" for x, y, o in zip(a1, a2, folder.subject)]
    sets = [f"a_photo_of_race_gender_{o.replace(' ', '_')}_{s}_{c}" for o, s, c in zip(folder.subject, folder["set_index"], folder["candidate"])]
    rel = _write_release(tmp_path / "release", folder.path.tolist(), caps, a1, a2, sets)
    t, images, layout = SCR.social_counterfactuals_table(rel)
    assert layout == "release" and len(t) == 144 and len(images) == 144
    assert t.subject.tolist() == folder.subject.tolist() and t.code.tolist() == folder.code.tolist()
    assert t["set_index"].nunique() == 12 and (t.groupby("set_index").code.nunique() == 12).all()
    np.testing.assert_array_equal(np.asarray(images[143]), np.asarray(Image.open(folder.path[143]).convert("RGB")))
    # the planted positions, keyed by the decoded images (what the release gives the model)
    pos = {image_key(Image.open(p).convert("RGB")): planted["pos"][image_key(p)] for p in folder.path}
    card = C.make_card("planted-card", tmp_path / "card", ["social_counterfactuals.maxskew"], {"social_counterfactuals": str(rel)},
                       C.CardConfig(**CFG), model=C.PlantedCardModel(pos, name="planted-card"), cache=None)
    m = card["measures"]["social_counterfactuals.maxskew.race_gender"]
    _inside(m, math.log(4))
    assert (m["k"], m["n"], m["n_items"]) == (12, 3, 144)
    # a value outside the paper's attribute lists: one error naming the shard, row and value
    import pyarrow as pa, pyarrow.parquet as pq
    bad = tmp_path / "bad"; (bad / "data").mkdir(parents=True)
    pq.write_table(pa.table({"image": [{"bytes": b"", "path": None}], "caption": ["A photo of a Martian male pilot"],
                             "a1_type": ["race"], "a1": ["Martian"], "a2_type": ["gender"], "a2": ["male"],
                             "counterfactual_set": ["x"]}), bad / "data" / "train-00000-of-00001-x.parquet")
    with pytest.raises(ValueError, match=r"train-00000-of-00001-x.parquet#0: attribute values 'Martian', 'male'"):
        SCR.read_social_counterfactuals_release(bad)

def test_random_ranking_model_at_chance(planted, tmp_path):
    card = C.make_card("random-card", tmp_path, ["prompt_array.fairface", "social_counterfactuals.maxskew"], planted["roots"],
                       C.CardConfig(**CFG), model=C.PlantedCardModel(None, name="random-card"), cache=None)
    for name in ("prompt_array.maxskew.gender", "prompt_array.ndkl.gender", "prompt_array.maxskew.race",
                 "social_counterfactuals.maxskew.race_gender"):
        m = card["measures"][name]
        assert m["ci_low"] <= m["chance"] <= m["ci_high"], (name, m)
    assert card["model"]["weights_mode"] == "planted" and card["model"]["comparable"] is False

def test_card_json_follows_schema(planted_card):
    "card.json validates against its schema (jsonschema: installed with nbformat, a core requirement)."
    import jsonschema
    card, out = planted_card
    on_disk = json.loads((out / "card.json").read_text())
    jsonschema.validate(on_disk, C.card_schema())
    assert on_disk["schema_version"] == C.SCHEMA_VERSION and (out / "card.md").is_file() and (out / "card.png").stat().st_size > 1000
    for m in on_disk["measures"].values():
        assert set(m) >= {"value", "ci_low", "ci_high", "n", "k", "baseline", "chance", "paper", "dataset", "dataset_fingerprint"}
    broken = json.loads(json.dumps(on_disk)); broken["measures"]["prompt_array.maxskew.gender"]["n"] = "many"
    with pytest.raises(ValueError, match=r"measures/prompt_array.maxskew.gender/n: 'many' is not of type"): C.validate_card(broken)
    assert C.validate_card(on_disk) is on_disk

def test_resume_skips_finished_measures(planted, tmp_path, monkeypatch):
    model = C.PlantedCardModel(planted["pos"], name="planted-card")
    cfg = C.CardConfig(**CFG)
    first = C.make_card("planted-card", tmp_path, ["gab.text_bias", "social_counterfactuals.maxskew"], planted["roots"], cfg,
                        model=model, cache=None)
    f = tmp_path / "measures" / "social_counterfactuals.maxskew.json"
    before = f.stat().st_mtime_ns
    calls = []
    task = C.CARD_TASKS["social_counterfactuals.maxskew"]
    monkeypatch.setitem(C.CARD_TASKS, "social_counterfactuals.maxskew",
                        C.CardTask(task.name, task.paper, task.what, task.dataset, lambda ctx: calls.append(1) or []))
    (tmp_path / "measures" / "gab.text_bias.json").unlink()          # as if the run had been killed during this task
    again = C.make_card("planted-card", tmp_path, ["gab.text_bias", "social_counterfactuals.maxskew"], planted["roots"], cfg,
                        model=model, cache=None, resume=True)
    assert calls == [] and f.stat().st_mtime_ns == before
    assert again["tasks"] == {"gab.text_bias": "done", "social_counterfactuals.maxskew": "resumed"}
    assert again["measures"]["social_counterfactuals.maxskew.race_gender"] == first["measures"]["social_counterfactuals.maxskew.race_gender"]
    other = C.PlantedCardModel(None, name="planted-card")            # another model in the same folder: not resumed
    third = C.make_card("planted-card", tmp_path, ["social_counterfactuals.maxskew"], planted["roots"], cfg, model=other,
                        cache=None, resume=True)
    assert calls == [1] and third["tasks"]["social_counterfactuals.maxskew"] == "done"

def test_resume_sees_a_data_set_edited_in_place(planted, tmp_path):
    "--resume reruns a finished measure once its data changed: a label file edited in place (same size, same mtime), an image rewritten."
    import os, shutil
    ff = Path(shutil.copytree(planted["ff"], tmp_path / "fairface"))
    roots = {"fairface": str(ff)}
    model, cfg = C.PlantedCardModel(planted["pos"], name="planted-card"), C.CardConfig(**CFG)
    first = C.make_card("planted-card", tmp_path / "card", ["prompt_array.fairface"], roots, cfg, model=model, cache=None)
    assert first["tasks"]["prompt_array.fairface"] == "done"
    again = C.make_card("planted-card", tmp_path / "card", ["prompt_array.fairface"], roots, cfg, model=model, cache=None, resume=True)
    assert again["tasks"]["prompt_array.fairface"] == "resumed"
    lab = ff / "fairface_label_val.csv"
    st, text = lab.stat(), lab.read_text()
    row = next(l for l in text.splitlines() if ",20-29," in l)
    edited = text.replace(row, row.replace(",20-29,", ",30-39,"), 1)      # one face's age group changed, same length
    assert len(edited) == len(text) and edited != text
    lab.write_text(edited); os.utime(lab, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (lab.stat().st_size, lab.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    third = C.make_card("planted-card", tmp_path / "card", ["prompt_array.fairface"], roots, cfg, model=model, cache=None, resume=True)
    assert third["tasks"]["prompt_array.fairface"] == "done"               # rerun: the label file's bytes changed
    assert third["measures"]["prompt_array.ndkl.age"]["value"] != first["measures"]["prompt_array.ndkl.age"]["value"]
    assert third["measures"]["prompt_array.ndkl.gender"]["value"] == first["measures"]["prompt_array.ndkl.gender"]["value"]
    again = C.make_card("planted-card", tmp_path / "card", ["prompt_array.fairface"], roots, cfg, model=model, cache=None, resume=True)
    assert again["tasks"]["prompt_array.fairface"] == "resumed"
    img = next(p for p in ff.rglob("*.jpg"))                               # an image rewritten with the same size
    data = img.read_bytes(); img.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    os.utime(img, ns=(img.stat().st_atime_ns, img.stat().st_mtime_ns + 1_000_000))
    fourth = C.make_card("planted-card", tmp_path / "card", ["prompt_array.fairface"], roots, cfg, model=model, cache=None, resume=True)
    assert fourth["tasks"]["prompt_array.fairface"] == "done"

def test_skipped_tasks_say_what_to_set(tmp_path):
    card = C.make_card("tiny-clip", tmp_path / "c", ["gab.text_bias", "prompt_array.fairface", "gensynth.coco"],
                       {"fairface": str(tmp_path), "coco": str(tmp_path)}, C.CardConfig(**CFG), cache=None)
    why = {s["task"]: s["reason"] for s in card["skipped"]}
    assert "set VLBIAS_FAIRFACE" in why["prompt_array.fairface"] and "set VLBIAS_DOWNLOADS" in why["gensynth.coco"]
    assert set(card["measures"]) == {f"gab.text_bias.{s}" for s in ("all", "phaze1", "phaze2", "phaze3")}

# ---- model names -------------------------------------------------------------------------------------------------

def test_model_name_forms(tmp_path, monkeypatch):
    n = normalise_model_name
    assert (n("tiny-clip").form, n("ViT-B/32").form) == ("registered", "registered")
    assert (n("ViT-B-32,openai").form, n("ViT-B-32,openai").name) == ("clip_benchmark", "ViT-B-32/openai")
    assert n("ViT-B-32/laion2b_s34b_b79k").form == "open_clip"
    ck = tmp_path / "ckpt.pt"; ck.write_bytes(b"x")
    m = n(f"ViT-B-32,{ck}")
    assert (m.form, m.name, m.kwargs) == ("clip_benchmark", str(ck), {"arch": "ViT-B-32"})
    assert C.resolve_card_model(f"ViT-B-32,{ck}")["status"] == "present"
    # hub forms resolve to what they would fetch; with downloads off, the zoo's one message form
    for name in ("ViT-B-32/openai", "ViT-B-32,openai", "hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K", "google/siglip-base-patch16-224"):
        r = C.resolve_card_model(name)
        assert r["status"] == "missing" and r["how"].startswith("Weights for model"), (name, r)
    r = C.resolve_card_model("google/siglip-base-patch16-224")
    assert r["form"] == "transformers" and "config.json" in r["fetch"]
    with pytest.raises(MissingWeightsError, match="Weights for model 'google/siglip-base-patch16-224'"):
        C.load_card_model("google/siglip-base-patch16-224")
    # a transformers hub id whose config.json is here: the family is read from it, without registering the model
    monkeypatch.setenv("VLBIAS_MODELS", str(tmp_path / "models"))
    (tmp_path / "models" / "someorg" / "align-like").mkdir(parents=True)
    (tmp_path / "models" / "someorg" / "align-like" / "config.json").write_text(json.dumps({"model_type": "align"}))
    assert n("someorg/align-like").kwargs == {"family": "align"}
    (tmp_path / "models" / "someorg" / "t5").mkdir(parents=True)
    (tmp_path / "models" / "someorg" / "t5" / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(UnknownModelError, match="model_type 't5'"): n("someorg/t5")
    # debias: names keep their form (the released tokens' base model needs its weights)
    d = C.resolve_card_model("debias:ViT-B-16/openai:oxai-vit-b-16-gender")
    assert d["form"] == "debias" and d["status"] == "missing"
    for bad, msg in [("NotAnArch,openai", "not an open_clip architecture"), ("local-dir:/no/such/dir", "/no/such/dir"),
                     ("what ever", "not a registered name")]:
        with pytest.raises((UnknownModelError, MissingWeightsError), match=msg): n(bad)

def test_local_folder_forms_load(tmp_path):
    "`local-dir:PATH` and a bare path of a transformers save_pretrained folder load through the zoo and embed."
    from vlbias_nb.zoo.factory import tiny_hf_model
    m = tiny_hf_model("hf-clip")
    d = tmp_path / "my-clip"
    m.model.save_pretrained(d); m.tokenizer.save_pretrained(d); m.image_processor.save_pretrained(d)
    for name in (f"local-dir:{d}", str(d)):
        r = C.resolve_card_model(name)
        assert (r["form"], r["family"], r["status"]) == ("local", "hf-clip", "present")
        vlm = C.load_card_model(name, device="cpu")
        e = vlm.encode_text(["a photo of a person"])
        np.testing.assert_allclose(e, m.encode_text(["a photo of a person"]), atol=1e-5)

def _siglip_config_folder(d: Path) -> Path:
    "A folder holding only a tiny SigLIP config.json and a tokenizer stand-in (no weights, no preprocessor config)."
    from vlbias_nb.zoo.factory import tiny_hf_config, tiny_tokenizer
    tok = tiny_tokenizer(); tok.save_pretrained(d)
    tiny_hf_config("siglip", len(tok.vocab)).save_pretrained(d)
    assert sorted(p.name for p in d.iterdir() if p.suffix in (".safetensors", ".bin")) == []
    return d

def test_unregistered_siglip_by_its_config(tmp_path, monkeypatch):
    "A SigLIP nobody registered: family from config.json's model_type; random weights under VLBIAS_WEIGHTS=random; embeds."
    from vlbias_nb.zoo.registry import HF_MODEL_TYPES
    d = _siglip_config_folder(tmp_path / "my-siglip")
    assert json.loads((d / "config.json").read_text())["model_type"] == "siglip"
    r = C.resolve_card_model(f"local-dir:{d}")
    assert (r["form"], r["family"], r["status"]) == ("local", "siglip", "missing") and "holds config.json but no weight file" in r["how"]
    with pytest.raises(MissingWeightsError, match="holds no weight file"): C.load_card_model(f"local-dir:{d}", device="cpu")
    # the same folder as an unregistered hub id's local copy ($VLBIAS_MODELS/<org>/<name>)
    monkeypatch.setenv("VLBIAS_MODELS", str(tmp_path / "models"))
    hub = _siglip_config_folder(tmp_path / "models" / "someorg" / "siglip-like")
    m = normalise_model_name("someorg/siglip-like")
    assert (m.form, m.kwargs) == ("transformers", {"family": "siglip"})
    r = C.resolve_card_model("someorg/siglip-like")
    assert r["status"] == "missing" and r["family"] == "siglip"
    assert r["how"].startswith("Weights for model 'someorg/siglip-like' (transformers SiglipModel") and "downloading is turned off" in r["how"]
    with pytest.raises(MissingWeightsError, match=r"^Weights for model 'someorg/siglip-like' \(transformers SiglipModel"):
        C.load_card_model("someorg/siglip-like", device="cpu")         # the zoo's one message form, no network
    monkeypatch.setenv("VLBIAS_WEIGHTS", "random")
    texts = ["a photo of a doctor", "a photo of a nurse", "a photo of a doctor"]
    for name in (f"local-dir:{d}", "someorg/siglip-like"):
        assert C.resolve_card_model(name)["status"] == "random"
        vlm = C.load_card_model(name, device="cpu", seed=5)
        assert type(vlm.model).__name__ == "SiglipModel" and vlm.weights == "random" and vlm.spec.random_init
        assert vlm.tokenize(texts)["input_ids"].shape == (3, 64)          # SigLIP's texts padded to the full 64 tokens
        e = vlm.encode_text(texts)
        assert e.shape == (3, 32)
        np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1, atol=1e-5); np.testing.assert_allclose(e[0], e[2], atol=1e-6)
        assert np.abs(e[0] - e[1]).max() > 1e-3
        i = vlm.encode_image([np.full((40, 30, 3), v, np.uint8) for v in (0, 200)])
        assert i.shape == (2, 32); np.testing.assert_allclose(np.linalg.norm(i, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(C.load_card_model(f"local-dir:{d}", device="cpu", seed=5).encode_text(texts), e, atol=1e-6)  # seed fixes weights
    # an unknown model_type: one error naming it and the supported types
    (d / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(UnknownModelError) as err: C.resolve_card_model(f"local-dir:{d}")
    assert "model_type 't5'" in str(err.value) and all(t in str(err.value) for t in HF_MODEL_TYPES)
    (hub / "config.json").write_text(json.dumps({"model_type": "siglip2"}))
    with pytest.raises(UnknownModelError, match="model_type 'siglip2': SigLIP 2 NaFlex"): normalise_model_name("someorg/siglip-like")

def test_models_file_and_bad_input(tmp_path, capsys):
    f = tmp_path / "models.txt"
    f.write_text("# CLIP_benchmark model list\nViT-B-32,openai\n\ntiny-clip  # the offline one\n")
    assert CLI.read_models_file(f) == ["ViT-B-32,openai", "tiny-clip"]
    for argv, msg in [(["no-such-model"], "model 'no-such-model'"), (["--models", str(tmp_path / "none.txt")], "none.txt"),
                      (["tiny-clip", "--only", "maxskew_everything"], "unknown measure 'maxskew_everything'"),
                      (["tiny-clip", "--out", str(f)], "is a file"), (["tiny-clip", "--data", "imagenet=/x"], "--data 'imagenet=/x'"),
                      (["tiny-clip", "--data", "imagenet21k=/x"], "KEY one of"), (["tiny-clip", "--device", "cuda:7"], "--device 'cuda:7'"),
                      (["tiny-clip", "--device", "gpu"], "--device 'gpu'"),
                      ([], "no model given")]:
        want = 3 if argv[-2:] == ["--device", "cuda:7"] else 2     # a device this machine lacks: environment (3), as `vlbias run -p device cuda`
        assert CLI.card_main(argv) == want, argv
        err = capsys.readouterr().err
        assert err.startswith("error:") and msg in err and len(err.strip().splitlines()) == 1, (argv, err)

# ---- CLI, compare, sharding --------------------------------------------------------------------------------------

def test_vlbias_card_command_and_compare(tmp_path, monkeypatch):
    from vlbias_nb.run.cli import main
    monkeypatch.setenv("VLBIAS_CACHE", str(tmp_path / "cache"))
    assert main(["card", "tiny-clip", "--only", "gab.text_bias", "--out", str(tmp_path / "a"), "--no-progress"]) == 0
    card = json.loads((tmp_path / "a" / "card.json").read_text())
    assert card["model"]["weights_mode"] == "random" and "pipeline check" in card["model"]["reason"]
    assert list((tmp_path / "cache").glob("tiny-clip--*/text--*/shard-*.npz"))          # text embeddings went through the cache
    assert main(["card", "--compare", str(tmp_path / "a"), str(tmp_path / "a" / "card.json"), "--out", str(tmp_path / "cmp")]) == 0
    board = pd.read_csv(tmp_path / "cmp" / "leaderboard.csv")
    assert len(board) == 8 and set(board.measure) == set(card["measures"])
    assert (tmp_path / "cmp" / "bias_vs_accuracy.png").stat().st_size > 1000
    assert main(["card", "--compare", str(tmp_path / "empty")]) == 2

def test_sharded_model_list(tmp_path, monkeypatch):
    "Two processes (RANK 0 and 1 of WORLD_SIZE 2) each card one model; the second to finish merges the leaderboard."
    monkeypatch.setenv("VLBIAS_CACHE", str(tmp_path / "cache"))
    argv = ["tiny-clip", "tiny-hf-clip", "--only", "gab.text_bias", "--out", str(tmp_path), "--no-progress"]
    monkeypatch.setenv("WORLD_SIZE", "2"); monkeypatch.setenv("RANK", "1")
    assert CLI.card_main(argv) == 0
    assert (tmp_path / "tiny-hf-clip" / "card.json").is_file() and not (tmp_path / "tiny-clip").exists()
    assert not (tmp_path / "leaderboard.csv").exists()
    monkeypatch.setenv("RANK", "0")
    assert CLI.card_main(argv) == 0
    board = pd.read_csv(tmp_path / "leaderboard.csv")
    assert sorted(board.model.unique()) == ["tiny-clip", "tiny-hf-clip"]

def test_planted_visogender_resolution_bias(tmp_path):
    "VisoGender layout: each occupation's masculine images planted first -> MaxSkew@2 = ln 2 for every occupation."
    from vlbias_nb.data.rehearsal import make_visogender
    from vlbias_nb.papers.social_counterfactuals.intersectional_probing import load_visogender
    root = make_visogender(tmp_path / "vg", n_items=4)
    t = load_visogender(root)
    order = [str(p) for p in t.sort_values("gender", key=lambda g: g != "male").path]
    card = C.make_card("planted-card", tmp_path / "card", ["social_counterfactuals.visogender"], {"visogender": str(root)},
                       C.CardConfig(**CFG), model=C.PlantedCardModel(_positions(order)), cache=None)
    m = card["measures"]["social_counterfactuals.resolution.visogender"]
    _inside(m, math.log(2))
    assert m["n"] == t.occupation.nunique() == 2 and m["n_items"] == 8 and m["chance"] < math.log(2)

def test_planted_gab_text_to_image(tmp_path, monkeypatch):
    "GAB layout: every E2 image planted before every U2 image -> each E2 caption picks its E2 image (1.0), each U2 caption fails (0.0)."
    from vlbias_nb.data.rehearsal import make_gab_images
    from vlbias_nb.papers.gab.binding import scan_gab_images
    root = make_gab_images(tmp_path / "gab", n_items=2, n_activities=4, size=64)
    t = scan_gab_images(root)
    order = t.path[t.group == "E2"].tolist() + t.path[t.group != "E2"].tolist()
    monkeypatch.setenv("VLBIAS_GAB_IMAGES", str(root))                  # found by its variable, no --data
    assert C.task_status(C.CARD_TASKS["gab.binding"]) == (True, "") and C.dataset_root("gab") == root
    card = C.make_card("planted-card", tmp_path / "card", ["gab.binding"], {}, C.CardConfig(**CFG),
                       model=C.PlantedCardModel(_positions(order)), cache=None)
    ms = card["measures"]
    src = sorted(t.source.unique())[0]                                  # per activity source (GAB Fig. 2, 5, 6; §5.2.3)
    _inside(ms[f"gab.t2i.{src}.E2"], 1.0); _inside(ms[f"gab.t2i.{src}.U2"], 0.0)
    assert ms[f"gab.t2i.{src}.E2"]["n"] == 4 and ms[f"gab.t2i.{src}.E2"]["chance"] == 0.5
    assert {f"gab.i2t.{src}.acc_E2", f"gab.i2t.{src}.acc_U2", f"gab.i2t.{src}.drop_binding"} <= set(ms)
    monkeypatch.setenv("VLBIAS_GAB_IMAGES", str(tmp_path / "none"))
    ok, why = C.task_status(C.CARD_TASKS["gab.binding"])
    assert not ok and why.startswith("skipped: needs GAB image groups") and why.endswith("set VLBIAS_GAB_IMAGES (or --data gab=DIR)")
    assert str(tmp_path / "none") in why
    monkeypatch.delenv("VLBIAS_GAB_IMAGES")
    from vlbias_nb.paths import data_root
    assert C.dataset_root("gab") == data_root() / "gab" / "images"

def test_missing_weights_refused_before_work(tmp_path, capsys):
    "A known model whose weights are not here is refused before any task runs, with the zoo's message form."
    assert CLI.card_main(["tiny-clip", "ViT-B-32/openai", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model 'ViT-B-32/openai': Weights for model 'ViT-B-32/openai'") and "VLBIAS_ALLOW_DOWNLOAD=1" in err
    assert not (tmp_path / "o").exists()

def test_compare_refuses_a_card_that_breaks_the_schema(tmp_path, capsys):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "card.json").write_text(json.dumps({"schema_version": "0.1"}))
    assert CLI.card_main(["--compare", str(tmp_path / "bad"), "--out", str(tmp_path / "cmp")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --compare") and "card.json" in err and len(err.strip().splitlines()) == 1

def test_random_weights_switch_is_not_refused(monkeypatch):
    "Under VLBIAS_WEIGHTS=random (the rehearsal) a pretrained name builds its architecture with random weights: not refused."
    monkeypatch.setenv("VLBIAS_WEIGHTS", "random")
    r = C.resolve_card_model("ViT-B-32,openai")
    assert (r["name"], r["status"]) == ("ViT-B-32/openai", "random")
    args = CLI.card_parser().parse_args(["ViT-B-32,openai", "--only", "gab.text_bias"])
    assert CLI.check_card_args(args)["models"] == ["ViT-B-32,openai"]

def test_paper_value_beside_ours_for_a_model_the_paper_measured(planted, tmp_path):
    "Named as a model Prompt Array Tab. 2 measured, the card carries the paper's number (never comparable for a planted model)."
    model = C.PlantedCardModel(planted["pos"], name="ViT-B-32/openai")
    card = C.make_card("ViT-B-32/openai", tmp_path, ["prompt_array.fairface"], planted["roots"], C.CardConfig(**CFG), model=model, cache=None)
    ms = card["measures"]
    assert (ms["prompt_array.maxskew.gender"]["paper"], ms["prompt_array.ndkl.gender"]["paper"]) == (0.185, 0.073)
    assert ms["prompt_array.maxskew.gender"]["paper_source"] == "Prompt Array Tab. 2" and ms["prompt_array.maxskew.race"]["paper"] is None
    assert card["model"]["comparable"] is False
    assert "| 0.185 |" in (tmp_path / "card.md").read_text()

def test_debias_form_with_local_tokens_loads_and_cards(tmp_path):
    "`debias:<base>:<tokens file>` (Prompt Array's DebiasCLIP) resolves, loads through the zoo and gets a card."
    import torch
    from vlbias_nb.zoo.factory import load_model
    from vlbias_nb.zoo.debiased import save_debias_tokens
    base = load_model("tiny-clip", device="cpu")
    save_debias_tokens(tmp_path / "tokens.pt", base, torch.full((2, base.model.token_embedding.weight.shape[1]), 0.5))
    name = f"debias:tiny-clip:{tmp_path / 'tokens.pt'}"
    r = C.resolve_card_model(name)
    assert (r["form"], r["status"]) == ("debias", "present")
    vlm = C.load_card_model(name, device="cpu")
    e, e0 = vlm.encode_text(["a photo of a person"]), base.encode_text(["a photo of a person"])
    assert e.shape == e0.shape and not np.allclose(e, e0)                     # the tokens change the text embedding
    assert CLI.card_main([name, "--only", "gab.text_bias", "--out", str(tmp_path / "card"), "--no-progress"]) == 0
    assert json.loads((tmp_path / "card" / "card.json").read_text())["model"]["form"] == "debias"

# ---- --publish: the site's card pages ----------------------------------------------------------------------------

def _fake_checkout(tmp_path, monkeypatch):
    "A temporary checkout (nbs/ only) that --publish writes to instead of this repository's site."
    root = tmp_path / "checkout"; (root / "nbs").mkdir(parents=True)
    for module in (C, card_publish, CLI):          # the card's environment, publishing's and the command's default folders
        monkeypatch.setattr(module, "project_root", lambda: root)
    monkeypatch.setenv("VLBIAS_CACHE", str(tmp_path / "cache"))
    return root

def test_publish_tiny_card_writes_its_page_and_the_sidebar_lists_it(tmp_path, monkeypatch, capsys):
    import yaml
    from vlbias_nb.paths import project_root
    from vlbias_nb.run.publish_page import absolute_paths
    real_cards = project_root() / "nbs" / "cards"
    before = sorted(real_cards.rglob("*")) if real_cards.exists() else None
    root = _fake_checkout(tmp_path, monkeypatch)
    argv = ["tiny-clip", "--only", "gab.text_bias", "--out", str(tmp_path / "a"), "--no-progress", "--publish"]
    assert CLI.card_main(argv) == 0, capsys.readouterr().err
    cards = root / "nbs" / "cards"
    page = (cards / "tiny-clip.md").read_text()
    assert page.startswith('---\ntitle: "Card: tiny-clip"\n')
    assert "weights *random*" in page and "**pipeline checks, not results**" in page and "no git commit" in page
    card = json.loads((tmp_path / "a" / "card.json").read_text())
    v = card["measures"]["gab.text_bias.all"]["value"]
    assert f"| `gab.text_bias.all` | {v:.3g} |" in page                          # the card's table, its numbers
    assert "](tiny-clip/card.png)" in page and (cards / "tiny-clip" / "card.png").read_bytes() == (tmp_path / "a" / "card.png").read_bytes()
    assert not absolute_paths(page) and not absolute_paths((cards / "tiny-clip" / "card.json").read_text())
    side = yaml.safe_load((root / "nbs" / "sidebar.yml").read_text())["website"]["sidebar"]["contents"]
    assert [e.get("section") or e.get("text") for e in side] == ["Results ledger", "Analyses", "Model cards", "Library reference"]
    assert [e["href"] for e in side[2]["contents"]] == ["cards/tiny-clip.md"]
    # the leaderboard of the published cards: first in the section, the card linked
    assert CLI.card_main(["--compare", str(cards), "--out", str(tmp_path / "cmp"), "--publish"]) == 0
    board = (cards / "leaderboard.md").read_text()
    assert f"| [tiny-clip](tiny-clip.md) | random | {v:.3g} |" in board and "pipeline checks, not results" in board
    assert (cards / "leaderboard" / "bias_vs_accuracy.png").stat().st_size > 1000
    side = yaml.safe_load((root / "nbs" / "sidebar.yml").read_text())["website"]["sidebar"]["contents"]
    assert [e["href"] for e in side[2]["contents"]] == ["cards/leaderboard.md", "cards/tiny-clip.md"]
    assert not [p for p in cards.rglob("*") if p.name.endswith(".part")]          # no temporary file left
    assert (sorted(real_cards.rglob("*")) if real_cards.exists() else None) == before   # this repository's site untouched

def test_published_card_page_and_figure_reach_the_processed_site(tmp_path, monkeypatch):
    "nbdev's doc processing (what Quarto renders) carries the page and the figure it references, at the same relative place."
    import shutil
    from vlbias_nb.paths import project_root
    from vlbias_nb.run.site import process_docs
    root = _fake_checkout(tmp_path, monkeypatch)
    for f in ("settings.ini", "_quarto.yml"): shutil.copy(project_root() / f, root / f)
    assert CLI.card_main(["tiny-clip", "--only", "gab.text_bias", "--out", str(tmp_path / "a"), "--no-progress", "--publish"]) == 0
    proc = process_docs(tmp_path / "site", root, n_workers=1)
    page = (proc / "cards" / "tiny-clip.md").read_text()
    figure = re.search(r"!\[[^\]]*\]\(([^)]+)\)", page).group(1)
    assert (proc / "cards" / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

def test_publish_refused_outside_a_checkout(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(CLI, "in_checkout", lambda: False)
    for argv in (["tiny-clip", "--only", "gab.text_bias", "--out", str(tmp_path / "a"), "--publish"],
                 ["--compare", str(tmp_path), "--publish"]):
        assert CLI.card_main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --publish writes the site's pages") and "checkout" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists()                                         # refused before any work

def test_social_counterfactuals_physical_segments_use_the_released_five_traits(tmp_path):
    "The card's physical segments are the released data set's: 5 traits, K = 10 (× gender) and 30 (× race); a 14-trait value is refused."
    from vlbias_nb.papers.social_counterfactuals.intersectional_probing import segment_values
    A1, A2 = segment_values("physical_gender")
    assert A1 == ["skinny", "young", "obese", "tattooed", "old"] and len(A1) * len(A2) == 10
    assert len(segment_values("physical_race")[0]) * len(segment_values("physical_race")[1]) == 30
    import pyarrow as pa, pyarrow.parquet as pq
    bad = tmp_path / "rel"; (bad / "data").mkdir(parents=True)
    pq.write_table(pa.table({"image": [{"bytes": b"", "path": None}], "caption": ["A photo of an attractive male pilot"],
                             "a1_type": ["physical"], "a1": ["attractive"], "a2_type": ["gender"], "a2": ["male"],
                             "counterfactual_set": ["x"]}), bad / "data" / "train-00000-of-00001-x.parquet")
    with pytest.raises(ValueError, match="attractive"): SCR.read_social_counterfactuals_release(bad)

"""The rehearsal's generated data sets (vlbias_nb.data.rehearsal) read back by the project's OWN readers, the functions
the full profile's notebooks call: items, labels, counts and image sizes come back exactly as written."""
import json, shutil, pickle
from pathlib import Path
import numpy as np, pandas as pd, pytest
from PIL import Image
from vlbias_nb.data.rehearsal import (make_rehearsal_data, imagenet_synsets, social_counterfactuals_keys, LAYOUTS,
                                      FAIRFACE_GENDERS, FAIRFACE_RACES, CALTECH256_FIRST, GAB_GROUP_FOLDERS,
                                      gab_rehearsal_activities, make_fairface)

N = 2   # n_items of every writer

@pytest.fixture(scope="module")
def rd(tmp_path_factory):
    return make_rehearsal_data(tmp_path_factory.mktemp("rehearsal"), n_items=N, seed=0)

def _size(p): 
    with Image.open(p) as im: return im.size

def test_every_dataset_written_with_a_layout_record(rd):
    assert sorted(rd.roots) == sorted(LAYOUTS)
    rec = json.loads(json.dumps(rd.layouts))                         # JSON-able for run.json
    assert rec["fairface"]["items"] == 2 * N and rec["fairface"]["image_size"] == [[224, 224]]
    assert rec["utkface"]["image_size"] == [[200, 200]] and rec["cifar10"]["items"] == 6 * N
    assert rec["gab"]["image_size"] == [[1024, 1024]] and rec["gab"]["items"] == 2 * 4 * N
    assert rec["social_counterfactuals"]["image_size"] == [[512, 512]] and rec["social_counterfactuals"]["items"] == 12 * N
    assert "load_fairface" in rec["fairface"]["reader"] and "Kaggle" in rec["imagenet"]["layout"]

def test_seeded(tmp_path):
    a, b, c = (make_fairface(tmp_path / x, n_items=2, seed=s) for x, s in (("a", 0), ("b", 0), ("c", 1)))
    same = lambda x, y: (x / "val/1.jpg").read_bytes() == (y / "val/1.jpg").read_bytes()
    assert same(a, b) and not same(a, c)
    assert (a / "fairface_label_val.csv").read_text() == (b / "fairface_label_val.csv").read_text()

def test_auto_roots_resolve_through_env(rd, monkeypatch):
    from vlbias_nb.paths import resolve_data_root, DATASET_ENVS, generation_folder
    for k, v in rd.env().items(): monkeypatch.setenv(k, v)
    for ds in DATASET_ENVS: assert resolve_data_root("auto", ds) == Path(rd.roots[ds])
    assert generation_folder("auto", "social_counterfactuals", None) == Path(rd.roots["social_counterfactuals"])
    from vlbias_nb.run.records import resolve_source          # what the runner fingerprints for --resume
    coco = Path(rd.roots["coco2017"])
    assert resolve_source("coco2017:captions_val2017.json") == coco / "annotations/captions_val2017.json"
    assert resolve_source("coco2017:train2017") == coco / "train2017" and resolve_source("dataset:pata") == Path(rd.roots["pata"])

def test_coco2017_via_the_coco2017_sources(rd, monkeypatch, tmp_path):
    from vlbias_nb.data.coco import (coco_annotation_file, coco_image_dir, load_coco_captions, load_coco_instances,
                                     LazyImages, CocoFormatError)
    from vlbias_nb.papers.gensynth.spurious_correlations import gendered_images
    root = Path(rd.roots["coco2017"]); monkeypatch.setenv("VLBIAS_DOWNLOADS", str(root))
    raw = json.loads((root / "annotations/captions_train2017.json").read_text())
    caps = load_coco_captions(coco_annotation_file("coco2017:captions_train2017.json"))
    assert caps.images.id.tolist() == [im["id"] for im in raw["images"]] and len(caps.captions) == 5 * N
    inst = load_coco_instances(coco_annotation_file("coco2017:instances_train2017.json"))
    assert inst.person_counts().tolist() == [1] * N and len(inst.boxes) == 2 * N
    for split in ("val2017", "train2017"):
        d = coco_image_dir(f"coco2017:{split}"); assert d == root / split
        js = json.loads((root / f"annotations/instances_{split}.json").read_text())
        imgs = LazyImages(d, [im["file_name"] for im in js["images"]])
        assert [imgs[i].size for i in range(N)] == [(im["width"], im["height"]) for im in js["images"]]
    # coco2017:captions_val2017.json is checked against the official MD5: the rehearsal's folder (its marker file) is
    # exempt, the same file anywhere else is refused
    assert len(load_coco_captions(coco_annotation_file("coco2017:captions_val2017.json"))) == N
    plain = tmp_path / "plain"; (plain / "annotations").mkdir(parents=True)
    shutil.copy(root / "annotations/captions_val2017.json", plain / "annotations/captions_val2017.json")
    monkeypatch.setenv("VLBIAS_DOWNLOADS", str(plain))
    with pytest.raises(CocoFormatError, match="official md5"): coco_annotation_file("coco2017:captions_val2017.json")
    monkeypatch.setenv("VLBIAS_DOWNLOADS", str(root))
    val = load_coco_captions(coco_annotation_file(rd.coco_path("coco2017:captions_val2017.json")))   # the rehearsal's way round
    assert len(val) == N and coco_image_dir(rd.coco_path("coco2017:val2017")) == root / "val2017"
    with pytest.raises(FileNotFoundError, match="test2017"): rd.coco_path("coco2017:test2017")
    gi = gendered_images(val, load_coco_instances(coco_annotation_file("coco2017:instances_val2017.json")))
    assert gi.gender.value_counts().to_dict() == {"male": N // 2 + N % 2, "female": N // 2}
    assert all(b.shape == (1, 4) for b in gi.boxes)

def test_fairface_and_utkface(rd):
    from vlbias_nb.data.faces import load_fairface, load_utkface
    for split in ("train", "val"):
        ds = load_fairface(split, rd.roots["fairface"])
        assert len(ds) == N and ds.attribute("gender").tolist() == [FAIRFACE_GENDERS[i % 2] for i in range(1, N + 1)]
        assert ds.attribute("race").tolist() == [FAIRFACE_RACES[i % 7] for i in range(1, N + 1)]
        assert [_size(p) for p in ds.paths] == [(224, 224)] * N and ds.attribute("age").tolist() == ["20-29"] * N
    from vlbias_nb.papers.gensynth.editing import genswap_faces     # gensynth_editing's call on fairface_root
    pools = genswap_faces(load_fairface("train", rd.roots["fairface"]))
    assert {g: len(v) for g, v in pools.items()} == {"male": 1, "female": 1}
    utk = load_utkface(rd.roots["utkface"])               # the notebook's call: on_bad_name="skip" gives the same here
    assert len(utk) == N and sorted(utk.attribute("gender")) == sorted(["Male", "Female"] * (N // 2) + ["Male"] * (N % 2))
    assert {_size(p) for p in utk.paths} == {(200, 200)} and all(p.endswith(".jpg.chip.jpg") for p in utk.paths)

def test_flickr30k(rd):
    from vlbias_nb.methods.downstream import load_flickr30k
    root = Path(rd.roots["flickr30k"]); js = json.loads((root / "dataset_flickr30k.json").read_text())["images"]
    for split, want in (("train", ("train", "restval")), ("val", ("val",)), ("test", ("test",))):
        fl = load_flickr30k(root, split)
        entries = [im for im in js if im["split"] in want]
        assert [p.name for p in fl.images] == [im["filename"] for im in entries]
        assert fl.captions == [s["raw"] for im in entries for s in im["sentences"]]
        assert fl.caption_image.tolist() == [i for i in range(len(entries)) for _ in range(5)]
        assert all(max(_size(p)) == 500 for p in fl.images)

def test_imagenet_val(rd):
    from vlbias_nb.methods.downstream import load_imagenet_val
    root = Path(rd.roots["imagenet"])
    order = [l.split()[0] for l in imagenet_synsets()]
    sol = pd.read_csv(root / "LOC_val_solution.csv").sort_values("ImageId")
    inet = load_imagenet_val(root)
    assert len(inet) == N and len(inet.classnames) == 1000 and inet.classnames[0] == "tench"
    assert inet.labels.tolist() == [order.index(s.split()[0]) for s in sol.PredictionString]
    assert [inet.images.path(i).name for i in range(N)] == [f"{i}.JPEG" for i in sol.ImageId]
    assert all(inet.images[i].size == _size(inet.images.path(i)) and max(inet.images[i].size) == 500 for i in range(N))

def test_cifar(rd, tmp_path):
    from vlbias_nb.methods.downstream import load_cifar10, load_cifar100, DatasetFormatError
    base = Path(rd.roots["cifar10"]) / "cifar-10-batches-py"
    with open(base / "test_batch", "rb") as f: tb = pickle.load(f, encoding="latin1")
    c10 = load_cifar10(rd.roots["cifar10"], "test", check_md5=False)
    assert c10.labels.tolist() == tb["labels"] and c10.classnames[:2] == ["airplane", "automobile"]
    assert np.array_equal(np.asarray(c10.images[1]), tb["data"][1].reshape(3, 32, 32).transpose(1, 2, 0))
    assert len(load_cifar10(rd.roots["cifar10"], "train", check_md5=False)) == 5 * N
    # torchvision's MD5 check (the readers' default) is skipped in the rehearsal's folder only; elsewhere it refuses them
    assert load_cifar10(rd.roots["cifar10"], "test").labels.tolist() == tb["labels"]
    shutil.copytree(rd.roots["cifar10"], tmp_path / "plain_cifar10")
    with pytest.raises(DatasetFormatError, match="MD5"): load_cifar10(tmp_path / "plain_cifar10", "test")
    with open(Path(rd.roots["cifar100"]) / "cifar-100-python/test", "rb") as f: tb = pickle.load(f, encoding="latin1")
    c100 = load_cifar100(rd.roots["cifar100"], "test", check_md5=False)
    assert c100.labels.tolist() == tb["fine_labels"] and len(c100.classnames) == 100 and c100.classnames[1] == "aquarium fish"
    assert np.array_equal(np.asarray(c100.images[0]), tb["data"][0].reshape(3, 32, 32).transpose(1, 2, 0))

def test_caltech256(rd):
    from vlbias_nb.methods.downstream import load_caltech256
    cal = load_caltech256(rd.roots["caltech256"])              # 257.clutter dropped, as the notebook reads it
    assert cal.classnames == ["ak47", "american flag", "backpack"] and cal.labels.tolist() == [0] * N + [1] * N + [2] * N
    assert cal.images.path(0).name == "001_0001.jpg" and all(cal.images[i].size == _size(cal.images.path(i)) for i in range(len(cal)))
    assert len(load_caltech256(rd.roots["caltech256"], drop_clutter=False)) == 4 * N

def test_visogender_and_pata(rd):
    from vlbias_nb.papers.social_counterfactuals.intersectional_probing import load_visogender, load_pata
    vg = load_visogender(rd.roots["visogender"])
    assert vg.idx.tolist() == [f"{c}_{i}" for c in ("OO", "OP") for i in range(1, N + 1)]
    assert vg.gender.tolist() == ["male", "female"] * 2 and vg.occupation.tolist()[:2] == ["teacher", "teacher"]
    assert vg.context.tolist() == ["OO"] * N + ["OP"] * N and all(Path(p).name == f"{i}.jpg" for p, i in zip(vg.path, vg.idx))
    pata = load_pata(rd.roots["pata"])
    lines = (Path(rd.roots["pata"]) / "pata_fairness.files.lst").read_text().splitlines()
    assert pata.line.tolist() == list(range(N)) and pata.scene.tolist() == ["forest", "gun range"][:N]
    assert pata.gender.tolist() == ["male", "female"][:N] and pata.url.tolist() == [l.split("|")[1] for l in lines]
    assert [Path(p).name for p in pata.path] == [f"{i}.jpg" for i in range(N)]

def test_gab_image_groups(rd):
    from vlbias_nb.papers.gab.binding import scan_gab_images, GROUPS
    from vlbias_nb.papers.gab.activities import load_gab_activities
    imgs = scan_gab_images(rd.roots["gab"], load_gab_activities())
    acts = gab_rehearsal_activities(2)
    assert len(imgs) == len(acts) * 4 * N
    counts = imgs.groupby(["activity", "group"]).size()
    assert counts.to_dict() == {(a, g): N for _, a, _ in acts for g in GROUPS}
    assert sorted(imgs.expected.unique()) == ["man", "woman"] and {_size(p) for p in imgs.path} == {(1024, 1024)}

def test_social_counterfactuals_generation_folder_is_resumed(rd):
    from vlbias_nb.methods.generation import GenerationManifest, run_generation
    from vlbias_nb.methods.attention_control import candidate_items
    from vlbias_nb.papers.social_counterfactuals.counterfactual_captions import caption_sets, counterfactual_sets
    root = Path(rd.roots["social_counterfactuals"])
    items = candidate_items(counterfactual_sets(caption_sets("race_gender", occupations=["doctor", "nurse"][:N],
                                                             prefixes=["A photo of a"])), n_candidates=1, seed=0)
    assert [it["key"] for it in items] == social_counterfactuals_keys(N)    # the notebook's own keys
    ok, bad = GenerationManifest(root / "manifest.sqlite").check_files("{}", verify=True)
    assert ok == set(social_counterfactuals_keys(N)) and not bad
    def never(batch): raise AssertionError("a complete generation folder must be resumed, not regenerated")
    man = run_generation(items, never, root, batch_size=12, shard=0, n_shards=1, progress=False, params=None)
    df = man.to_frame()
    assert len(df) == 12 * N and {_size(root / o) for o in df.output} == {(512, 512)} and not df.black.any()

def test_every_data_input_of_the_full_profile_is_present(rd, monkeypatch):
    "The runner's pre-flight check (check_inputs) on every analysis with the full profile's parameters finds each data input."
    from vlbias_nb.run.parameters import resolve_parameters
    from vlbias_nb.run.inputs import check_inputs, PATH_KINDS
    for k, v in rd.env().items(): monkeypatch.setenv(k, v)
    present = {}
    for nb in sorted((Path(__file__).parent.parent / "nbs" / "analyses").rglob("*.ipynb")):
        checks = [c for c in check_inputs(nb, resolve_parameters(nb, "full")) if c.kind in PATH_KINDS]
        assert [c.parameter for c in checks if c.status not in ("present", "skipped")] == [], nb.name
        present[nb.stem] = sum(c.status == "present" for c in checks)
    assert len(present) == 8 and present["09_social_counterfactuals"] == 8 and present["07_prompt_array"] == 5

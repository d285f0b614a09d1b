"Downstream performance (vlbias_nb.methods.downstream): loaders on tiny fake datasets, Recall@K and zero-shot accuracy known answers."
import json, pickle
from pathlib import Path
import numpy as np
import pytest
from PIL import Image
from vlbias_nb.paths import MissingDataError
from vlbias_nb.methods.downstream import (
    FLICKR30K_ENV, IMAGENET_ENV, CIFAR100_ENV, DatasetFormatError, load_flickr30k, retrieval_recall, load_imagenet_val,
    load_cifar100, zero_shot_accuracy, topk_accuracy, ClassificationData, CLIP_CIFAR_TEMPLATES, CIFAR10_ENV, CALTECH256_ENV,
    load_cifar10, load_caltech256, caltech256_classname, CLIP_CALTECH_TEMPLATES)


# ---------------------------------------------------------------- fixtures: fake datasets in their real layouts
def fake_flickr(d: Path, splits=("test", "test", "test", "val", "restval", "train"), caps=5):
    (d / "flickr30k-images").mkdir(parents=True)
    ims = []
    for i, split in enumerate(splits):
        fn = f"{100 + i}.jpg"
        Image.new("RGB", (16, 16), ((37 * i) % 256, (91 * i) % 256, 50)).save(d / "flickr30k-images" / fn)
        ims.append(dict(filename=fn, imgid=i, split=split, sentids=list(range(caps * i, caps * i + caps)),
                        sentences=[dict(raw=f"A picture number {i} , caption {j} .", tokens=["a"], imgid=i, sentid=caps * i + j)
                                   for j in range(caps)]))
    (d / "dataset_flickr30k.json").write_text(json.dumps(dict(images=ims, dataset="flickr30k")))
    return d


def fake_imagenet(d: Path, flat: bool, mapping: bool, n_synsets=1000):
    syn = [f"n{(7 * i + 3):08d}" for i in range(1000)]  # sorted already (increasing)
    pics = {"ILSVRC2012_val_00000010": 5, "ILSVRC2012_val_00000002": 999, "ILSVRC2012_val_00000007": 0}
    if mapping:
        # a mapping file whose order is NOT the sorted order: labels must follow the file
        order = syn[::-1]
        (d / "LOC_synset_mapping.txt").parent.mkdir(parents=True, exist_ok=True)
        (d / "LOC_synset_mapping.txt").write_text("".join(f"{s} name {i}\n" for i, s in enumerate(order)))
    if flat:
        img_dir = d / "ILSVRC" / "Data" / "CLS-LOC" / "val"; img_dir.mkdir(parents=True)
        (d / "LOC_val_solution.csv").write_text(
            "ImageId,PredictionString\n" + "".join(f"{n},{syn[c]} 1 2 3 4\n" for n, c in pics.items()))
        for n in pics: Image.new("RGB", (10, 12)).save(img_dir / f"{n}.JPEG")
    else:
        for s in syn[:n_synsets]: (d / "val" / s).mkdir(parents=True)
        for n, c in pics.items(): Image.new("RGB", (10, 12)).save(d / "val" / syn[c] / f"{n}.JPEG")
    return d, syn, pics


def fake_cifar(d: Path, n=8, seed=0):
    base = d / "cifar-100-python"; base.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    labels = [int(x) for x in rng.integers(0, 100, n)]
    for split in ("train", "test"):
        with open(base / split, "wb") as f:
            pickle.dump({"filenames": [f"{i}.png" for i in range(n)], "batch_label": split, "fine_labels": labels,
                         "coarse_labels": [0] * n, "data": data}, f)
    names = [f"name_{i}" for i in range(100)]; names[1] = "aquarium_fish"
    with open(base / "meta", "wb") as f:
        pickle.dump({"fine_label_names": names, "coarse_label_names": [f"c{i}" for i in range(20)]}, f)
    return d, data, labels


# ---------------------------------------------------------------- Flickr30k
def test_flickr_split_captions_and_index(tmp_path):
    fake_flickr(tmp_path)
    f = load_flickr30k(tmp_path, "test")
    assert [p.name for p in f.images] == ["100.jpg", "101.jpg", "102.jpg"]
    assert all(p.exists() for p in f.images)
    assert len(f.captions) == 15 and f.captions[0] == "A picture number 0 , caption 0 ."
    assert f.caption_image.tolist() == [0] * 5 + [1] * 5 + [2] * 5
    assert [p.name for p in load_flickr30k(tmp_path, "val").images] == ["103.jpg"]
    assert [p.name for p in load_flickr30k(tmp_path, "train").images] == ["104.jpg", "105.jpg"]  # restval joins train


def test_flickr_root_from_env(tmp_path, monkeypatch):
    fake_flickr(tmp_path)
    monkeypatch.setenv(FLICKR30K_ENV, str(tmp_path))
    assert len(load_flickr30k().images) == 3


def test_flickr_missing_files_named(tmp_path, monkeypatch):
    monkeypatch.delenv(FLICKR30K_ENV, raising=False)
    monkeypatch.setenv("VLBIAS_DATA", str(tmp_path / "nodata"))
    with pytest.raises(MissingDataError, match=r"nodata/flickr30k/dataset_flickr30k\.json.*caption_datasets\.zip"):
        load_flickr30k()
    fake_flickr(tmp_path / "f")
    (tmp_path / "f" / "flickr30k-images" / "101.jpg").unlink()
    with pytest.raises(MissingDataError, match=r"101\.jpg.*DenotationGraph"):
        load_flickr30k(tmp_path / "f")
    assert len(load_flickr30k(tmp_path / "f", check_images=False).images) == 3


@pytest.mark.parametrize("content, msg", [("{oops", "not valid JSON"), ('{"x": 1}', "no 'images' list"),
                                          ('{"images": [{"filename": "a.jpg"}]}', "lacks one of"),
                                          ('{"images": [{"filename": "a.jpg", "split": "test", "sentences": [{}]}]}', "without a 'raw'")])
def test_flickr_malformed_json_names_file(tmp_path, content, msg):
    (tmp_path / "flickr30k-images").mkdir()
    (tmp_path / "dataset_flickr30k.json").write_text(content)
    with pytest.raises(DatasetFormatError, match=msg) as e:
        load_flickr30k(tmp_path)
    assert "dataset_flickr30k.json" in str(e.value)


# ---------------------------------------------------------------- Recall@K
def brute_force_recall(T, V, ci, k):
    "Loop reference: ranks by descending score, ties to the lower index."
    def rank_of(scores, j): return 1 + sum(1 for m in range(len(scores)) if scores[m] > scores[j] or (scores[m] == scores[j] and m < j))
    S = T @ V.T
    t2i = np.mean([rank_of(S[t], ci[t]) <= k for t in range(len(T))])
    i2t = np.mean([min(rank_of(S[:, v], t) for t in range(len(T)) if ci[t] == v) <= k for v in range(len(V))])
    return t2i, i2t


def test_recall_identity_is_perfect():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 8)).astype(np.float32); X /= np.linalg.norm(X, axis=1, keepdims=True)
    r = retrieval_recall(X, X, np.arange(20))
    assert r == {f"{d}_R@{k}": 1.0 for d in ("t2i", "i2t") for k in (1, 5, 10)}


def test_recall_cyclic_permutation_hand_computed():
    # 5 images e_0..e_4; caption i = 0.9 e_{i+1} + 0.1 e_i: every caption's top image is the next one, its own second
    E = np.eye(5)
    T = np.stack([0.9 * E[(i + 1) % 5] + 0.1 * E[i] for i in range(5)])
    r = retrieval_recall(T, E, np.arange(5), ks=(1, 2, 5))
    assert r["t2i_R@1"] == 0 and r["t2i_R@2"] == 1 and r["t2i_R@5"] == 1
    # image j: caption j-1 scores 0.9, its own caption j 0.1, others 0 -> own caption at rank 2
    assert r["i2t_R@1"] == 0 and r["i2t_R@2"] == 1


def test_recall_any_caption_counts_for_text_retrieval():
    # image 0's first caption is wrong, its second right: text retrieval hit, image retrieval 1 of 2
    E = np.eye(3)
    T = np.stack([E[1], E[0], E[1] * 0.5, E[1] * 0.6, E[2], E[2] * 0.3])
    r = retrieval_recall(T, E, np.array([0, 0, 1, 1, 2, 2]), ks=(1,))
    assert r["t2i_R@1"] == pytest.approx(5 / 6)      # only caption 0 misses
    # image 1 (e_1): captions 0 (1.0, image 0), 3 (0.6), 2 (0.5) -> own at rank 2; images 0 and 2 hit
    assert r["i2t_R@1"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recall_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n_img, d = 17, 6
    ci = np.concatenate([np.arange(n_img), rng.integers(0, n_img, 30)])
    rng.shuffle(ci)
    V = rng.normal(size=(n_img, d)); T = V[ci] + 1.5 * rng.normal(size=(len(ci), d))
    T[3] = T[5]  # exact ties among captions
    ks = (1, 3, 5, 10, 40)
    r = retrieval_recall(T, V, ci, ks=ks, block=4)  # small blocks exercise the blocking
    assert r == retrieval_recall(T, V, ci, ks=ks)
    for k in ks:
        t2i, i2t = brute_force_recall(T.astype(np.float32), V.astype(np.float32), ci, k)
        assert r[f"t2i_R@{k}"] == pytest.approx(t2i) and r[f"i2t_R@{k}"] == pytest.approx(i2t)


@pytest.mark.parametrize("args, msg", [((np.eye(3), np.eye(3), np.array([0, 1])), "one image index per caption"),
                                       ((np.eye(3), np.eye(3), np.array([0.0, 1.0, 2.0])), "integer indices"),
                                       ((np.eye(3), np.eye(3)[:, :2], np.array([0, 1, 2])), "same d"),
                                       ((np.eye(3), np.eye(3), np.array([0, 1, 1])), "at least one caption")])
def test_recall_bad_input(args, msg):
    with pytest.raises(ValueError, match=msg):
        retrieval_recall(*args)
    with pytest.raises(ValueError, match="positive"):
        retrieval_recall(np.eye(3), np.eye(3), np.arange(3), ks=(0,))


def test_flickr_end_to_end_tiny_clip(tmp_path):
    from vlbias_nb.zoo.factory import load_model
    tiny = load_model("tiny-clip", device="cpu")
    f = load_flickr30k(fake_flickr(tmp_path))
    T, V = tiny.encode_text(f.captions), tiny.encode_image(f.images)
    r = retrieval_recall(T, V, f.caption_image, ks=(1, 3, 11))
    for k in (1, 3, 11):
        t2i, i2t = brute_force_recall(T, V, f.caption_image, k)
        assert r[f"t2i_R@{k}"] == pytest.approx(t2i) and r[f"i2t_R@{k}"] == pytest.approx(i2t)
    assert r["t2i_R@3"] == 1.0 and r["i2t_R@11"] == 1.0  # 3 images; 5 of the 15 captions each


# ---------------------------------------------------------------- ImageNet
@pytest.mark.parametrize("flat, mapping", [(False, False), (False, True), (True, True)])
def test_imagenet_layouts_labels(tmp_path, flat, mapping):
    root, syn, pics = fake_imagenet(tmp_path, flat, mapping)
    data = load_imagenet_val(root)
    order = syn[::-1] if mapping else syn
    expected = sorted(pics) if flat else [n for s in sorted(syn) for n in sorted(pics) if syn[pics[n]] == s]
    names = [Path(data.images.path(i)).stem for i in range(len(data))]
    assert names == expected
    assert data.labels.tolist() == [order.index(syn[pics[n]]) for n in names]
    assert len(data.classnames) == 1000 and data.classnames[0] == "tench" and len(data.templates) == 80
    assert data.images[0].size == (10, 12)


def test_imagenet_env_and_errors(tmp_path, monkeypatch):
    root, _, _ = fake_imagenet(tmp_path / "a", flat=False, mapping=False)
    monkeypatch.setenv(IMAGENET_ENV, str(root))
    assert len(load_imagenet_val()) == 3
    partial, _, _ = fake_imagenet(tmp_path / "b", flat=False, mapping=False, n_synsets=1000)
    import shutil; shutil.rmtree(next(p for p in sorted((partial / "val").iterdir()) if not any(p.iterdir())))
    with pytest.raises(DatasetFormatError, match="found 999 synsets.*LOC_synset_mapping"):
        load_imagenet_val(partial)
    (tmp_path / "c").mkdir()
    with pytest.raises(MissingDataError, match="LOC_val_solution.csv"):
        load_imagenet_val(tmp_path / "c")
    with pytest.raises(MissingDataError, match=r"nowhere.*ILSVRC2012_img_val"):
        load_imagenet_val(tmp_path / "nowhere")
    flat, _, _ = fake_imagenet(tmp_path / "d", flat=True, mapping=True)
    next((flat / "ILSVRC/Data/CLS-LOC/val").iterdir()).unlink()
    with pytest.raises(MissingDataError, match="listed in LOC_val_solution.csv"):
        load_imagenet_val(flat)


def test_subset_seeded():
    data = ClassificationData(list(range(50)), np.arange(50), ["a"], [], "x")
    s1, s2 = data.subset(10, seed=3), data.subset(10, seed=3)
    assert s1.labels.tolist() == s2.labels.tolist() and sorted(s1.labels) == s1.labels.tolist()
    assert [s1.images[i] for i in range(10)] == s1.labels.tolist()
    assert data.subset(None) is data and data.subset(100) is data


# ---------------------------------------------------------------- CIFAR-100
def test_cifar_fake_pickle(tmp_path, monkeypatch):
    root, data, labels = fake_cifar(tmp_path)
    monkeypatch.setenv(CIFAR100_ENV, str(root))
    c = load_cifar100(check_md5=False)
    assert c.labels.tolist() == labels and len(c.classnames) == 100 and c.classnames[1] == "aquarium fish"
    assert tuple(c.templates) == CLIP_CIFAR_TEMPLATES and len(c.templates) == 18
    # pixels come back unchanged (torchvision's CHW-planar -> HWC layout)
    assert np.array_equal(np.asarray(c.images[2]), data[2].reshape(3, 32, 32).transpose(1, 2, 0))
    assert load_cifar100(root, "train", check_md5=False).labels.tolist() == labels
    with pytest.raises(DatasetFormatError, match="MD5"):
        load_cifar100(root)
    with pytest.raises(ValueError, match="split"):
        load_cifar100(root, "val")


def test_cifar_missing_and_corrupt(tmp_path):
    with pytest.raises(MissingDataError, match=r"cifar-100-python/test.*cifar-100-python\.tar\.gz"):
        load_cifar100(tmp_path)
    root, _, _ = fake_cifar(tmp_path / "x")
    (root / "cifar-100-python" / "test").write_bytes(b"not a pickle")
    with pytest.raises(DatasetFormatError, match="not torchvision's pickles"):
        load_cifar100(root, check_md5=False)


# ---------------------------------------------------------------- CIFAR-10 (SocialCounterfactuals Tab. 5)
CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]

def fake_cifar10(d: Path, n=5, seed=0):
    "torchvision's `cifar-10-batches-py/` layout: data_batch_1..5 and test_batch pickles (`data`, `labels`), batches.meta."
    base = d / "cifar-10-batches-py"; base.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    out = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data, labels = rng.integers(0, 256, (n, 3072), dtype=np.uint8), [int(x) for x in rng.integers(0, 10, n)]
        with open(base / name, "wb") as f:
            pickle.dump({"batch_label": name, "labels": labels, "data": data, "filenames": [f"{i}.png" for i in range(n)]}, f)
        out[name] = (data, labels)
    with open(base / "batches.meta", "wb") as f: pickle.dump({"label_names": CIFAR10_NAMES, "num_cases_per_batch": n}, f)
    return d, out

def test_cifar10_fake_pickle(tmp_path, monkeypatch):
    root, batches = fake_cifar10(tmp_path)
    monkeypatch.setenv(CIFAR10_ENV, str(root))
    c = load_cifar10(check_md5=False)
    data, labels = batches["test_batch"]
    assert c.labels.tolist() == labels and c.classnames == CIFAR10_NAMES and c.name == "cifar10-test"
    assert tuple(c.templates) == CLIP_CIFAR_TEMPLATES
    assert np.array_equal(np.asarray(c.images[3]), data[3].reshape(3, 32, 32).transpose(1, 2, 0))
    tr = load_cifar10(root, "train", check_md5=False)                 # the five training batches, in order
    assert tr.labels.tolist() == sum((batches[f"data_batch_{i}"][1] for i in range(1, 6)), [])
    with pytest.raises(DatasetFormatError, match="MD5"): load_cifar10(root)
    with pytest.raises(ValueError, match="split"): load_cifar10(root, "val")

def test_cifar10_missing_and_corrupt(tmp_path, monkeypatch):
    monkeypatch.delenv(CIFAR10_ENV, raising=False)
    with pytest.raises(MissingDataError, match=r"cifar-10-batches-py/test_batch.*VLBIAS_CIFAR10.*cifar-10-python\.tar\.gz"):
        load_cifar10(tmp_path)
    root, _ = fake_cifar10(tmp_path / "x")
    (root / "cifar-10-batches-py" / "batches.meta").unlink()
    with pytest.raises(MissingDataError, match="batches.meta"): load_cifar10(root, check_md5=False)
    root, _ = fake_cifar10(tmp_path / "y")
    (root / "cifar-10-batches-py" / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(DatasetFormatError, match="not torchvision's pickles"): load_cifar10(root, check_md5=False)

# ---------------------------------------------------------------- Caltech-256 (SocialCounterfactuals Tab. 5)
CALTECH_FOLDERS = {"001.ak47": 3, "010.beer-mug": 1, "145.motorbikes-101": 2, "232.t-shirt": 1, "257.clutter": 2}

def fake_caltech256(d: Path, torchvision_layout: bool):
    base = d / "caltech256" / "256_ObjectCategories" if torchvision_layout else d / "256_ObjectCategories"
    for c, n in CALTECH_FOLDERS.items():
        (base / c).mkdir(parents=True)
        for k in range(n): Image.new("RGB", (6, 4), (k, 0, 0)).save(base / c / f"{c[:3]}_{k + 1:04d}.jpg")
    (base / "145.motorbikes-101" / "RENAME2").write_text("x")           # stray non-jpg files are skipped
    (base / "001.ak47" / "notes.txt").write_text("x")
    return d

@pytest.mark.parametrize("torchvision_layout", [True, False])
def test_caltech256_layouts_labels_and_names(tmp_path, torchvision_layout, monkeypatch):
    root = fake_caltech256(tmp_path, torchvision_layout)
    monkeypatch.setenv(CALTECH256_ENV, str(root))
    c = load_caltech256()
    assert c.classnames == ["ak47", "beer mug", "motorbikes", "t-shirt"]            # clutter dropped
    assert c.labels.tolist() == [0, 0, 0, 1, 2, 2, 3] and c.images[0].size == (6, 4)
    assert tuple(c.templates) == CLIP_CALTECH_TEMPLATES and len(c.templates) == 34 and "a photo of a {}." in c.templates
    k = load_caltech256(root, drop_clutter=False)
    assert k.classnames[-1] == "clutter" and k.labels.tolist()[-2:] == [4, 4] and len(k) == 9

def test_caltech256_missing_and_bad_names(tmp_path, monkeypatch):
    monkeypatch.delenv(CALTECH256_ENV, raising=False)
    with pytest.raises(MissingDataError, match=r"256_ObjectCategories.*VLBIAS_CALTECH256.*data\.caltech\.edu"):
        load_caltech256(tmp_path)
    (tmp_path / "256_ObjectCategories" / "002.american-flag").mkdir(parents=True)
    with pytest.raises(MissingDataError, match="002.american-flag"): load_caltech256(tmp_path)
    with pytest.raises(DatasetFormatError, match="NNN.name"): caltech256_classname("ak47")
    assert caltech256_classname("063.electric-guitar-101") == "electric guitar"


# ---------------------------------------------------------------- zero-shot accuracy
class PlantedModel:
    """Stub model: prompt '<template> class<c>' embeds to e_c plus a template-specific offset that averages out;
    an image is an integer embedding to e_label (or e_(label+1) when 'flipped')."""
    def __init__(self, n_classes, templates):
        self.n, self.templates = n_classes, list(templates)
    def encode_text(self, texts, batch_size=256):
        out = []
        for t in texts:
            c = int(t.split("class")[1].split()[0].strip("."))
            j = next(i for i, tpl in enumerate(self.templates) if tpl.format(f"class{c}") == t)
            v = np.zeros(self.n + 1); v[c] = 1.0; v[self.n] = 5.0 if j == 0 else -5.0  # offsets cancel in the mean
            out.append(v / np.linalg.norm(v))
        return np.array(out, np.float32)
    def encode_image(self, images, batch_size=64):
        out = np.zeros((len(images), self.n + 1), np.float32)
        for i, (c, flip) in enumerate(images): out[i, (c + flip) % self.n] = 1.0
        return out


def test_zero_shot_accuracy_planted():
    templates = ["a photo of a {}.", "art of a {}."]
    n = 8
    labels = np.arange(40) % n
    flip = np.zeros(40, int); flip[:10] = 1           # 10 of 40 images look like the next class
    m = PlantedModel(n, templates)
    acc = zero_shot_accuracy(m, list(zip(labels, flip)), labels, [f"class{c}" for c in range(n)], templates=templates)
    assert acc["top1"] == pytest.approx(30 / 40)
    # a flipped image of class c scores 1 for class c+1 and exactly 0 for every other class (its own included); ties
    # go to the lower index, so its own class has rank 2 + c for c = 0..6 (top-5 iff c <= 3) and rank 8 for c = 7
    # (class 0 scores 1, classes 1..6 tie below). Flipped labels: 0..7, 0, 1 -> 6 of them within the top 5.
    assert acc["top5"] == pytest.approx((30 + 6) / 40)


def test_zero_shot_accuracy_single_template():
    # one template: every class embedding shares the same offset component, which does not change the argmax
    m = PlantedModel(4, ["a photo of a {}."])
    labels = np.array([0, 1, 2, 3])
    acc = zero_shot_accuracy(m, [(c, 0) for c in labels], labels, [f"class{c}" for c in range(4)], templates=["a photo of a {}."])
    assert acc == {"top1": 1.0, "top5": 1.0}


def test_zero_shot_accuracy_tiny_clip_brute_force(tmp_path):
    from vlbias_nb.zoo.factory import load_model
    from vlbias_nb.methods.embedding_cache import EmbeddingCache
    tiny = load_model("tiny-clip", device="cpu")
    root, _, labels = fake_cifar(tmp_path, n=10)
    c = load_cifar100(root, check_md5=False)
    names = c.classnames
    acc = zero_shot_accuracy(tiny, c.images, c.labels, names, templates=c.templates[:3])
    W = tiny.encode_text([t.format(n) for n in names for t in c.templates[:3]]).reshape(100, 3, -1).mean(1)
    W /= np.linalg.norm(W, axis=1, keepdims=True)
    S = tiny.encode_image([c.images[i] for i in range(10)]) @ W.T
    ranks = [1 + (S[i] > S[i, labels[i]]).sum() for i in range(10)]
    assert acc["top1"] == pytest.approx(np.mean(np.array(ranks) == 1))
    assert acc["top5"] == pytest.approx(np.mean(np.array(ranks) <= 5))
    cached = zero_shot_accuracy(tiny, c.images, c.labels, names, templates=c.templates[:3], cache=EmbeddingCache(tmp_path / "cache"))
    assert cached == acc


def test_zero_shot_accuracy_bad_input():
    m = PlantedModel(3, ["{}"])
    with pytest.raises(ValueError, match="2 images but 3 labels"):
        zero_shot_accuracy(m, [(0, 0), (1, 0)], [0, 1, 2], ["class0", "class1", "class2"], templates=["{}"])
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        topk_accuracy(np.zeros((2, 2)), [0, 2])

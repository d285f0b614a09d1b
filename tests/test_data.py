import json, pytest
from pathlib import Path
from vlbias_nb.data.coco import (load_coco_captions, load_coco_instances, load_image, LazyImages, CocoFormatError,
                            CorruptImageError, coco_annotation_file, md5_of, COCO_MEMBER_MD5)
from vlbias_nb.paths import MissingDataError, shared_path, DATA_ENV
from conftest import requires_shared

def _w(p, obj): p.write_text(obj if isinstance(obj, str) else json.dumps(obj)); return p

GOOD = {"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [{"image_id": 1, "caption": "a cat"}]}

@pytest.mark.parametrize("content,msg", [
    ('{"images": [', "is not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ({"images": []}, "missing top-level key(s) ['annotations']"),
    ({"images": [{"id": 1}], "annotations": []}, "images[0] lacks the key(s) ['file_name']"),
    ({"images": [{"id": 1, "file_name": "a"}], "annotations": [{"image_id": 1}]}, "annotations[0] lacks the key(s) ['caption']"),
    ({"images": [{"id": 1, "file_name": "a"}], "annotations": [{"image_id": 2, "caption": "x"}]}, "refer to image ids not in 'images'"),
    ({"images": [{"id": 1, "file_name": "a"}, {"id": 3, "file_name": "b"}], "annotations": [{"image_id": 1, "caption": "x"}]},
     "1 image id(s) have no caption, e.g. [3]"),
])
def test_bad_caption_files(tmp_path, content, msg):
    p = _w(tmp_path / "caps.json", content)
    with pytest.raises(CocoFormatError) as e: load_coco_captions(p)
    assert msg in str(e.value) and "caps.json" in str(e.value)

def test_missing_file(tmp_path):
    with pytest.raises(MissingDataError, match="nothere.json does not exist"): load_coco_captions(tmp_path / "nothere.json")

def test_good_file(tmp_path):
    c = load_coco_captions(_w(tmp_path / "c.json", GOOD))
    assert c.captions_by_image() == {1: ["a cat"]}

def test_bad_instances(tmp_path):
    inst = {"images": [{"id": 1, "file_name": "a"}], "categories": [{"id": 1, "name": "person"}],
            "annotations": [{"image_id": 1, "bbox": [0, 0, 5], "category_id": 1}]}
    with pytest.raises(CocoFormatError, match=r"bbox must be \[x, y, w, h\]"): load_coco_instances(_w(tmp_path / "i.json", inst))
    inst["annotations"][0].update(bbox=[0, 0, 5, 5], category_id=9)
    with pytest.raises(CocoFormatError, match="unknown category ids"): load_coco_instances(_w(tmp_path / "i.json", inst))

def test_corrupt_and_truncated_image(tmp_path):
    (tmp_path / "x.jpg").write_bytes(b"garbage")
    with pytest.raises(CorruptImageError, match="x.jpg is corrupt"): load_image(tmp_path / "x.jpg")
    from PIL import Image
    Image.new("RGB", (64, 64), (10, 200, 30)).save(tmp_path / "ok.jpg")
    data = (tmp_path / "ok.jpg").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptImageError, match="cut.jpg"): load_image(tmp_path / "cut.jpg")
    assert load_image(tmp_path / "ok.jpg").size == (64, 64)

def test_missing_shared_data_names_variable(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    with pytest.raises(MissingDataError, match="VLBIAS_DATA"): coco_annotation_file("shared:coco/annotations/captions_val2017.json")

@requires_shared("coco/annotations/captions_val2017.json")
def test_real_val_captions():
    p = shared_path("coco/annotations/captions_val2017.json")
    assert md5_of(p) == COCO_MEMBER_MD5["captions_val2017.json"]
    c = load_coco_captions(p)
    assert (len(c.images), len(c.captions)) == (5000, 25014)

@requires_shared("coco-mini/annotations/instances_val2017.json")
def test_coco_mini_images_and_boxes():
    inst = load_coco_instances(shared_path("coco-mini/annotations/instances_val2017.json"))
    pc = inst.person_counts()
    assert ((pc > 0).sum(), (pc == 1).sum()) == (39, 15)
    imgs = LazyImages(shared_path("coco-mini/val2017"), inst.images.file_name)
    one = pc[pc == 1].index[0]
    i = inst.images.index[inst.images.id == one][0]
    im = imgs[i]
    x, y, w, h = inst.person_boxes(one)[0]
    assert 0 <= x and x + w <= im.size[0] + 1 and 0 <= y and y + h <= im.size[1] + 1

def test_data_roots_auto_none_and_path(tmp_path, monkeypatch):
    from vlbias_nb.paths import MissingDataError
    from vlbias_nb.paths import resolve_data_root, DATASET_ENVS
    monkeypatch.setenv("VLBIAS_DATA", str(tmp_path / "no-shared-data"))
    for name, env in DATASET_ENVS.items():
        assert resolve_data_root(None, name) is None and resolve_data_root("None", name) is None
        assert resolve_data_root(str(tmp_path / "x"), name) == tmp_path / "x"      # a path is used as given
        monkeypatch.delenv(env, raising=False)
        with pytest.raises(MissingDataError, match=env): resolve_data_root("auto", name)
        (tmp_path / "no-shared-data" / name).mkdir(parents=True)
        assert resolve_data_root("auto", name) == tmp_path / "no-shared-data" / name   # the shared-data default
        monkeypatch.setenv(env, str(tmp_path)); assert resolve_data_root("auto", name) == tmp_path

# ---------------------------------------------------------------- pinned downloads (pooch), without network
import zipfile, pooch
import vlbias_nb.data.coco as data_mod

def _fake_archive(path, members):
    with zipfile.ZipFile(path, "w") as z:
        for name, text in members.items(): z.writestr(f"annotations/{name}", text)
    return path

def _allow_downloads(monkeypatch):
    "The one download policy (`vlbias_nb.paths.downloads_allowed`) says yes: the tests below fake the fetch itself."
    from vlbias_nb.paths import ALLOW_DOWNLOAD_ENV, OFFLINE_ENVS
    monkeypatch.setenv(ALLOW_DOWNLOAD_ENV, "1")
    for v in OFFLINE_ENVS: monkeypatch.delenv(v, raising=False)

def test_coco2017_source_extracts_member_through_pooch(tmp_path, monkeypatch):
    "`coco2017:MEMBER` fetches the official archive once (URL and MD5 pinned) and extracts the member atomically."
    calls = []
    def fake_retrieve(url, known_hash, fname, path, progressbar):
        calls.append((url, known_hash, fname))
        return str(_fake_archive(Path(path) / fname, {"instances_val2017.json": json.dumps(GOOD)}))
    monkeypatch.setattr(pooch, "retrieve", fake_retrieve)
    monkeypatch.setenv("VLBIAS_DOWNLOADS", str(tmp_path)); _allow_downloads(monkeypatch)
    out = coco_annotation_file("coco2017:instances_val2017.json")
    assert out == tmp_path / "annotations" / "instances_val2017.json" and json.loads(out.read_text()) == GOOD
    url, md5, _ = data_mod.COCO_2017_FILES["annotations_trainval2017.zip"]
    assert calls == [(url, f"md5:{md5}", "annotations_trainval2017.zip")]
    assert coco_annotation_file("coco2017:instances_val2017.json") == out and len(calls) == 1   # cached, not refetched

def test_coco2017_member_with_wrong_md5_is_refused(tmp_path, monkeypatch):
    "An extracted captions file that is not the official one (md5 pinned) is refused, naming the file."
    monkeypatch.setattr(pooch, "retrieve", lambda url, known_hash, fname, path, progressbar:
                        str(_fake_archive(Path(path) / fname, {"captions_val2017.json": json.dumps(GOOD)})))
    monkeypatch.setenv("VLBIAS_DOWNLOADS", str(tmp_path)); _allow_downloads(monkeypatch)
    with pytest.raises(CocoFormatError, match="captions_val2017.json does not match the official md5"):
        coco_annotation_file("coco2017:captions_val2017.json")

def test_failed_download_says_where_to_put_the_file(tmp_path, monkeypatch):
    def offline(*a, **k): raise ConnectionError("no network")
    monkeypatch.setattr(pooch, "retrieve", offline)
    with pytest.raises(MissingDataError) as e: data_mod.fetch_coco_archive("annotations_trainval2017.zip", dest=tmp_path)
    msg = str(e.value)
    assert "annotations_trainval2017.zip" in msg and str(tmp_path) in msg and "f4bbac642086de4f52a3fdda2de5fa2c" in msg
    with pytest.raises(KeyError, match="Unknown COCO archive"): data_mod.fetch_coco_archive("train2099.zip", dest=tmp_path)
    _allow_downloads(monkeypatch)                                 # allowed, but the transfer fails: the same advice
    with pytest.raises(MissingDataError, match="f4bbac642086de4f52a3fdda2de5fa2c"): data_mod.fetch_coco_archive("annotations_trainval2017.zip", dest=tmp_path)

def test_missing_annotation_file_names_the_fetch(tmp_path):
    with pytest.raises(MissingDataError, match="coco2017:captions_val2017.json"): load_coco_captions(tmp_path / "x.json")

def test_truncated_instances_file_is_named(tmp_path):
    p = _w(tmp_path / "instances.json", '{"images": [{"id": 1, "file_name": "a.jpg", "width": 4, "height": 4}], "annot')
    with pytest.raises(CocoFormatError, match="instances.json is not valid JSON"): load_coco_instances(p)

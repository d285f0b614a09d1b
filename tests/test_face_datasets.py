"Face dataset loaders on fake folders in the real FairFace / UTKFace layouts, and the planted face set."
import numpy as np, pandas as pd, pytest
from PIL import Image
from vlbias_nb.paths import MissingDataError
from vlbias_nb.data.faces import (load_fairface, load_utkface, parse_utkface_name, make_planted_faces, face_images,
                                     FAIRFACE_ENV, UTKFACE_ENV, age_group)

def _fairface(root, split="val", margin_dir="", rows=None):
    rows = rows or [("20-29", "Male", "Black"), ("3-9", "Female", "White"), ("more than 70", "Female", "Latino_Hispanic"),
                    ("40-49", "Male", "Middle Eastern")]
    (root / margin_dir / split).mkdir(parents=True, exist_ok=True)
    files = []
    for i, _ in enumerate(rows, 1):
        Image.new("RGB", (8, 8), (i, i, i)).save(root / margin_dir / split / f"{i}.jpg"); files.append(f"{split}/{i}.jpg")
    pd.DataFrame({"file": files, "age": [r[0] for r in rows], "gender": [r[1] for r in rows], "race": [r[2] for r in rows],
                  "service_test": True}).to_csv(root / f"fairface_label_{split}.csv", index=False)

def test_fairface_official_layout(tmp_path):
    _fairface(tmp_path, "train"); _fairface(tmp_path, "val")
    ds = load_fairface("val", root=tmp_path)
    assert len(ds) == 4 and ds.attribute("race").tolist() == ["Black", "White", "Latino_Hispanic", "Middle Eastern"]
    assert ds.codes("gender").tolist() == [0, 1, 1, 0]
    assert all(p.endswith(f"val/{i}.jpg") for i, p in enumerate(ds.paths, 1))
    assert len(ds.balanced("gender")) == 4

def test_fairface_margin_subfolder_and_env(tmp_path, monkeypatch):
    _fairface(tmp_path, "val", margin_dir="fairface-img-margin025-trainval")
    monkeypatch.setenv(FAIRFACE_ENV, str(tmp_path))
    ds = load_fairface("val")
    assert "fairface-img-margin025-trainval" in ds.paths[0]

def test_fairface_errors(tmp_path, monkeypatch):
    monkeypatch.setenv(FAIRFACE_ENV, str(tmp_path / "absent"))
    with pytest.raises(MissingDataError, match=FAIRFACE_ENV): load_fairface("val")
    _fairface(tmp_path, "val", rows=[("20-29", "Man", "Black")])
    with pytest.raises(ValueError, match="unknown gender label.*Man"): load_fairface("val", root=tmp_path)
    _fairface(tmp_path, "val"); (tmp_path / "val" / "2.jpg").unlink()
    with pytest.raises(MissingDataError, match="2.jpg"): load_fairface("val", root=tmp_path)
    with pytest.raises(ValueError, match="split"): load_fairface("test", root=tmp_path)

def test_utkface_layout(tmp_path, monkeypatch):
    d = tmp_path / "UTKFace"; d.mkdir()
    for n in ["1_0_2_20161219140623097.jpg.chip.jpg", "35_1_3_20170104.jpg.chip.jpg", "80_0_0_2017.jpg"]:
        Image.new("RGB", (8, 8)).save(d / n)
    monkeypatch.setenv(UTKFACE_ENV, str(tmp_path))
    ds = load_utkface()
    got = ds.labels.sort_values("age_years")[["gender", "race", "age"]].values.tolist()
    assert got == [["Male", "Asian", "0-2"], ["Female", "Indian", "30-39"], ["Male", "White", "more than 70"]]
    Image.new("RGB", (8, 8)).save(d / "39_1_20170116174525125.jpg.chip.jpg")   # a real malformed UTKFace name
    with pytest.raises(ValueError, match="39_1_2017"): load_utkface()
    assert len(load_utkface(on_bad_name="skip")) == 3

def test_utkface_parse_and_age_groups():
    assert parse_utkface_name("26_1_4_2017.jpg")["race"] == "Others"
    with pytest.raises(ValueError, match="race code 7"): parse_utkface_name("26_1_7_2017.jpg")
    assert [age_group(a) for a in (0, 2, 3, 19, 69, 70, 116)] == ["0-2", "0-2", "3-9", "10-19", "60-69", "more than 70", "more than 70"]

def test_planted_faces_deterministic_and_balanced():
    a, b = make_planted_faces(30, seed=5), make_planted_faces(30, seed=5)
    assert (a.attribute("gender") == b.attribute("gender")).all()
    assert np.array_equal(np.asarray(face_images(a)[3]), np.asarray(face_images(b)[3]))
    assert (a.attribute("gender") == "Female").sum() == 15
    # the planted gender cue is visible: mean pixel at the side of the face differs between the groups
    ds = make_planted_faces(200, seed=0)
    arr = np.stack([np.asarray(im, float) for im in face_images(ds)])
    side = arr[:, 14:24, 5:8].mean(axis=(1, 2, 3)); g = ds.attribute("gender")
    assert abs(side[g == "Male"].mean() - side[g == "Female"].mean()) > 10

"Issue 34's cases outside the runner: damaged checkpoints, an empty generation manifest, a UTF-8 byte-order mark."
import json
import pytest
import torch
from pathlib import Path
from vlbias_nb.run.card_cli import card_main
from vlbias_nb.zoo.factory import load_model, tiny_hf_model
from vlbias_nb.zoo.registry import DamagedWeightsError
from vlbias_nb.methods.generation import GenerationManifest, CorruptManifestError
from vlbias_nb.paths import read_json_input, read_text_input


@pytest.mark.parametrize("content, why", [
    (b"", "empty, truncated or not a checkpoint"),
    (b"garbage" * 100, "empty, truncated or not a checkpoint"),
    (None, "do not fit the model's architecture"),
])
def test_a_damaged_checkpoint_is_one_message_exit_2(tmp_path, capsys, content, why):
    "Case 5: `vlbias card ARCH,ckpt.pt` with an empty, garbage or foreign checkpoint: one line naming the file, exit 2."
    ckpt = tmp_path / "ckpt.pt"
    if content is None: torch.save({"not.a.layer": torch.zeros(3)}, ckpt)
    else: ckpt.write_bytes(content)
    assert card_main([f"ViT-B-32,{ckpt}", "--only", "gab.text_bias", "--out", str(tmp_path / "card")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(ckpt) in err and why in err and "Traceback" not in err, err
    assert "weights_only=False`" not in err                       # never torch's advice to load unsafely


def test_a_pickle_that_is_not_plain_weights_is_refused(tmp_path):
    "A checkpoint holding a pickled module (weights_only refuses it): refused, never loaded unsafely."
    ckpt = tmp_path / "module.pt"
    torch.save({"m": torch.nn.Linear(2, 2)}, ckpt)
    with pytest.raises(DamagedWeightsError, match="refuses to unpickle it safely"):
        load_model(str(ckpt), device="cpu", arch="ViT-B-32")


def test_a_damaged_safetensors_in_a_transformers_folder(tmp_path):
    "Case 5: `local-dir:` / a transformers folder whose model.safetensors is garbage: one error naming the folder."
    m = tiny_hf_model("hf-clip")
    m.model.save_pretrained(tmp_path); m.tokenizer.save_pretrained(tmp_path); m.image_processor.save_pretrained(tmp_path)
    load_model(str(tmp_path), device="cpu")                                  # intact: loads
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(DamagedWeightsError, match=f"{tmp_path}.*cannot be loaded"):
        load_model(str(tmp_path), device="cpu")


def test_an_empty_manifest_is_reported_before_anything_is_generated(tmp_path):
    "Case 4: a zero-byte manifest.sqlite is not taken for an empty one (which would make every image again)."
    (tmp_path / "manifest.sqlite").write_bytes(b"")
    GenerationManifest(tmp_path / "manifest.sqlite")                         # no images yet: a manifest being created
    (tmp_path / "manifest.sqlite").write_bytes(b"")
    (tmp_path / "images").mkdir(); (tmp_path / "images" / "a.png").write_bytes(b"png")   # images made, their record lost
    with pytest.raises(CorruptManifestError, match="is empty \\(0 bytes\\).*Move it aside"):
        GenerationManifest(tmp_path / "manifest.sqlite")
    assert (tmp_path / "manifest.sqlite").stat().st_size == 0                # nothing written over it


def test_a_byte_order_mark_is_read_past(tmp_path):
    "Case 8: a captions file saved with a UTF-8 BOM reads as the same JSON (it was called malformed)."
    obj = {"annotations": [{"image_id": 1, "caption": "a man"}]}
    f = tmp_path / "captions.json"
    f.write_bytes(b"\xef\xbb\xbf" + json.dumps(obj).encode())
    assert read_json_input(f) == obj and not read_text_input(f).startswith("\ufeff")


def test_sqlite_disk_io_error_names_the_manifest(tmp_path):
    "Case 6: SQLite's bare 'disk I/O error' (a disk filling during `vlbias generate`) becomes an OSError naming the file."
    import sqlite3, errno
    man = GenerationManifest(tmp_path / "manifest.sqlite")
    e = man._error(sqlite3.OperationalError("disk I/O error"))
    assert isinstance(e, OSError) and e.errno == errno.EIO and e.filename == str(tmp_path / "manifest.sqlite")
    assert "is the disk full" in str(e)


# --- the remaining cases of issue 34: publishing, paths of the wrong kind, card data, image inputs, exit codes, wording

import errno, os, shutil, subprocess, time
from PIL import Image
from conftest import requires_shared
from vlbias_nb.run import publish
from vlbias_nb.run.outputs import RunEnvironmentError, describe_os_error
from vlbias_nb.run.publish import publish_outputs
from vlbias_nb.run.cli import main, exit_code
from vlbias_nb.paths import data_root, PathKindError, check_path_variables
from vlbias_nb.data.card_data import check_card_data, DataFolderError
from vlbias_nb.data import rehearsal


def _tree(d: Path) -> dict:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}

def _run_folder(root: Path, files: dict) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True); (root / rel).write_bytes(data)
    return root


def test_publish_with_the_disk_filling_half_way_keeps_the_previous_publish(tmp_path, monkeypatch):
    "Case 1 (injected ENOSPC after the first file): the previous publish byte-identical, nothing staged left, one message."
    dest = tmp_path / "figures/demo"
    first = _run_folder(tmp_path / "runs1/demo", {"figures/f.png": b"old png", "figures/f.svg": b"old svg", "tables/t.csv": b"a\n1\n"})
    publish_outputs(first, dest)
    before = _tree(dest)
    second = _run_folder(tmp_path / "runs2/demo", {"figures/f.png": b"new png!", "figures/f.svg": b"new svg!", "tables/u.csv": b"b\n2\n"})
    calls = []
    def half_full(src, dst):
        calls.append(dst)
        if len(calls) > 1: raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        shutil.copyfile(src, dst)
    monkeypatch.setattr(publish, "_publish_copy", half_full)
    with pytest.raises(RunEnvironmentError) as e: publish_outputs(second, dest)
    msg = str(e.value)
    assert _tree(dest) == before and sorted(p.name for p in dest.parent.iterdir()) == [".locks", "demo"]
    block = os.statvfs(dest.parent).f_frsize                              # three files of 8, 8 and 4 bytes: a block each
    assert msg.startswith(f"publishing demo to {dest} failed: {dest.parent}: no space left on the device; free at least "
                          f"{publish._human_bytes(3 * block)} there"), msg
    assert "--resume --publish" in msg and f"{dest} still holds the previous publish, unchanged" in msg
    assert ".publish-" not in msg and "--out" not in msg                   # neither the staged name nor advice that does not help
    monkeypatch.undo()
    assert [p.name for p in publish_outputs(second, dest)] == ["f.png", "f.svg", "u.csv"]
    assert _tree(dest) == {"f.png": b"new png!", "f.svg": b"new svg!", "u.csv": b"b\n2\n"}   # then the new one, whole


def test_publish_on_a_real_small_disk(tmp_path):
    "Case 1 on a 64 kB tmpfs holding figures/ (root only, else skipped): the second publish does not fit; nothing is lost."
    if os.geteuid() != 0: pytest.skip("mounting a tmpfs needs root")
    figs = tmp_path / "figures"; figs.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(figs)], capture_output=True, text=True)
    if r.returncode: pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        first = _run_folder(tmp_path / "runs1/demo", {"figures/f.png": os.urandom(20_000), "tables/t.csv": os.urandom(20_000)})
        publish_outputs(first, figs / "demo")
        before = _tree(figs / "demo")
        second = _run_folder(tmp_path / "runs2/demo", {"figures/f.png": os.urandom(15_000), "figures/g.png": os.urandom(15_000),
                                                        "tables/t.csv": os.urandom(15_000)})
        with pytest.raises(RunEnvironmentError, match=f"publishing demo to {figs / 'demo'} failed: .*no space left on the device; free at least 49.2 kB"):   # 3 x 15,000 bytes, each in 4 kB blocks
            publish_outputs(second, figs / "demo")
        assert _tree(figs / "demo") == before and sorted(p.name for p in figs.iterdir()) == [".locks", "demo"]
    finally: subprocess.run(["umount", "-l", str(figs)])


@pytest.mark.parametrize("argv", [["run", "coco_gender_labels"], ["check", "coco_gender_labels"],
                                  ["reproduce", "--only", "coco_gender_labels"], ["generate", "gensynth_editing"]])
def test_a_data_variable_naming_a_file_stops_every_command(tmp_path, monkeypatch, capsys, argv):
    "Case 2: VLBIAS_DATA naming a file: exit 2 at the start of run, check, reproduce and generate, naming the variable."
    (tmp_path / "data.txt").write_text("not a folder")
    monkeypatch.setenv("VLBIAS_DATA", str(tmp_path / "data.txt"))
    out = ["--out", str(tmp_path / "out")] if argv[0] in ("run", "reproduce") else []
    assert main([*argv, *out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"VLBIAS_DATA names '{tmp_path / 'data.txt'}', a file, but it must be a folder" in err, err
    assert not (tmp_path / "out").exists()


def test_a_file_variable_naming_a_folder_and_a_folder_under_a_file(tmp_path, monkeypatch):
    "Case 2, the reverse and the nested kind: a checkpoint variable naming a folder; a cache folder under a file."
    (tmp_path / "f").write_text("x")
    monkeypatch.setenv("VLBIAS_NEGCLIP", str(tmp_path)); monkeypatch.setenv("VLBIAS_CACHE", str(tmp_path / "f" / "cache"))
    with pytest.raises(PathKindError) as e: check_path_variables()
    assert "VLBIAS_NEGCLIP names" in str(e.value) and f"VLBIAS_CACHE names '{tmp_path / 'f' / 'cache'}', a path under the file {tmp_path / 'f'}" in str(e.value)
    assert exit_code(e.value) == 2


@pytest.mark.parametrize("damage, says", [
    ("no csv", "FairFace label file {root}/fairface_label_val.csv is missing"),
    ("columns", "columns ['gender'] missing"),
    ("F", "line 2: unknown gender 'F'"),
    ("woman", "line 3: unknown gender 'woman'"),
    ("corrupt jpeg", "image {root}/val/2.jpg (listed at line 3 of {root}/fairface_label_val.csv) is not a readable image"),
    ("missing jpeg", "image {root}/val/1.jpg (listed at line 2 of {root}/fairface_label_val.csv) is missing"),
])
def test_a_broken_fairface_folder_is_refused_naming_file_and_row(tmp_path, damage, says):
    "Case 3: the checks the card runs on `--data fairface=DIR` before any work: each names the file (and line), exit 2."
    root = rehearsal.make_fairface(tmp_path / "ff", n_items=4)
    assert check_card_data("fairface", root) == 4
    lab = root / "fairface_label_val.csv"; rows = lab.read_text().splitlines()
    if damage == "no csv": lab.unlink()
    elif damage == "columns": lab.write_text("\n".join([rows[0].replace("gender", "sex"), *rows[1:]]))
    elif damage == "F": lab.write_text("\n".join([rows[0], rows[1].replace(",Female,", ",F,"), *rows[2:]]))
    elif damage == "woman": lab.write_text("\n".join([*rows[:2], rows[2].replace(",Male,", ",woman,"), *rows[3:]]))
    elif damage == "corrupt jpeg": (root / "val/2.jpg").write_bytes(b"\xff\xd8\xff\xe0 garbage")
    else: (root / "val/1.jpg").unlink()
    with pytest.raises(DataFolderError) as e: check_card_data("fairface", root)
    assert says.format(root=root) in str(e.value) and len(str(e.value).splitlines()) == 1
    assert exit_code(e.value) == 2


@requires_shared("coco-mini/val2017")
def test_a_run_missing_one_image_stops_before_the_notebook_starts(tmp_path, capsys):
    "Case 7: `vlbias run tfidf_table1 -p clip_images <folder missing one image>`: exit 2 naming the image, at once."
    src, imgs = data_root() / "coco-mini/val2017", tmp_path / "imgs"
    imgs.mkdir()
    names = sorted(os.listdir(src))
    for n in names[1:]: os.symlink(src / n, imgs / n)
    t0 = time.time()
    assert main(["run", "tfidf_table1", "-p", "clip_images", str(imgs), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert names[0] in err and "clip_images" in err and f"1 of the {len(names)} images listed in" in err, err
    assert time.time() - t0 < 60 and not (tmp_path / "out" / "tfidf_table1").exists() and not (tmp_path / "out" / "failed").exists()


@requires_shared("coco-mini/annotations/instances_train2017.json")
def test_a_file_where_a_folder_is_needed_is_exit_2_through_every_entry(tmp_path, capsys):
    "Case 9: --out, -p generation_dir and --generation-dir naming a file: one code, 2 (bad input), each naming the file."
    f = tmp_path / "afile"; f.write_text("x")
    assert main(["run", "coco_gender_labels", "--out", str(f)]) == 2
    assert main(["run", "gensynth_editing", "-p", "generation_dir", str(f), "--out", str(tmp_path / "out")]) == 2
    assert main(["generate", "gensynth_editing", "--generation-dir", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count(f"{f} is a file") == 3 and "Traceback" not in err, err


def test_exit_code_rule():
    "Case 9: the one rule: a damaged manifest is bad input (2) wherever it surfaces; the machine saying no is 3."
    assert exit_code(CorruptManifestError("damaged")) == 2 and exit_code(DataFolderError("x")) == 2
    assert exit_code(OSError(errno.ENOSPC, "full", "/x")) == 3 and exit_code(OSError(errno.EIO, "disk I/O error", "/m")) == 3
    assert exit_code(NotADirectoryError(errno.ENOTDIR, "Not a directory", "/f")) == 2


def test_wording_a_path_that_exists_is_never_not_found(tmp_path, capsys):
    "Case 10: a folder given where a file is needed: the message says what it is, never 'not found'."
    assert main(["run", "coco_gender_labels", "-p", "coco_captions", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path} is a folder, but coco_captions names a file" in err and "not found" not in err, err


def test_wording_a_read_only_folder_names_the_folder_not_the_probe(tmp_path, monkeypatch):
    "Case 10: the read-only / permission message names the output folder, not the temporary probe file."
    from vlbias_nb.run.outputs import check_output_folder
    import tempfile
    def refuse(*a, dir=None, **k): raise PermissionError(errno.EACCES, "Permission denied", f"{dir}/.vlbias-write-test-abc")
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(RunEnvironmentError) as e: check_output_folder(tmp_path / "o")
    assert str(e.value).startswith(f"{tmp_path / 'o'}: permission denied") and ".vlbias-write-test" not in str(e.value)


def test_wording_no_earlier_run_is_not_called_untouched(tmp_path):
    "Case 10: a first run that fails does not say 'earlier runs are untouched' (there were none)."
    from conftest import make_notebook
    from vlbias_nb.run.execution import run_notebook, NotebookFailed
    nb = make_notebook(tmp_path / "nbs", "01_boom.ipynb", ["out_dir = None", "raise OSError(28, 'No space left on device')"])
    with pytest.raises(NotebookFailed) as e: run_notebook(nb, out_root=tmp_path / "out", progress=False, html=False)
    msg = str(e.value)
    assert f"there was no earlier run in {tmp_path / 'out' / 'boom'}" in msg and "untouched" not in msg
    assert e.value.environment and f"free some space on the file system of {tmp_path / 'out'}" in msg


def test_a_device_that_is_not_here_is_the_environment(tmp_path, capsys):
    "Case 9: asking for a GPU this machine lacks is the environment (3), not bad input; nothing is run."
    assert main(["run", "tfidf_table1", "-p", "device", "cuda:99", "--out", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err
    assert "device = 'cuda:99'" in err and "CUDA device(s)" in err and not (tmp_path / "out" / "tfidf_table1").exists()


def test_publish_into_a_mount_point_is_refused_whole(tmp_path):
    "Case 1 as the issue reproduced it: a small tmpfs mounted over figures/<name> holding the previous publish."
    if os.geteuid() != 0: pytest.skip("mounting a tmpfs needs root")
    dest = tmp_path / "figures/demo"
    first = _run_folder(tmp_path / "runs1/demo", {"figures/f.png": b"old png", "tables/t.csv": b"a\n1\n"})
    publish_outputs(first, dest)
    dest.mkdir(exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(dest)], capture_output=True, text=True)
    if r.returncode: pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        publish_outputs(first, dest)      # fails too: the folder cannot be swapped; so fill it by hand, as a publish would have
    except RunEnvironmentError: pass
    try:
        for n, b in {"f.png": b"old png", "t.csv": b"a\n1\n"}.items(): (dest / n).write_bytes(b)
        before = _tree(dest)
        second = _run_folder(tmp_path / "runs2/demo", {"figures/f.png": os.urandom(30_000), "figures/f.svg": b"svg"})
        with pytest.raises(RunEnvironmentError) as e: publish_outputs(second, dest)
        assert _tree(dest) == before and sorted(p.name for p in dest.parent.iterdir()) == [".locks", "demo"]
        assert f"{dest} is a mount point" in str(e.value) and f"{dest} still holds the previous publish, unchanged" in str(e.value)
    finally: subprocess.run(["umount", "-l", str(dest)])


def test_a_failed_publish_puts_the_notebook_page_back(tmp_path, monkeypatch):
    "Case 1: the swap fails after the analysis notebook's page was rewritten: the page is put back byte for byte."
    import nbformat
    from conftest import make_notebook
    from vlbias_nb.run.execution import run_notebook
    src = make_notebook(tmp_path / "nbs", "01_demo.ipynb", ["n = 2\nout_dir = None",
                        "from vlbias_nb.paths import save_table\nimport pandas as pd\nsave_table(pd.DataFrame({'v': [1] * n}), out_dir, 'values')"])
    nb = nbformat.read(str(src), as_version=4); nb.cells.insert(0, nbformat.v4.new_markdown_cell("# Demo")); nbformat.write(nb, str(src))
    run = run_notebook(src, out_root=tmp_path / "out", progress=False, html=False)
    page, dest = src.read_bytes(), tmp_path / "figures/demo"
    def no_swap(a, b): raise OSError(errno.ENOSPC, "No space left on device", str(b))
    monkeypatch.setattr(publish, "_replace_dir", no_swap)
    with pytest.raises(RunEnvironmentError, match="nothing was published to"): publish_outputs(run, dest, notebook=src)
    assert src.read_bytes() == page and not dest.exists()
    monkeypatch.undo()
    publish_outputs(run, dest, notebook=src)
    assert src.read_bytes() != page and (dest / "values.csv").exists() and (dest / "run.json").exists()

def test_every_data_set_variable_is_a_declared_path_variable():
    "A data set's VLBIAS_* variable (paths.DATASET_ENVS) is checked for its kind at the start of every command (#34)."
    from vlbias_nb.paths import DATASET_ENVS, path_variables
    declared = path_variables()
    missing = sorted(set(DATASET_ENVS.values()) - set(declared))
    assert not missing, f"declare {missing} in vlbias_nb/resources/path_variables.csv"
    assert all(declared[v][0] == "folder" for v in DATASET_ENVS.values())

"""Issue #20: runs never lose or fake results. Concurrent runs, missing inputs, stale resumes, damaged generated images,
environment errors, out-of-range values, file modes. Each test names the case of the issue it covers."""
import errno, hashlib, json, os, signal, socket, sqlite3, subprocess, sys, textwrap, time
import nbformat, pytest
import numpy as np, pandas as pd
from pathlib import Path
from PIL import Image
from conftest import requires_shared, make_notebook as _nb
from vlbias_nb.run.parameters import resolve_parameters, analysis_notebooks, notebook_parameters, ParameterError
from vlbias_nb.run.inputs import MissingInputError
from vlbias_nb.run.prepare import prepare_run
from vlbias_nb.run.records import is_up_to_date
from vlbias_nb.run.outputs import output_lock, RunEnvironmentError, OutputBusyError
from vlbias_nb.run.publish import publish_outputs
from vlbias_nb.run.execution import run_notebook
from vlbias_nb.run.reproduce import reproduce
from vlbias_nb.run.cli import main, format_parameters
from vlbias_nb.methods.generation import run_generation, GenerationManifest, CorruptManifestError
from vlbias_nb.paths import atomic_path, process_tag

NOTEBOOKS = analysis_notebooks()
CLI = [sys.executable, "-m", "vlbias_nb.run.cli"]


WRITE = ("from vlbias_nb.paths import save_table\nimport pandas as pd\n"
         "print('writing', n, 'rows')\nsave_table(pd.DataFrame({'v': [value] * n}), out_dir, 'values')")

@pytest.fixture
def demo(tmp_path):
    return _nb(tmp_path / "nbs", "01_demo.ipynb", ["n = 2  # rows [1, 9]\nvalue = 1.5\nout_dir = None", WRITE])

def _wait_for(cond, timeout=120, what="condition"):
    t0 = time.time()
    while not cond():
        if time.time() - t0 > timeout: raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)

def _sha256(p): return hashlib.sha256(Path(p).read_bytes()).hexdigest()

# --- 1. two runs into one output folder ------------------------------------------------------------------------------

def test_two_runs_into_one_folder_wait_for_each_other_and_never_mix(tmp_path):
    "Case 1: the second run waits (naming the first), then replaces it whole; both exit 0; record and notebook agree."
    out = tmp_path / "out"
    cmd = [*CLI, "run", "coco_gender_labels", "--out", str(out), "-p", "n_planted_images"]
    a = subprocess.Popen(cmd + ["200000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)   # a run of ~30 s
    holder = out / ".locks" / "coco_gender_labels.holder.json"
    try: _wait_for(lambda: holder.exists() or a.poll() is not None, what="the first run to take the folder's lock")
    except AssertionError: a.kill(); raise
    assert a.poll() is None, "the first run should be running, holding the folder's lock"
    b = subprocess.Popen(cmd + ["120", "-p", "seed", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    (_, ea), (_, eb) = a.communicate(timeout=600), b.communicate(timeout=600)
    assert a.returncode == 0, ea[-2000:]
    assert b.returncode == 0, eb[-2000:]
    assert "waiting for it to end" in eb and f"pid {a.pid} on {socket.gethostname()}" in eb
    d = out / "coco_gender_labels"
    rec = json.loads((d / "run.json").read_text())
    assert rec["parameters"] == {"n_planted_images": 120, "seed": 2}
    executed = nbformat.read(str(d / "coco_gender_labels.ipynb"), as_version=4)
    injected = next(c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", []))
    assert "seed = 2" in injected.source and rec["executed_notebook_sha256"] == _sha256(d / "coco_gender_labels.ipynb")
    assert all(c.get("execution_count") for c in executed.cells if c.cell_type == "code")     # every cell ran
    assert pd.read_csv(d / "tables/planted_label_recovery.csv").n_images.sum() == 120
    assert not list((out / ".staging").iterdir()), "no staging folder is left behind"

def test_a_busy_folder_is_refused_with_no_wait_naming_the_holder(tmp_path, capsys):
    "Case 1: --no-wait refuses at once (exit 4), naming the run that holds the folder; nothing is written."
    script = ("import sys, time\nfrom vlbias_nb.run.outputs import output_lock\n"
              "with output_lock(sys.argv[1], describe={'command': 'vlbias run coco_gender_labels'}): print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "coco_gender_labels")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["run", "coco_gender_labels", "--no-wait", "--out", str(tmp_path)]) == 4
        err = capsys.readouterr().err
        assert f"pid {holder.pid}" in err and "vlbias run coco_gender_labels" in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / ".staging").exists() and not (tmp_path / "coco_gender_labels").exists()
    finally: holder.kill(); holder.wait()

def test_resume_needs_the_notebook_the_record_describes(demo, tmp_path):
    "Case 1: a folder whose executed notebook is not the one run.json describes is not up to date."
    out = tmp_path / "out"
    d = run_notebook(demo, out_root=out, progress=False, html=False)
    assert is_up_to_date(demo, out, "smoke", {})
    nb = nbformat.read(str(d / "demo.ipynb"), as_version=4)
    nb.cells = nb.cells[:1]; nbformat.write(nb, str(d / "demo.ipynb"))           # another run's partly executed notebook
    assert not is_up_to_date(demo, out, "smoke", {})
    stamp = (d / "run.json").read_text()
    run_notebook(demo, out_root=out, resume=True, progress=False, html=False)
    assert (d / "run.json").read_text() != stamp and len(nbformat.read(str(d / "demo.ipynb"), as_version=4).cells) > 1

# --- 2. a path that does not exist -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name,param,value", [("coco_gender_labels", "coco_captions", "missing/captions.json"),
                                               ("tfidf_table1", "clip_images", "missing/images"),
                                               ("coco_gender_labels", "coco_captions", "123"),
                                               ("gensynth_editing", "source_captions", "missing/captions.json")])
def test_a_missing_path_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch, name, param, value):
    "Case 2: refused with exit 2 naming the parameter and the path; the last good run and everything else untouched."
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"; (out / name).mkdir(parents=True)
    (out / name / "run.json").write_text('{"parameters": {}}')                     # the last good run
    assert main(["run", name, "-p", param, value, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{param} = '{tmp_path / value}': {tmp_path / value} not found" in err and "nothing was run or written" in err
    assert sorted(p.name for p in out.iterdir()) == [name] and (out / name / "run.json").read_text() == '{"parameters": {}}'

def test_an_empty_path_asks_for_the_planted_data(tmp_path):
    "Case 2: '' (asked for) is the planted data, not an error; the check says the input is not read."
    d = run_notebook(NOTEBOOKS["coco_gender_labels"], overrides={"coco_captions": "", "n_planted_images": 60},
                     out_root=tmp_path, progress=False, html=False)
    assert (d / "tables/planted_label_recovery.csv").exists() and not (d / "tables/coco_val_gender_labels.csv").exists()
    prep = prepare_run(NOTEBOOKS["coco_gender_labels"], "smoke", {"coco_captions": ""})
    assert {c.parameter: c.status for c in prep.checks} == {"coco_captions": "skipped", "coco_train_captions": "skipped"}

def test_coco_source_available_refuses_a_given_missing_path(tmp_path):
    "Case 2, in the library (a notebook run by hand): a given local path that is missing is an error, not planted data."
    from vlbias_nb.data.coco import coco_source_available
    from vlbias_nb.paths import MissingDataError
    with pytest.raises(MissingDataError, match="missing/captions.json' does not exist"):
        coco_source_available(str(tmp_path / "missing/captions.json"))
    assert coco_source_available("") is False

def test_a_data_variable_naming_nothing_is_reported(tmp_path, capsys, monkeypatch):
    "Case 3: VLBIAS_DATA naming a folder that does not exist is reported at the start of the run (and in run.json)."
    monkeypatch.setenv("VLBIAS_DATA", str(tmp_path / "nowhere"))
    assert main(["run", "coco_gender_labels", "-p", "n_planted_images", "60", "--out", str(tmp_path / "out")]) == 0
    assert f"warning: VLBIAS_DATA names {tmp_path / 'nowhere'}, which does not exist" in capsys.readouterr().err
    rec = json.loads((tmp_path / "out/coco_gender_labels/run.json").read_text())
    assert any("VLBIAS_DATA" in w for w in rec["warnings"])

# --- 3. --resume keyed by the inputs read ----------------------------------------------------------------------------

def test_resume_reruns_when_an_input_appears_or_changes(tmp_path, monkeypatch):
    "Case 3: a run made while the shared data was absent is rerun once it is there, and again when it changes."
    nbp = _nb(tmp_path / "nbs", "01_reader.ipynb", [
        "source = 'shared:words.txt'  # words <file>\nout_dir = None",
        "from vlbias_nb.paths import has_shared, shared_path, save_table\nimport pandas as pd\n"
        "words = shared_path('words.txt').read_text().split() if has_shared('words.txt') else ['planted']\n"
        "extra = shared_path('extra.txt').read_text() if has_shared('extra.txt') else ''\n"
        "save_table(pd.DataFrame({'w': words, 'extra': extra}), out_dir, 'words')"])
    data, out = tmp_path / "data", tmp_path / "out"
    monkeypatch.setenv("VLBIAS_DATA", str(data))                                  # not there yet
    words = lambda: pd.read_csv(out / "reader/tables/words.csv", keep_default_na=False)
    run = lambda: reproduce(folder=tmp_path / "nbs", out_root=out, resume=True, progress=False)
    run(); assert words().w.tolist() == ["planted"]
    stamp = (out / "reader/run.json").read_text()
    run(); assert (out / "reader/run.json").read_text() == stamp                 # nothing changed: skipped
    data.mkdir(); (data / "words.txt").write_text("a b")
    run(); assert words().w.tolist() == ["a", "b"]                               # the data appeared: rerun
    (data / "extra.txt").write_text("x")                                         # an input the notebook looked up itself
    run(); assert words().extra.tolist() == ["x", "x"]
    rec = json.loads((out / "reader/run.json").read_text())
    assert {i["source"] for i in rec["inputs"]} >= {"shared:words.txt", "shared:extra.txt"}
    assert all(i["exists"] for i in rec["inputs"] if i["source"] in ("shared:words.txt", "shared:extra.txt"))
    stamp = (out / "reader/run.json").read_text()
    run(); assert (out / "reader/run.json").read_text() == stamp
    (data / "words.txt").write_text("a b c")                                     # same name, new content
    run(); assert words().w.tolist() == ["a", "b", "c"]

def test_run_json_records_what_the_run_ran_on(tmp_path):
    "The record: package and library versions, git commit, device, inputs with fingerprints, weights, resume fingerprint."
    d = run_notebook(NOTEBOOKS["tfidf_table1"], overrides={"n_planted_images": 300, "n_random_draws_planted": 2,
                                                             "n_balanced_runs": 2, "coco_captions": ""},
                     out_root=tmp_path, progress=False, html=False)
    rec = json.loads((d / "run.json").read_text())
    for k in ("notebook", "profile", "parameters", "finished", "seconds", "git_commit", "git_dirty", "package_version",
              "versions", "device", "inputs", "weights", "fingerprint"):
        assert k in rec, k
    assert rec["git_commit"] is None or len(rec["git_commit"]) == 40
    assert rec["git_dirty"] in (True, False, None)
    assert {"python", "torch", "cuda", "open_clip_torch", "transformers", "diffusers", "numpy", "pandas"} <= set(rec["versions"])
    assert rec["device"]["requested"] == "cpu" and rec["device"]["used"] == "cpu"
    assert rec["weights"] == {"model": {"tiny-clip": "random"}}
    srcs = {i["source"]: i for i in rec["inputs"]}
    if "shared:coco-mini/val2017" in srcs and srcs["shared:coco-mini/val2017"]["exists"]:
        assert srcs["shared:coco-mini/val2017"]["files"] > 0
    assert {"shared:coco-mini/annotations/captions_val2017.json", "shared:coco-mini/val2017"} <= set(srcs)
    assert "shared:coco/annotations/captions_val2017.json" not in srcs          # '' asked for planted data: not read
    assert len(rec["fingerprint"]) == 64 and time.strptime(rec["finished"], "%Y-%m-%dT%H:%M:%S")

# --- 4. generation resume --------------------------------------------------------------------------------------------

def _noise(batch):
    return [Image.fromarray(np.random.default_rng(it["seed"]).integers(0, 255, (16, 16, 3), dtype=np.uint8)) for it in batch]

ITEMS = [{"key": f"k{i}", "seed": 10 + i} for i in range(6)]

def test_deleted_or_truncated_images_are_made_again(tmp_path, capsys):
    "Case 4: a deleted and a truncated image are redone (whole batches, same bytes); '6 of 6 done' is then true."
    run_generation(ITEMS, _noise, tmp_path, batch_size=2, shard=0, n_shards=1, progress=False)
    first = {p.name: p.read_bytes() for p in (tmp_path / "images").glob("*.png")}
    (tmp_path / "images/k1.png").unlink(); (tmp_path / "images/k4.png").write_bytes(first["k4.png"][:30])
    calls = []
    man = run_generation(ITEMS, lambda b: calls.append([it["key"] for it in b]) or _noise(b), tmp_path, batch_size=2,
                         shard=0, n_shards=1, progress=False)
    assert calls == [["k0", "k1"], ["k4", "k5"]]
    assert {p.name: p.read_bytes() for p in (tmp_path / "images").glob("*.png")} == first
    assert "k1 (missing)" in capsys.readouterr().out
    assert man.check_files() == ({it["key"] for it in ITEMS}, {})

def test_verify_finds_altered_images(tmp_path):
    "Case 4: the manifest's SHA-256 is checked with verify (vlbias generate/run --verify): an altered image is redone."
    run_generation(ITEMS, _noise, tmp_path, batch_size=2, shard=0, n_shards=1, progress=False)
    good = (tmp_path / "images/k2.png").read_bytes()
    bad = bytearray(good); bad[-20] ^= 0xFF; (tmp_path / "images/k2.png").write_bytes(bytes(bad))
    calls = []
    gen = lambda b: calls.append([it["key"] for it in b]) or _noise(b)
    run_generation(ITEMS, gen, tmp_path, batch_size=2, shard=0, n_shards=1, progress=False)
    assert calls == []                                                          # same size: only verify sees it
    run_generation(ITEMS, gen, tmp_path, batch_size=2, shard=0, n_shards=1, progress=False, verify=True)
    assert calls == [["k2", "k3"]] and (tmp_path / "images/k2.png").read_bytes() == good

KILLED_WRITER = textwrap.dedent("""
    import sys, time
    from vlbias_nb.paths import atomic_path
    with atomic_path(sys.argv[1]) as tmp:
        tmp.write_bytes(b"half an image"); print("writing", flush=True); time.sleep(120)
""")

def test_part_file_of_a_killed_process_is_removed(tmp_path):
    "Case 4: kill -9 while an image is written leaves a .part file; the next generation removes it (a live one stays)."
    (tmp_path / "images").mkdir()
    p = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path / "images/k0.png")], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "writing"
    os.kill(p.pid, signal.SIGKILL); p.wait()
    assert len(list((tmp_path / "images").glob(".*.part"))) == 1
    live = tmp_path / "images" / f".k5.png.{process_tag()}.abcdefgh.part"; live.write_bytes(b"being written")
    run_generation(ITEMS[:2], _noise, tmp_path, batch_size=2, shard=0, n_shards=1, progress=False)
    assert [f.name for f in (tmp_path / "images").glob(".*.part")] == [live.name]

def test_corrupt_generated_image_advice_works(tmp_path):
    "Case 4: the error on a corrupt generated image says to delete it and rerun, and doing so remakes it."
    from vlbias_nb.data.coco import load_image, CorruptImageError
    run_generation(ITEMS[:2], _noise, tmp_path, batch_size=2, shard=0, n_shards=1, progress=False)
    first = (tmp_path / "images/k0.png").read_bytes()
    (tmp_path / "images/k0.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * (len(first) - 8))  # same size, not an image
    with pytest.raises(CorruptImageError, match="delete it and run again"): load_image(tmp_path / "images/k0.png")
    (tmp_path / "images/k0.png").unlink()
    run_generation(ITEMS[:2], _noise, tmp_path, batch_size=2, shard=0, n_shards=1, progress=False)
    assert (tmp_path / "images/k0.png").read_bytes() == first

# --- 5. parse errors name the file ------------------------------------------------------------------------------------

def test_parse_errors_name_the_file_and_line(tmp_path, monkeypatch):
    "Case 5: every loader's parse error names the file (and the line where there is one)."
    from vlbias_nb.papers.gab.activities import load_gab_activities
    from vlbias_nb.papers.social_counterfactuals.counterfactual_captions import load_released_sets
    from vlbias_nb.methods.clip_clip import reference_kept_dims
    from vlbias_nb.papers.prompt_array.prompts import read_authors_prompts
    from vlbias_nb.data.coco import load_coco_captions
    monkeypatch.setenv("VLBIAS_DATA", str(tmp_path))
    f = tmp_path / "activities.json"; f.write_text('{"actions": {"phaze1": [')
    with pytest.raises(ValueError, match=rf"GAB activity file {f} is not valid JSON \(line 1"): load_gab_activities(f)
    f = tmp_path / "sets.jsonl"; f.write_text('{"caption": "a", "filename": "x"}\n\n{"caption": "b", "filename": \n')
    with pytest.raises(ValueError, match=rf"{f}, line 3: not valid JSON"): load_released_sets(f)
    (tmp_path / "gensynth").mkdir(); (tmp_path / "gensynth/clip_clip_m100_kept_dims.json").write_text('{"kept_dims": [1, 2,')
    with pytest.raises(ValueError, match=f"{tmp_path / 'gensynth/clip_clip_m100_kept_dims.json'} is not valid JSON"): reference_kept_dims()
    (tmp_path / "prompt_array").mkdir()
    (tmp_path / "prompt_array/prompt_templates.csv").write_text('template,concept\n"This is a {} person,good\n')
    with pytest.raises(ValueError, match=f"Prompt template file {tmp_path / 'prompt_array/prompt_templates.csv'} cannot be read"):
        read_authors_prompts()
    (tmp_path / "prompt_array/prompt_templates.csv").write_text('template,idea\nA {} person,good\n')
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['concept'\]"): read_authors_prompts()
    f = tmp_path / "captions.json"
    f.write_bytes('{"images": [{"id": 1, "file_name": "a.jpg"}],\n "annotations": [{"image_id": 1, "caption": "caf\u00e9"}]}'.encode("latin-1"))
    with pytest.raises(ValueError, match=rf"{f} is not UTF-8 text \(line 2"): load_coco_captions(f)

def test_other_loaders_name_the_file_too(tmp_path):
    "Case 5: the data-set loaders a full-profile run reads name the file of a parse error as well."
    from vlbias_nb.data.faces import load_fairface
    from vlbias_nb.papers.social_counterfactuals.intersectional_probing import load_pata
    from vlbias_nb.papers.lic.captions import load_attribute_annotations, load_generated_captions
    (tmp_path / "fairface_label_val.csv").write_text("file,age,gender,race\nval/1.jpg,20-29,Male,White\nval/2.jpg,20-29,Male,White,x,y\n")
    with pytest.raises(ValueError, match=f"FairFace label file {tmp_path / 'fairface_label_val.csv'} cannot be read as CSV"):
        load_fairface("val", tmp_path)
    (tmp_path / "pata_fairness.files.lst").write_bytes("office_white_male_adult|http://x\n".encode() + b"\xff\xfe\n")
    with pytest.raises(ValueError, match=rf"PATA file list {tmp_path / 'pata_fairness.files.lst'} is not UTF-8 text \(line 2"):
        load_pata(tmp_path)
    (tmp_path / "attrs.csv").write_bytes(b"id,bb_gender\n1,Male\n2,caf\xe9\n")
    with pytest.raises(ValueError, match=rf"{tmp_path / 'attrs.csv'} is not UTF-8 text \(line 3"): load_attribute_annotations(tmp_path / "attrs.csv")
    (tmp_path / "results.json").write_text('[{"image_id": 1, "caption": "a man"},')
    with pytest.raises(ValueError, match=rf"Generated-captions file {tmp_path / 'results.json'} is not valid JSON \(line 1"):
        load_generated_captions(tmp_path / "results.json")

# --- 6. environment errors -------------------------------------------------------------------------------------------

def _mount_tmpfs(d: Path, options: str):
    "Mount a tmpfs at `d` (root only); skip the test where that is not possible."
    if os.geteuid() != 0: pytest.skip("mounting a tmpfs needs root")
    d.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode: pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")

@pytest.fixture
def readonly_dir(tmp_path):
    "A folder this process cannot write: mode 0555 for a normal user, a read-only tmpfs for root."
    d = tmp_path / "ro"
    if os.geteuid() != 0:
        d.mkdir(); d.chmod(0o555); yield d; d.chmod(0o755); return
    _mount_tmpfs(d, "ro,size=1m")
    try: yield d
    finally: subprocess.run(["umount", "-l", str(d)])

@pytest.fixture
def small_disk(tmp_path):
    "A 200 KB tmpfs (root only): room for a small run, not for its 280 KB HTML page."
    d = tmp_path / "small"
    _mount_tmpfs(d, "size=200k")
    try: yield d
    finally: subprocess.run(["umount", "-l", str(d)])

@pytest.mark.parametrize("where", ["folder", "inside"])
def test_read_only_output_folder_is_one_line(readonly_dir, capsys, where):
    "Case 6: a read-only --out (or one inside a read-only folder) is one line naming it, exit 3, before the run."
    out = readonly_dir if where == "folder" else readonly_dir / "runs"
    assert main(["run", "coco_gender_labels", "--out", str(out)]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(out) in err and ("read-only" in err or "permission denied" in err), err
    assert ".vlbias-write-test" not in err                                # the folder, never the probe file (issue #34)

def test_out_naming_a_file_is_one_line(tmp_path, capsys):
    "Case 6: --out naming a file (or a folder under a file) is one line naming it, exit 2 (bad input: issue #34's one rule)."
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "afile", tmp_path / "afile" / "sub"):
        assert main(["run", "coco_gender_labels", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"{tmp_path / 'afile'} is a file" in err, err

def _full_html(path, *a, **k): raise OSError(errno.ENOSPC, "No space left on device", str(Path(path).with_suffix(".html")))

def test_disk_full_while_the_html_is_written_keeps_the_finished_notebook(demo, tmp_path, monkeypatch):
    "Case 6 (injected ENOSPC): one error naming the HTML file; the finished notebook is kept in failed/, the good run too."
    import vlbias_nb.run.execution as execution
    out = tmp_path / "out"
    good = run_notebook(demo, out_root=out, progress=False)
    before = {p.name: p.read_bytes() for p in good.rglob("*") if p.is_file()}
    monkeypatch.setattr(execution, "write_notebook_html", _full_html)
    with pytest.raises(RunEnvironmentError) as e: run_notebook(demo, overrides={"n": 3}, out_root=out, progress=False)
    msg = str(e.value)
    assert msg.startswith(f"{out / '.staging'}") and "demo.html: no space left on the device" in msg
    kept = out / "failed/demo/demo.ipynb"
    assert f"finished notebook of demo is kept at {kept}" in msg and len(msg.splitlines()) == 1
    nb = nbformat.read(str(kept), as_version=4)
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code")
    assert (out / "failed/demo/tables/values.csv").exists() and "writing 3 rows" in (out / "failed/demo/run.log").read_text()
    assert {p.name: p.read_bytes() for p in good.rglob("*") if p.is_file()} == before
    run_notebook(demo, overrides={"n": 4}, out_root=out, progress=False, html=False)   # the next run does not delete it
    assert kept.exists()

def test_disk_full_on_a_real_small_disk(demo, small_disk, tmp_path):
    "Case 6 on a 200 KB tmpfs: the HTML page does not fit; the finished notebook is kept where the message says."
    with pytest.raises(RunEnvironmentError, match=r"demo\.html: no space left on the device") as e:
        run_notebook(demo, out_root=small_disk, progress=False)
    assert "finished notebook of demo is kept at" in str(e.value)
    assert (small_disk / "failed/demo/demo.ipynb").exists() and not (small_disk / "demo").exists()
    assert not list(small_disk.rglob("*.part"))

@requires_shared("coco-mini/annotations/instances_train2017.json")
def test_disk_full_during_generate_is_one_line(tmp_path, capsys, monkeypatch):
    "Case 6: a full disk during `vlbias generate` is one line naming the file, exit 3 (a tmpfs as root, else injected)."
    gen = tmp_path / "gen"
    gen.mkdir()
    if os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(gen)]).returncode == 0:
        try:
            r = subprocess.run([*CLI, "generate", "gensynth_editing", "-p", "n_sources", "4", "-p", "edit_batch_size", "4",
                                "--generation-dir", str(gen)], capture_output=True, text=True, timeout=600)
        finally: subprocess.run(["umount", "-l", str(gen)])
        assert r.returncode == 3, r.stderr[-2000:]
        err = r.stderr.strip().splitlines()[-1]
    else:
        def full(self, fp, *a, **k): raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(Image.Image, "save", full)
        assert main(["generate", "gensynth_editing", "-p", "n_sources", "2", "--generation-dir", str(gen)]) == 3
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
    assert err.startswith(f"vlbias: error: {gen / 'edits'}") and "no space left on the device" in err and "Traceback" not in err

def test_corrupt_manifest_is_one_line(tmp_path, capsys):
    "Case 6: a damaged manifest.sqlite is one error naming it and what to do (exit 2 from the command line: a damaged input)."
    (tmp_path / "manifest.sqlite").write_bytes(b"overwritten by something else " * 200)
    with pytest.raises(CorruptManifestError, match=f"Generation manifest {tmp_path / 'manifest.sqlite'} is damaged .* Move it aside"):
        run_generation(ITEMS[:2], _noise, tmp_path, batch_size=2, shard=0, n_shards=1, progress=False)
    from vlbias_nb.paths import has_shared
    if not has_shared("coco-mini/annotations/instances_train2017.json"): return      # the command line needs coco-mini
    gen = tmp_path / "gen"; (gen / "edits").mkdir(parents=True)
    (gen / "edits/manifest.sqlite").write_bytes(b"overwritten by something else " * 200)
    assert main(["generate", "gensynth_editing", "-p", "n_sources", "2", "--generation-dir", str(gen)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(gen / "edits/manifest.sqlite") in err and "Move it aside" in err

def test_ctrl_c_says_in_one_line_what_was_kept(tmp_path):
    "Case 6: Ctrl-C (SIGINT to the whole process group, as a terminal sends it) exits 130 saying what was kept."
    out = tmp_path / "out"
    p = subprocess.Popen([*CLI, "run", "coco_gender_labels", "-p", "n_planted_images", "400000", "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    def planting():                        # papermill marks the cell it is running; wait for the one planting data
        for f in out.glob(".staging/**/*.ipynb"):
            try: cells = json.loads(f.read_text())["cells"]
            except (ValueError, OSError): continue
            if any(c.get("metadata", {}).get("papermill", {}).get("status") == "running" and "make_planted_coco" in "".join(c["source"])
                   for c in cells): return True
        return p.poll() is not None
    _wait_for(planting, timeout=300, what="the notebook to start planting data")
    time.sleep(1)                                                                    # the kernel is busy planting data
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("vlbias: interrupted:") and f"kept in {out / 'failed/coco_gender_labels'}" in last, err[-2000:]
    assert (out / "failed/coco_gender_labels/coco_gender_labels.ipynb").exists()
    assert not (out / "coco_gender_labels").exists()

def _kernelspec(root: Path, name: str, dies: str) -> Path:
    "A kernel `name` under `root/kernels` that dies as it starts: `once` (the first start only) or `always`."
    script = root / f"{name}.py"
    root.mkdir(parents=True, exist_ok=True)
    script.write_text(textwrap.dedent(f"""
        import sys, pathlib
        mark = pathlib.Path({str(root / (name + '.died'))!r})
        if {dies!r} == "always" or not mark.exists():
            mark.write_text("x"); print("planted start-up failure: no kernel today", file=sys.stderr); sys.exit(3)
        from ipykernel import kernelapp
        kernelapp.launch_new_instance()"""))
    spec = root / "kernels" / name
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": [sys.executable, str(script), "-f", "{connection_file}"],
                                                  "display_name": name, "language": "python"}))
    return root

@pytest.mark.parametrize("dies", ["once", "always"])
def test_a_kernel_dying_as_it_starts_is_started_once_more(demo, tmp_path, monkeypatch, dies):
    """A kernel that dies before it answers (no cell ran: jupyter_client's "Kernel died before replying to kernel_info",
    as two kernels starting side by side on a loaded machine can) is started once more; dying twice is one error quoting
    what the kernel last wrote, its log kept."""
    monkeypatch.setenv("JUPYTER_PATH", str(_kernelspec(tmp_path / "jp", "flaky", dies)))
    out = tmp_path / "out"
    if dies == "once":
        res = run_notebook(demo, out_root=out, progress=False, kernel_name="flaky", html=False)
        assert pd.read_csv(res / "tables/values.csv")["v"].tolist() == [1.5, 1.5]
        log = (res / "run.log").read_text()
        assert "the kernel died as it started (its last words: planted start-up failure: no kernel today); starting it once more" in log
    else:
        with pytest.raises(Exception, match="Kernel died before replying to kernel_info \\(twice; the kernel last wrote: "
                                            "planted start-up failure: no kernel today\\)") as e:
            run_notebook(demo, out_root=out, progress=False, kernel_name="flaky", html=False)
        assert f"kept in {out / 'failed/demo'}" in str(e.value) and (out / "failed/demo/run.log").exists()
        assert not (out / "demo").exists()

def test_ctrl_c_as_the_staging_folder_is_made_waits_until_it_is_known(tmp_path):
    """Case 6, the window before papermill starts: a Ctrl-C while the run's staging folder and log are being made waits
    until both exist (`stop_signals_deferred`), then ends the run like any Ctrl-C: exit 130, the folder under failed/,
    nothing left in .staging/ for the next run to delete."""
    out = tmp_path / "out"
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        import vlbias_nb.run.execution as E, vlbias_nb.run.cli as C
        real = E.RunLog
        def interrupted_log(*a, **k):           # Ctrl-C arrives after the staging folder exists, before its log does
            os.kill(os.getpid(), signal.SIGINT); time.sleep(0.2)
            return real(*a, **k)
        E.RunLog = interrupted_log
        sys.exit(C.main(["run", "coco_gender_labels", "--out", {str(out)!r}, "-p", "n_planted_images", "50"]))
        """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 130, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("vlbias: interrupted:") and f"kept in {out / 'failed/coco_gender_labels'}" in last, r.stderr[-2000:]
    assert (out / "failed/coco_gender_labels/run.log").exists()            # the log was made: the step completed
    assert not list((out / ".staging").glob("coco_gender_labels.*")) and not (out / "coco_gender_labels").exists()

@pytest.mark.parametrize("name,param,content,says", [
    ("coco_gender_labels", "coco_captions", '{"images": [{"id": 1}], "annotations": [', "line 1"),            # truncated JSON
    ("lic", "attributes_file", "image_id,colour\n1,red\n", "needs an image-id column"),                   # a CSV without its columns
    ("social_counterfactuals", "detectability_labels_file", "a,b\n1,2\n", "detectability"),
])
def test_a_malformed_file_given_with_p_is_refused_before_the_kernel_starts(tmp_path, capsys, name, param, content, says):
    "#44 point 10: a -p file is read by the notebook's own reader before the kernel starts: exit 2 naming the file, nothing written."
    f = tmp_path / ("bad.json" if content.startswith("{") else "bad.csv"); f.write_text(content)
    out = tmp_path / "out"
    t0 = time.time()
    assert main(["run", name, "-p", param, str(f), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{param} = '{f}'" in err and "not a readable" in err and (says in err or says in err.lower()), err
    assert "malformed" in err.splitlines()[0] and not out.exists(), err
    assert time.time() - t0 < 60                                          # refused at once, no kernel started
    assert main(["check", name, "-p", param, str(f)]) == 2 and "MALFORMED" in capsys.readouterr().out

# --- 7. ranges, choices and models before any work --------------------------------------------------------------------

@pytest.mark.parametrize("name,param,value,allowed", [
    ("coco_gender_labels", "n_planted_images", 0, "[1, inf)"), ("gensynth_editing", "edit_batch_size", 0, "[1, inf)"),
    ("coco_gender_labels", "seed", 2**32, "[0, 2**31)"), ("tfidf_table1", "n_planted_images", 100, "[300, inf)"),
    ("prompt_array", "objective", "max-ce", "{max_ce, confusion}"), ("gab", "planted_error_rates", {"E1": 1.5}, "[0, 1]"),
    ("social_counterfactuals", "device", "gpu", "{auto, cpu, cuda, cuda:*, mps}")])
def test_out_of_range_values_are_refused_naming_the_parameter(name, param, value, allowed):
    "Case 7: a value of the right type outside its declared range or choices is one ParameterError, before any work."
    with pytest.raises(ParameterError, match=f"Parameter '{param}' of notebook '{name}' must (be in|be one of) " + allowed.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        resolve_parameters(NOTEBOOKS[name], "smoke", {param: value})

def test_out_of_range_on_the_command_line_touches_nothing(tmp_path, capsys):
    assert main(["run", "coco_gender_labels", "-p", "n_planted_images", "0", "--out", str(tmp_path)]) == 2
    assert "'n_planted_images' of notebook 'coco_gender_labels' must be in [1, inf), got 0" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []

def test_unknown_model_is_refused_before_the_kernel_starts(tmp_path, capsys):
    "Case 7: an unknown model name is refused at once, listing the known ones."
    t0 = time.time()
    assert main(["run", "tfidf_table1", "-p", "model", "ViT-B-99/openai", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "model = 'ViT-B-99/openai': unknown" in err and "Registered names: " in err and "tiny-clip" in err
    assert list(tmp_path.iterdir()) == [] and time.time() - t0 < 60

def test_missing_weights_say_how_to_provide_them(tmp_path):
    "Case 7: known weights that are not here (downloads off) are refused at once, saying how to provide them."
    env = {**os.environ, "VLBIAS_ALLOW_DOWNLOAD": "0", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf/hub"),
           "VLBIAS_MODELS": str(tmp_path / "models")}
    r = subprocess.run([*CLI, "run", "gab", "-p", "mlm_model", "roberta-large", "-p", "models", "[tiny-clip, ViT-B-32/openai]",
                        "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "mlm_model = 'roberta-large'" in r.stderr and "huggingface-cli download roberta-large" in r.stderr
    assert "models = 'ViT-B-32/openai'" in r.stderr and "VLBIAS_ALLOW_DOWNLOAD=1" in r.stderr
    assert not (tmp_path / "out").exists()

def test_every_parameter_declares_what_it_allows():
    """Every numeric parameter of the analysis notebooks has a range, every device/path/model parameter a kind, and every
    default and full-profile value satisfies its declarations."""
    from vlbias_nb.run.parameters import check_parameter_value
    from vlbias_nb.run.profiles import PROFILES
    for name, path in NOTEBOOKS.items():
        ps = notebook_parameters(path)
        for p in ps.values():
            if p.type in ("int", "float") or (isinstance(p.default, list) and p.default and isinstance(p.default[0], (int, float))):
                assert p.range, (name, p.name)
            if p.name.endswith(("_root",)): assert p.kind == "dataset", (name, p.name)
            if isinstance(p.default, str) and p.default.startswith("shared:"): assert p.kind in ("file", "folder"), (name, p.name)
            if p.name in ("device",): assert p.kind == "device" and p.choices, (name, p.name)
            if p.name == "seed": assert p.range == (0, 2**31, True, False), name
            check_parameter_value(p, p.default, name)
        resolve_parameters(path, "full")                          # full-profile values satisfy the declarations too

def test_list_shows_the_declarations(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "[0, 2**31)" in out and "<file>" in out and "{max_ce, confusion}" in out

def test_check_lists_inputs_and_exits_nonzero_when_one_is_missing(tmp_path, capsys):
    "vlbias check: every input with status, where and how; exit 2 when a required one is missing."
    assert main(["check", "coco_gender_labels", "tfidf_table1"]) == 0
    out = capsys.readouterr().out
    assert "coco_captions" in out and "model" in out and "Every required input is here." in out
    assert main(["check", "coco_gender_labels", "-p", "coco_captions", str(tmp_path / "gone.json")]) == 2
    out = capsys.readouterr().out
    assert f"MISSING  coco_captions" in out and str(tmp_path / "gone.json") in out and "1 required input(s) missing." in out

# --- 8. file modes ----------------------------------------------------------------------------------------------------

def test_files_are_created_with_the_users_umask(demo, tmp_path):
    "Case 8: tables, run.json, HTML, executed notebook, run.log, published copies and generated images: 0666 & ~umask."
    old = os.umask(0o027)
    try:
        d = run_notebook(demo, out_root=tmp_path / "out", progress=False)
        pub = publish_outputs(d, tmp_path / "figures" / "demo")
        run_generation(ITEMS[:2], _noise, tmp_path / "gen", batch_size=2, shard=0, n_shards=1, progress=False)
    finally: os.umask(old)
    files = [*(p for p in d.rglob("*") if p.is_file()), *pub, *(tmp_path / "gen/images").glob("*.png")]
    assert {p: oct(p.stat().st_mode & 0o777) for p in files} == {p: oct(0o640) for p in files}
    assert {p.name for p in files} >= {"run.json", "demo.html", "demo.ipynb", "run.log", "values.csv", "k0.png"}

# --- the run log -------------------------------------------------------------------------------------------------------

def test_run_log_and_verbose(demo, tmp_path, capsys):
    "run.log holds the notebook's output and the runner's notes; verbose also streams it to the terminal."
    d = run_notebook(demo, overrides={"n": 3}, out_root=tmp_path / "out", progress=False, html=False)
    log = (d / "run.log").read_text()
    assert "writing 3 rows" in log and "[vlbias " in log and "finished in" in log
    assert "writing 3 rows" not in capsys.readouterr().out
    run_notebook(demo, overrides={"n": 4}, out_root=tmp_path / "out", progress=False, html=False, verbose=True)
    assert "writing 4 rows" in capsys.readouterr().out

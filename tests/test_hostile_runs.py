"""Issue #44: released data verified like any download, runs that stop when told, and every bad input refused before
work. Each test names the case of the issue it covers; the planted releases are copies of a few files in tmp, the
notebooks tiny (a parameters cell and a line or two), the signal tests spawn `reproduce -j 2` on two of them."""
import json, os, pickle, shutil, signal, subprocess, sys, textwrap, time
from pathlib import Path
import pytest
from conftest import make_notebook as _nb
from vlbias_nb.paths import data_root
from vlbias_nb.data.releases import (release_checksums, release_folder, verify_release, check_release, has_release,
                                     safe_unpickle, ReleaseMismatchError, RELEASE_VARIANTS_ENV, RELEASES)
from vlbias_nb.run.parameters import ParameterError
from vlbias_nb.run.inputs import MissingInputError
from vlbias_nb.run.prepare import prepare_run
from vlbias_nb.run.outputs import OutputPathError
from vlbias_nb.run.execution import run_notebook
from vlbias_nb.run.cli import main

SC = "social_counterfactuals"

def _copy_release(name, dest) -> Path:
    "A copy of release `name` (every pinned file) in `dest`, writable; skips when the shared data lacks it."
    src = release_folder(name)
    if verify_release(name).status != "verified": pytest.skip(f"the {name} release is not here intact ({src})")
    for rel in release_checksums(name):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True); shutil.copyfile(src / rel, dest / rel)
    return dest

def _reader(folder, name, release_env=None):
    "A tiny notebook named like the analysis that reads release `name` (so the runner checks it), writing what it read."
    code = (f"from vlbias_nb.data.releases import has_release\nfrom pathlib import Path\n"
            f"Path(out_dir, 'read.txt').write_text(str(has_release({name!r})))")
    return _nb(folder, f"01_{name}.ipynb", ["seed = 0  # seed [0, 9]\nout_dir = None", code])

def _swap_two_numbers(csv: Path):
    "The issue's damage: two probabilities swapped in one row (the file's size unchanged)."
    lines = csv.read_text().splitlines(keepends=True)
    head = lines[0].rstrip("\n").split(",")
    for i, line in enumerate(lines[1:], 1):
        cells = line.rstrip("\n").split(",")
        nums = [j for j, c in enumerate(cells) if c.replace(".", "", 1).isdigit() and "." in c]
        if len(nums) >= 2 and cells[nums[0]] != cells[nums[1]]:
            cells[nums[0]], cells[nums[1]] = cells[nums[1]], cells[nums[0]]
            lines[i] = ",".join(cells) + "\n"; csv.write_text("".join(lines)); return
    raise AssertionError(f"no row with two different probabilities in {csv} ({head})")

# --- 1. the pinned SHA-256 is checked: by check, by a run, by --resume ------------------------------------------------

def test_a_modified_release_file_is_caught_by_check_run_and_resume(tmp_path, monkeypatch, capsys):
    "Case 1: two probabilities swapped in a SocialCounterfactuals file: check, run and --resume each exit 2 naming it."
    rel = _copy_release(SC, tmp_path / "sc")
    monkeypatch.setenv("VLBIAS_SC_RELEASE", str(rel))
    nb = _reader(tmp_path / "nbs", SC)
    out = tmp_path / "out"
    first = run_notebook(nb, out_root=out, progress=False, html=False)
    record = json.loads((first / "run.json").read_text())
    files = {i["source"]: i for i in record["inputs"] if i["source"].startswith("release:")}
    assert sorted(files) == sorted(f"release:{SC}/{r}" for r in release_checksums(SC))
    assert all(f["exists"] and f["sha256"] == release_checksums(SC)[s.split("/", 1)[1]] for s, f in files.items())
    assert record["releases"][SC]["status"] == "verified" and (first / "read.txt").read_text() == "True"
    before = {p: p.read_bytes() for p in first.rglob("*") if p.is_file()}

    damaged = rel / "metadata_physical_race.csv"
    _swap_two_numbers(damaged)
    assert verify_release(SC).modified == ["metadata_physical_race.csv"]
    with pytest.raises(MissingInputError, match="modified .*: metadata_physical_race.csv.*--release-variant social_counterfactuals"):
        run_notebook(nb, out_root=out, progress=False, resume=True, html=False)
    with pytest.raises(MissingInputError, match="metadata_physical_race.csv"):
        run_notebook(nb, out_root=out, progress=False, html=False)
    assert {p: p.read_bytes() for p in first.rglob("*") if p.is_file()} == before          # nothing was run or written
    assert not (out / "failed").exists()
    capsys.readouterr()
    monkeypatch.setattr("vlbias_nb.run.parameters.analyses_dir", lambda: tmp_path / "nbs")
    assert main(["check"]) == 2
    out_text = capsys.readouterr().out
    assert f"DAMAGED  {SC}" in out_text and "metadata_physical_race.csv" in out_text, out_text


def test_a_deliberate_variant_is_accepted_only_with_the_flag_recorded_and_rerun_on_change(tmp_path, monkeypatch):
    "Case 1: --release-variant accepts an edited copy; run.json records which files differ; --resume reruns on a change."
    rel = _copy_release(SC, tmp_path / "sc")
    monkeypatch.setenv("VLBIAS_SC_RELEASE", str(rel))
    nb, out = _reader(tmp_path / "nbs", SC), tmp_path / "out"
    _swap_two_numbers(rel / "metadata_physical_race.csv")
    monkeypatch.setenv(RELEASE_VARIANTS_ENV, SC)
    d = run_notebook(nb, out_root=out, progress=False, html=False)
    r = json.loads((d / "run.json").read_text())["releases"][SC]
    assert (r["status"], r["modified"], r["missing"], r["extra"]) == ("variant", ["metadata_physical_race.csv"], [], [])
    from vlbias_nb.run.publish_page import run_record_markdown
    assert f"local variant of the {SC} release" in run_record_markdown(SC, json.loads((d / "run.json").read_text()))
    stamp = (d / "run.json").stat().st_mtime_ns
    assert run_notebook(nb, out_root=out, progress=False, resume=True, html=False) == d
    assert (d / "run.json").stat().st_mtime_ns == stamp                                    # unchanged: up to date
    _swap_two_numbers(rel / "metadata_physical_gender.csv")                                 # a second file edited
    run_notebook(nb, out_root=out, progress=False, resume=True, html=False)
    r = json.loads((d / "run.json").read_text())["releases"][SC]
    assert r["modified"] == ["metadata_physical_gender.csv", "metadata_physical_race.csv"]  # rerun: the change was seen

# --- 2. a missing or extra file is named; a release variable naming nothing is warned about ---------------------------

def test_a_missing_or_extra_release_file_is_named(tmp_path, monkeypatch):
    "Case 2: one file removed, or a file that is not the release's added: exit 2 before work, the file named."
    rel = _copy_release(SC, tmp_path / "sc")
    monkeypatch.setenv("VLBIAS_SC_RELEASE", str(rel))
    nb, out = _reader(tmp_path / "nbs", SC), tmp_path / "out"
    (rel / "metadata_race_gender.csv").unlink()
    with pytest.raises(MissingInputError, match=r"missing: metadata_race_gender.csv"):
        prepare_run(nb)
    shutil.copyfile(rel / "metadata_physical_race.csv", rel / "metadata_race_gender.csv")
    with pytest.raises(MissingInputError, match=r"modified .*metadata_race_gender.csv"):   # another file under its name
        prepare_run(nb)
    shutil.rmtree(rel); monkeypatch.delenv("VLBIAS_SC_RELEASE"); _copy_release(SC, rel); monkeypatch.setenv("VLBIAS_SC_RELEASE", str(rel))
    (rel / "SHA256SUMS").write_text("the shared data's own list")                       # allowed beside a release
    prepare_run(nb)
    (rel / "metadata_race_gender_v2.csv").write_text("seed,p2p_threshold\n")
    with pytest.raises(MissingInputError, match=r"not part of the release: metadata_race_gender_v2.csv"):
        prepare_run(nb)
    assert not out.exists()


def test_a_release_variable_naming_nothing_is_warned_about(tmp_path, monkeypatch, capsys):
    "Case 2: VLBIAS_GAB_RELEASE=/nowhere warns at start, as VLBIAS_DATA=/nowhere does."
    from vlbias_nb.run.inputs import environment_warnings
    monkeypatch.setenv("VLBIAS_GAB_RELEASE", str(tmp_path / "nowhere"))
    w = [x for x in environment_warnings() if "VLBIAS_GAB_RELEASE" in x]
    assert w and "does not exist" in w[0] and "counts as absent" in w[0]

# --- 3. the restricted unpickler is bounded ---------------------------------------------------------------------------

def test_a_hostile_pickle_is_refused_at_once_naming_the_file(tmp_path):
    "Case 3: a 2**62-byte length claim, 40 levels of two shared references, a self-containing list: one message each, fast."
    import struct
    huge, shared, loop = tmp_path / "huge.pkl", tmp_path / "shared.pkl", tmp_path / "loop.pkl"
    huge.write_bytes(b"\x80\x04\x8d" + struct.pack("<Q", 2**62) + b"abc.")
    x = ["Male"]
    for _ in range(40): x = [x, x]
    shared.write_bytes(pickle.dumps([{"img_id": 1, "pred": "a man", "bb_gender": x, "bb_skin": "Light", "split": "val"}]))
    assert shared.stat().st_size < 600
    z = []; z.append(z); loop.write_bytes(pickle.dumps(z))
    t0 = time.time()
    for p, why in ((huge, "not a readable pickle"), (shared, "refused to load"), (loop, "contains itself")):
        with pytest.raises(Exception, match=why) as e: safe_unpickle(p)
        assert str(p) in str(e.value) and "MemoryError: ." not in str(e.value)
    with pytest.raises(Exception, match="expands to more than"): safe_unpickle(shared, max_depth=100)
    assert time.time() - t0 < 10


def test_the_lic_reader_refuses_the_issues_pickle_before_any_cell_walks_it(tmp_path):
    "Case 3: read_lic_entries on the 492-byte record of the issue: refused, not a hang in str() of its bb_gender."
    from vlbias_nb.data.lic_release import read_lic_entries
    x = "Male"
    for _ in range(40): x = [x, x]
    p = tmp_path / "gender_val_x_cap_mw_entries.pkl"
    p.write_bytes(pickle.dumps([{"img_id": 1, "pred": "a man", "bb_gender": x, "bb_skin": "Light", "split": "val"}]))
    t0 = time.time()
    with pytest.raises(Exception, match=f"{p}: refused to load"): read_lic_entries(p)
    assert time.time() - t0 < 10

# --- 4./5. signals reach the whole run --------------------------------------------------------------------------------

SLOW = "import time, pathlib\npathlib.Path(out_dir, 'started').write_text('x')\ntime.sleep({sleep})"
WRITE = "from vlbias_nb.paths import save_table\nimport pandas as pd\nsave_table(pd.DataFrame({'v': [n]}), out_dir, 'values')"

def _driver(tmp_path, folder, args) -> list:
    "The `vlbias` command on the notebooks of `folder` (its analyses folder patched), as a subprocess command line."
    code = textwrap.dedent(f"""
        import sys, pathlib
        import vlbias_nb.run.parameters as p, vlbias_nb.run.publish as pub, vlbias_nb.run.reproduce as rep, vlbias_nb.run.cli as cli
        p.analyses_dir = lambda: pathlib.Path({str(folder)!r})
        pub.figures_dir = lambda: pathlib.Path({str(tmp_path / 'figures')!r})
        rep.publish_site = cli.publish_site = lambda **kw: {{}}
        import vlbias_nb.run.publish_page as s; s.publish_notebook = lambda *a, **k: None
        sys.exit(cli.main({args!r}))""")
    return [sys.executable, "-c", code]

def _descendants(pid):
    import psutil
    try: return psutil.Process(pid).children(recursive=True)
    except psutil.Error: return []

def _alive(procs):
    import psutil
    out = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE: out.append(p)
        except psutil.Error: pass
    return out

def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}

def _wait(cond, timeout, what):
    t0 = time.time()
    while not cond():
        if time.time() - t0 > timeout: raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)

def _two_slow(folder, sleep=12):
    for i, name in enumerate(("alpha", "beta")):
        _nb(folder, f"0{i + 1}_{name}.ipynb", ["n = 1\nout_dir = None", SLOW.format(sleep=sleep), WRITE])

def _started(out, names):
    return lambda: all(list(out.glob(f".staging/{n}.*/started")) for n in names)

@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])   # SIGHUP takes SIGTERM's path (stop_signals_interrupt, tested in the runner notebook)
def test_a_signal_to_reproduce_j2_ends_every_process_of_the_run(tmp_path, how):
    "Case 4: SIGTERM / kill -9 of `reproduce -j 2`: no worker or kernel survives, no output changes afterwards."
    folder, out = tmp_path / "nbs", tmp_path / "out"
    _two_slow(folder)
    p = subprocess.Popen(_driver(tmp_path, folder, ["reproduce", "-j", "2", "--out", str(out)]), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait(lambda: _started(out, ["alpha", "beta"])() or p.poll() is not None, 240, "both notebooks to start")
        assert p.poll() is None, p.communicate()[1][-3000:]
        kids = _descendants(p.pid)
        assert len(kids) >= 4, kids                        # two workers, two kernels
        os.kill(p.pid, getattr(signal, how))
        _, err = p.communicate(timeout=120)
        if how == "SIGKILL":
            _wait(lambda: not _alive(kids), 30, "the workers and kernels to end after kill -9 of their command")
        else:
            assert p.returncode == 130, err[-3000:]
            assert not _alive(kids), _alive(kids)         # ended before the command exited
            last = err.strip().splitlines()[-1]
            assert "Traceback" not in err and last.startswith("vlbias: interrupted:"), err[-3000:]
            for n in ("alpha", "beta"):
                assert f"kept in {out / 'failed' / n}" in last and (out / "failed" / n / f"{n}.ipynb").exists(), last
        after = _tree(out)
        time.sleep(14)                                     # past the notebooks' end, had they gone on
        assert _tree(out) == after
        assert not (out / "alpha").exists() and not (out / "beta").exists()
    finally:
        if p.poll() is None: os.killpg(p.pid, signal.SIGKILL)


def test_ctrl_c_after_a_notebook_finished_under_publish_says_where_each_run_is(tmp_path):
    "Case 5: Ctrl-C one second after a notebook finished under -j 2 --publish: no traceback, the message true of each run."
    folder, out = tmp_path / "nbs", tmp_path / "out"
    _nb(folder, "01_quick.ipynb", ["n = 1\nout_dir = None", WRITE])
    _nb(folder, "02_long.ipynb", ["n = 2\nout_dir = None", SLOW.format(sleep=30), WRITE])
    _nb(folder, "03_third.ipynb", ["n = 3\nout_dir = None", SLOW.format(sleep=30), WRITE])
    p = subprocess.Popen(_driver(tmp_path, folder, ["reproduce", "-j", "2", "--publish", "--out", str(out)]),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait(lambda: (tmp_path / "figures/quick/values.csv").exists() or p.poll() is not None, 240, "quick to be published")
        time.sleep(1)                                      # the replacement child is starting up: third
        os.killpg(p.pid, signal.SIGINT)                    # as a terminal sends it: to the whole process group
        _, err = p.communicate(timeout=120)
        assert p.returncode == 130, err[-3000:]
        assert "Traceback" not in err, err[-3000:]
        last = err.strip().splitlines()[-1]
        assert "finished: quick" in last and f"kept in {out / 'failed/long'}" in last, last
        assert (out / "failed/long/long.ipynb").exists() and not list(out.glob(".staging/long.*"))
        if "third:" in last:                                # stopped while starting up, or running: said which, and where
            assert ("third: stopped before its run began, nothing was written" in last or
                    f"third: third was interrupted; its partial notebook and outputs are kept in {out / 'failed/third'}" in last), last
        assert (out / "quick/tables/values.csv").exists()
    finally:
        if p.poll() is None: os.killpg(p.pid, signal.SIGKILL)

# --- 6. publish refuses before it moves anything ----------------------------------------------------------------------

def test_publish_onto_a_file_refuses_before_it_moves_anything(tmp_path, monkeypatch):
    "Case 6: figures/<name> is a file: exit 2 naming it, before the kernel starts; nothing hidden as .old, no page rewritten."
    import vlbias_nb.run.publish as publish
    nb = _nb(tmp_path / "nbs", "01_demo.ipynb", ["n = 1\nout_dir = None", WRITE])
    figs = tmp_path / "figures"; figs.mkdir(); (figs / "demo").write_text("a file in the way")
    monkeypatch.setattr(publish, "figures_dir", lambda: figs)
    page = nb.read_bytes()
    with pytest.raises(OutputPathError, match=f"{figs / 'demo'} is a file, not a folder"):
        run_notebook(nb, out_root=tmp_path / "out", progress=False, publish=True, html=False)
    assert sorted(p.name for p in figs.iterdir()) == ["demo"] and (figs / "demo").read_text() == "a file in the way"
    assert nb.read_bytes() == page and not (tmp_path / "out/demo").exists()

# --- 7. absurd or odd parameters --------------------------------------------------------------------------------------

def test_absurd_and_self_referencing_parameters_are_refused_before_work(tmp_path, capsys):
    "Case 7: -p n_planted_images 10^12 and -p templates '&a [*a]': exit 2, one line each, no traceback."
    assert main(["run", "coco_gender_labels", "-p", "n_planted_images", "1000000000000", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "must be at most 1,000,000" in err and "n_planted_images" in err, err
    from vlbias_nb.run.parameters import notebook_parameters, analysis_notebooks
    lists = [(n, k) for n, p in analysis_notebooks().items() for k, par in notebook_parameters(p).items() if par.type == "list"]
    n, k = lists[0]
    assert main(["run", n, "-p", k, "&a [*a]", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "YAML aliases (*name) are not accepted" in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []

# --- 8. card ----------------------------------------------------------------------------------------------------------

def test_card_models_naming_a_binary_file_and_a_missing_gpu(tmp_path, capsys):
    "Case 8: --models naming a binary file: exit 2 naming it; --device cuda without a GPU: 3, as vlbias run -p device cuda."
    import torch
    from vlbias_nb.run.card_cli import card_main
    b = tmp_path / "models.bin"; b.write_bytes(bytes(range(256)) * 4)
    assert card_main(["--models", str(b), "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(b) in err and "binary" in err, err
    if torch.cuda.is_available(): pytest.skip("this machine has a GPU")
    assert card_main(["tiny-clip", "--device", "cuda", "--out", str(tmp_path / "c")]) == 3
    nb = _nb(tmp_path / "nbs", "01_dev.ipynb", ["device = 'cpu'  # torch device <device>\nout_dir = None", "pass"])
    with pytest.raises(MissingInputError) as e: prepare_run(nb, params={"device": "cuda"})
    from vlbias_nb.run.cli import exit_code
    assert exit_code(e.value) == 3

# --- 9. unreadable input ----------------------------------------------------------------------------------------------

def test_an_unreadable_input_is_refused_before_the_kernel_starts(tmp_path, monkeypatch):
    "Case 9: a captions file this user cannot read: 'cannot read FILE (permissions)', exit 3, before the kernel starts."
    import vlbias_nb.run.inputs as inputs
    from vlbias_nb.run.cli import exit_code
    f = tmp_path / "captions.json"; f.write_text("{}")
    nb = _nb(tmp_path / "nbs", "01_caps.ipynb", ["captions = ''  # a captions file <file>\nout_dir = None", "pass"])
    os.chmod(f, 0)
    if os.geteuid() == 0:                                   # root reads mode 000 anyway: as a user without root's override
        real = inputs._readable
        monkeypatch.setattr(inputs, "_readable", lambda p: False if Path(p) == f else real(p))
    with pytest.raises(MissingInputError, match=f"cannot read {f} \\(permissions\\)") as e:
        run_notebook(nb, overrides={"captions": str(f)}, out_root=tmp_path / "out", progress=False)
    assert exit_code(e.value) == 3 and not (tmp_path / "out/caps").exists() and not (tmp_path / "out/failed").exists()

# --- 10. publish's disk-full message names figures/, and the space it asks for is enough ------------------------------

def test_publish_disk_full_names_the_destination_and_counts_blocks(tmp_path, monkeypatch):
    "Case 10: copyfile's ENOSPC names the source in runs/; the message names figures/ and asks for whole blocks."
    import errno
    import vlbias_nb.run.publish as publish
    from vlbias_nb.run.outputs import RunEnvironmentError
    from vlbias_nb.run.publish import publish_outputs
    run = tmp_path / "runs/demo"; (run / "figures").mkdir(parents=True)
    for i in range(3): (run / "figures" / f"f{i}.png").write_bytes(b"x" * 5000)          # 15,000 bytes, two blocks each
    (run / "run.json").write_text("{}")
    def full(src, dst): raise OSError(errno.ENOSPC, "No space left on device", str(src))   # as shutil's sendfile path sets it
    monkeypatch.setattr(publish, "_publish_copy", full)
    dest = tmp_path / "figures/demo"
    with pytest.raises(RunEnvironmentError) as e: publish_outputs(run, dest)
    block = os.statvfs(tmp_path).f_frsize
    need = 3 * -(-5000 // block) * block + block                                            # the files, and run.json's block
    assert str(e.value).startswith(f"publishing demo to {dest} failed: {dest.parent}: no space left on the device; "
                                   f"free at least {publish._human_bytes(need)} there"), str(e.value)
    assert str(run) not in str(e.value).split(" failed: ")[1].split(";")[0]

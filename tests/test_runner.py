"The papermill runner and the `vlbias` CLI, on the example analysis and on throwaway notebooks."
import json, subprocess, sys, pytest, nbformat
import pandas as pd
from pathlib import Path
from vlbias_nb.run.parameters import notebook_parameters, analysis_notebooks, resolve_parameters, ParameterError, parameters_cell
from vlbias_nb.run.publish import publish_outputs
from vlbias_nb.run.execution import run_notebook, NotebookFailed
from vlbias_nb.run.reproduce import reproduce
from vlbias_nb.run.cli import main, format_parameters
from vlbias_nb.run.profiles import PROFILES
from conftest import make_notebook as _nb


WRITE = ("from vlbias_nb.paths import save_table\nimport pandas as pd\n"
         "save_table(pd.DataFrame({'v': [value] * n}), out_dir, 'values')")

@pytest.fixture
def demo(tmp_path):
    return _nb(tmp_path / "nbs", "01_demo.ipynb", ["n = 2  # rows\nvalue = 1.5\nflag = False\nout_dir = None",
                                                    WRITE, "assert n < 10, 'n too large'"])

def test_parameters_are_read_with_types(demo):
    ps = notebook_parameters(demo)
    assert {k: (p.type, p.default) for k, p in ps.items()} == {
        "n": ("int", 2), "value": ("float", 1.5), "flag": ("bool", False), "out_dir": ("NoneType", None)}
    assert ps["n"].help == "rows"

@pytest.mark.parametrize("over,msg", [({"m": 1}, "Unknown parameter(s) ['m'] for notebook 'demo'"),
                                      ({"n": "two"}, "Parameter 'n' of notebook 'demo' expects int"),
                                      ({"flag": "perhaps"}, "Parameter 'flag' of notebook 'demo' expects bool"),
                                      ({"value": [1]}, "Parameter 'value' of notebook 'demo' expects float")])
def test_bad_parameters_rejected_before_execution(demo, tmp_path, over, msg):
    with pytest.raises(ParameterError, match=msg.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        run_notebook(demo, overrides=over, out_root=tmp_path / "out", progress=False)
    assert not (tmp_path / "out" / "demo").exists() and not (tmp_path / "out" / ".staging" / "demo").exists()

def test_failure_keeps_partial_notebook_and_earlier_outputs(demo, tmp_path):
    out = tmp_path / "out"
    good = run_notebook(demo, overrides={"n": "3"}, out_root=out, progress=False)
    before = (good / "tables/values.csv").read_bytes()
    with pytest.raises(NotebookFailed, match=r"Notebook 'demo' .* failed in cell 3 of 3 .*AssertionError: n too large"):
        run_notebook(demo, overrides={"n": 20}, out_root=out, progress=False)
    assert (good / "tables/values.csv").read_bytes() == before
    assert json.loads((good / "run.json").read_text())["parameters"] == {"n": 3}
    failed = nbformat.read(str(out / "failed/demo/demo.ipynb"), as_version=4)
    assert any(o.get("ename") == "AssertionError" for c in failed.cells for o in c.get("outputs", []))

def test_resume_skips_identical_runs(demo, tmp_path):
    out = tmp_path / "out"
    d = run_notebook(demo, out_root=out, progress=False)
    stamp = (d / "run.json").read_text()
    run_notebook(demo, out_root=out, resume=True, progress=False)
    assert (d / "run.json").read_text() == stamp                      # skipped
    run_notebook(demo, overrides={"n": 4}, out_root=out, resume=True, progress=False)
    assert json.loads((d / "run.json").read_text())["parameters"] == {"n": 4}  # parameters changed: rerun

def test_publish_is_explicit(demo, tmp_path):
    d = run_notebook(demo, out_root=tmp_path / "out", progress=False)
    dest = tmp_path / "figures"
    assert not dest.exists()
    copied = publish_outputs(d, dest / "demo")
    assert [p.name for p in copied] == ["values.csv"] and (dest / "demo/values.csv").exists()
    (dest / "demo/old_name.csv").write_text("x\n1\n")             # an output an earlier notebook version wrote
    publish_outputs(d, dest / "demo")
    assert sorted(p.name for p in (dest / "demo").iterdir()) == ["values.csv"]

def test_every_analysis_has_parameters_and_out_dir():
    nbs = analysis_notebooks()
    assert nbs, "no analysis notebooks found"
    for name, p in nbs.items():
        ps = notebook_parameters(p)
        assert "out_dir" in ps, f"{name} must declare out_dir"
        for prof in PROFILES: resolve_parameters(p, prof)   # every profile's values type-check

def test_full_profile_names_only_declared_parameters():
    "A typo in the full profile would silently set nothing: every name must be declared by some analysis notebook."
    declared = set().union(*(notebook_parameters(p) for p in analysis_notebooks().values()))
    assert set(PROFILES["full"]["parameters"]) <= declared
    notebooks = analysis_notebooks()
    for name, overrides in PROFILES["full"]["notebooks"].items():
        assert name in notebooks, f"full profile names unknown notebook {name!r}"
        params = notebook_parameters(notebooks[name])
        assert set(overrides) <= set(params), (name, set(overrides) - set(params))

def test_cli_run_list_and_errors(tmp_path, capsys):
    assert main(["list"]) == 0
    assert "coco_gender_labels" in capsys.readouterr().out
    assert main(["run", "coco_gender_labels", "-p", "seed", "x", "--out", str(tmp_path)]) == 2
    assert "Parameter 'seed' of notebook 'coco_gender_labels' expects int" in capsys.readouterr().err
    assert main(["run", "nope", "--out", str(tmp_path)]) == 2
    assert "Unknown notebook 'nope'" in capsys.readouterr().err

def test_cli_reproduces_example_analysis(tmp_path):
    r = subprocess.run(["vlbias", "reproduce", "--only", "coco_gender_labels", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    d = tmp_path / "coco_gender_labels"
    rec = pd.read_csv(d / "tables/planted_label_recovery.csv")
    assert (rec.label_accuracy == 1).all()
    assert (rec.recovered_male_share - rec.planted_male_share).abs().max() < 0.011
    assert (d / "coco_gender_labels.ipynb").exists()
    r = subprocess.run(["vlbias", "run", "coco_gender_labels", "-p", "n_planted_images", "120", "-p", "seed", "3",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((d / "run.json").read_text())["parameters"] == {"n_planted_images": 120, "seed": 3}
    assert pd.read_csv(d / "tables/planted_label_recovery.csv").n_images.sum() == 120

def test_example_analysis_without_shared_data(tmp_path, monkeypatch):
    "With no shared data the example runs on planted data alone."
    monkeypatch.setenv("VLBIAS_DATA", str(tmp_path / "empty"))
    d = run_notebook(analysis_notebooks()["coco_gender_labels"], out_root=tmp_path / "out", progress=False)
    assert (d / "tables/planted_label_recovery.csv").exists() and not (d / "tables/coco_val_gender_labels.csv").exists()

def test_full_profile_values_have_the_declared_types():
    "Every analysis notebook accepts the full profile's values (types checked like `-p` overrides)."
    from vlbias_nb.run.parameters import resolve_parameters
    for name, path in analysis_notebooks().items():
        assert isinstance(resolve_parameters(path, "full"), dict), name

def test_parameters_cells_are_readable_by_papermill():
    "papermill's own parser skips a line with a second '=' (e.g. in its comment) and then warns on every override of it."
    from papermill.translators import PythonTranslator
    for name, path in analysis_notebooks().items():
        cell = parameters_cell(nbformat.read(str(path), as_version=4))
        bad = [l for l in cell.source.splitlines() if l.count("=") > 1]
        assert not bad, (name, bad)
        assert {p.name for p in PythonTranslator.inspect(cell)} == set(notebook_parameters(path)), name

def test_reproduce_stops_at_the_failing_notebook(tmp_path):
    "A failing notebook stops `reproduce`: later notebooks are not run, earlier outputs stay, the failure is named."
    folder = tmp_path / "nbs"
    _nb(folder, "01_first.ipynb", ["n = 1\nvalue = 1.5\nout_dir = None", WRITE])
    _nb(folder, "02_broken.ipynb", ["n = 1\nvalue = 1.5\nout_dir = None", "raise ValueError('planted failure')"])
    _nb(folder, "03_after.ipynb", ["n = 1\nvalue = 1.5\nout_dir = None", WRITE])
    out = tmp_path / "out"
    with pytest.raises(NotebookFailed, match=r"Notebook 'broken' .*ValueError: planted failure"):
        reproduce(folder=folder, out_root=out, progress=False, jobs=1)
    assert (out / "first/tables/values.csv").exists()
    assert (out / "failed/broken/broken.ipynb").exists()
    assert not (out / "after").exists()

def test_kernel_death_keeps_the_partial_notebook(tmp_path):
    "A notebook whose kernel dies (not a cell error) also keeps what it wrote, under failed/, and names the notebook."
    folder = tmp_path / "nbs"
    p = _nb(folder, "01_dies.ipynb", ["n = 1\nvalue = 1.5\nout_dir = None", WRITE, "import os; os._exit(1)"])
    out = tmp_path / "out"
    with pytest.raises(NotebookFailed, match=r"Notebook 'dies' .* stopped"):
        run_notebook(p, out_root=out, progress=False)
    assert (out / "failed/dies/tables/values.csv").exists()


TIMED = ("import json, os, time\nfrom pathlib import Path\nt0, meet, met = time.time(), os.environ.get('MEET_DIR'), None\n"
         "if meet:                              # side by side: say so, and wait (up to 120 s) to see the partner say so\n"
         "    (Path(meet) / str(n)).touch()\n"
         "    while partner and not (Path(meet) / str(partner)).exists() and time.time() - t0 < 120: time.sleep(0.05)\n"
         "    met = (Path(meet) / str(partner)).exists() if partner else None\n"
         "time.sleep(sleep)\nPath(out_dir).mkdir(parents=True, exist_ok=True)\n"
         "(Path(out_dir) / 'times.json').write_text(json.dumps({'start': t0, 'end': time.time(), 'met': met, "
         "'omp': os.environ.get('OMP_NUM_THREADS')}))")

def _timed_set(folder):
    "Three planted analyses: each sleeps, writes a table of its own values and a (not published) record of when it ran."
    for i, (name, sleep, partner) in enumerate([("short", 1, 3), ("long", 6, 0), ("middle", 3, 0)]):   # short meets long (n = 3)
        p = _nb(folder, f"0{i + 1}_{name}.ipynb", [f"n = {i + 2}\nvalue = {i + 0.5}\nsleep = {sleep}\npartner = {partner}\nout_dir = None",
                                                   TIMED, WRITE])
        nb = nbformat.read(str(p), as_version=4)                          # a published page opens with its title
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(f"# {name}")); nbformat.write(nb, p)
    return folder

def test_parallel_and_sequential_runs_publish_identical_tables(tmp_path, monkeypatch):
    "reproduce -j 2 publishes the same tables as -j 1 (publishing serialised, the site rewritten once), and runs side by side."
    import vlbias_nb.run.publish as publish, vlbias_nb.run.reproduce as reproduce_module
    folder, published, site_calls = _timed_set(tmp_path / "nbs"), {}, []
    monkeypatch.setattr(reproduce_module, "publish_site", lambda **kw: site_calls.append(kw) or {})
    for jobs in (1, 2):
        figs = tmp_path / f"figures{jobs}"
        monkeypatch.setattr(publish, "figures_dir", lambda figs=figs: figs)
        if jobs == 2: (tmp_path / "meet").mkdir(); monkeypatch.setenv("MEET_DIR", str(tmp_path / "meet"))   # the kernels inherit it
        done = reproduce(folder=folder, out_root=tmp_path / f"out{jobs}", progress=False, publish=True, jobs=jobs)
        assert list(done) == ["short", "long", "middle"]                 # the analysis order, whatever finished first
        published[jobs] = {str(f.relative_to(figs)): f.read_bytes() for f in sorted(figs.rglob("*.csv"))}
        times = {n: json.loads((d / "times.json").read_text()) for n, d in done.items()}
        if jobs == 2:
            assert times["short"]["met"] is True        # short saw long running while it ran: side by side, however slow the start-up
            from vlbias_nb.run.reproduce import cpu_cores
            assert {t["omp"] for t in times.values()} == {str(max(1, cpu_cores() // 2))}
    assert sorted(published[1]) == ["long/values.csv", "middle/values.csv", "short/values.csv"]
    assert published[1] == published[2]
    assert len(site_calls) == 2                                           # once per reproduce, at the end

def test_parallel_run_orders_longest_first_and_stops_starting_after_a_failure(tmp_path):
    "With -j 2: the previous run's seconds order the notebooks; after a failure the running one finishes, no new one starts."
    from vlbias_nb.run.reproduce import run_order
    folder = tmp_path / "nbs"
    _nb(folder, "01_slow.ipynb", ["n = 1\nvalue = 1.5\nout_dir = None", "import time; time.sleep(8)", WRITE])
    _nb(folder, "02_broken.ipynb", ["n = 1\nvalue = 1.5\nout_dir = None", "raise ValueError('planted failure')"])
    _nb(folder, "03_after.ipynb", ["n = 1\nvalue = 1.5\nout_dir = None", WRITE])
    out = tmp_path / "out"
    (out / "after").mkdir(parents=True); (out / "after/run.json").write_text(json.dumps({"profile": "smoke", "seconds": 1.0}))
    (out / "slow").mkdir(); (out / "slow/run.json").write_text(json.dumps({"profile": "smoke", "seconds": 9.0}))
    assert run_order(["slow", "broken", "after"], out, "smoke") == ["slow", "after", "broken"]
    (out / "after/run.json").unlink()                                     # now: slow (9 s), then broken and after (0 s)
    with pytest.raises(NotebookFailed, match=r"Notebook 'broken' .*ValueError: planted failure"):
        reproduce(folder=folder, out_root=out, progress=False, jobs=2)
    assert (out / "slow/tables/values.csv").exists()                      # the running one finished and was kept
    assert (out / "failed/broken/broken.ipynb").exists()
    assert not (out / "after/tables").exists()                            # queued behind the failure: never started

def test_cli_check_lists_the_releases(capsys, tmp_path, monkeypatch):
    "vlbias check names each released model-output set, present or absent, with the variable to set."
    monkeypatch.setenv("VLBIAS_LIC_RELEASE", str(tmp_path / "nowhere"))
    main(["check", "--profile", "smoke"])
    out = capsys.readouterr().out
    assert "released model outputs" in out
    line = next(l for l in out.splitlines() if " lic " in f" {l} " and "VLBIAS_LIC_RELEASE" in l)
    assert line.split()[0] == "absent" and "set VLBIAS_LIC_RELEASE to its folder" in out
    for env in ("VLBIAS_GAB_RELEASE", "VLBIAS_SC_RELEASE"): assert env in out

"""An installed wheel is a working tool: it carries the analysis notebooks and the resources, `vlbias list` and
`--version` work from any folder, a run outside a checkout writes to ./runs and says so, and --publish is refused."""
import json, os, subprocess, sys, zipfile
import pytest
from pathlib import Path
from vlbias_nb.paths import project_root, data_root
from vlbias_nb.run.parameters import analysis_notebooks

ROOT = project_root()

@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    d = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(d), str(ROOT)],
                       capture_output=True, text=True, cwd=d)
    assert r.returncode == 0, r.stderr[-3000:]
    whl = next(d.glob("vlbias_nb-*.whl"))
    site = d / "site"
    with zipfile.ZipFile(whl) as z: z.extractall(site)
    return whl, site

def _vlbias(site, cwd, *args, env=None):
    e = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    e.update(PYTHONPATH=str(site), **(env or {}))
    return subprocess.run([sys.executable, "-c", "import sys; from vlbias_nb.run.cli import main; sys.exit(main(sys.argv[1:]))", *args],
                          capture_output=True, text=True, cwd=cwd, env=e)

def test_wheel_carries_the_analyses_without_outputs_and_the_resources(wheel):
    whl, site = wheel
    names = zipfile.ZipFile(whl).namelist()
    ours = {p.relative_to(ROOT / "nbs" / "analyses").as_posix() for p in analysis_notebooks().values()}
    assert {n[len("vlbias_nb/analyses/"):] for n in names if n.startswith("vlbias_nb/analyses/")} == ours
    assert "vlbias_nb/resources/papers.csv" in names
    assert {f"vlbias_nb/resources/{p.relative_to(ROOT / 'vlbias_nb' / 'resources').as_posix()}"
            for p in (ROOT / "vlbias_nb" / "resources").rglob("*") if p.is_file() and "__pycache__" not in p.parts} <= set(names)
    nb = json.loads((site / "vlbias_nb" / "analyses" / "lic" / "06_lic.ipynb").read_text())
    assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")

def test_installed_tool_lists_and_versions_from_any_folder(wheel, tmp_path):
    _, site = wheel
    r = _vlbias(site, tmp_path, "list")
    assert r.returncode == 0, r.stderr
    listed = [l.split()[0] for l in r.stdout.splitlines() if l and not l.startswith(" ")]
    assert listed == list(analysis_notebooks()), r.stdout[:500]
    r = _vlbias(site, tmp_path, "list", "lic")
    assert r.returncode == 0 and r.stdout.splitlines()[0].startswith("lic") and "n_runs" in r.stdout
    assert _vlbias(site, tmp_path, "list", "nope").returncode == 2
    r = _vlbias(site, tmp_path, "--version")
    assert r.returncode == 0 and r.stdout.strip().startswith("vlbias-nb ")

def test_installed_tool_runs_into_cwd_runs_and_refuses_publish(wheel, tmp_path):
    _, site = wheel
    env = {"VLBIAS_DATA": str(data_root())}
    r = _vlbias(site, tmp_path, "run", "coco_gender_labels", "--publish", env=env)
    assert r.returncode == 2 and "installed copy" in r.stderr and not (tmp_path / "runs").exists()
    r = _vlbias(site, tmp_path, "run", "coco_gender_labels", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "not in a checkout" in r.stderr and (tmp_path / "runs" / "smoke" / "coco_gender_labels" / "run.json").exists()

"The library notebooks: each runs clean under nbdev's test runner, and the package is what they export."
import shutil, subprocess, filecmp, pytest
from pathlib import Path
from nbdev.test import test_nb as run_notebook_tests
from vlbias_nb.paths import project_root

ROOT = project_root()
LIB_NBS = sorted(p for p in (ROOT / "nbs").rglob("[0-9]*.ipynb") if "analyses" not in p.relative_to(ROOT / "nbs").parts)

@pytest.mark.parametrize("nb", LIB_NBS, ids=[p.relative_to(ROOT / "nbs").as_posix() for p in LIB_NBS])
def test_library_notebook_runs(nb):
    ok, secs = run_notebook_tests(nb, skip_flags=["slow", "gpu"], force_flags=[], do_print=False)
    assert ok, f"{nb.name} failed under nbdev_test"

def test_package_in_sync_with_notebooks(tmp_path):
    "nbdev_export on a copy of the project reproduces the committed package byte for byte."
    for f in ["settings.ini", "setup.py"]: shutil.copy(ROOT / f, tmp_path / f)
    shutil.copytree(ROOT / "nbs", tmp_path / "nbs", symlinks=True)
    shutil.copytree(ROOT / "vlbias_nb", tmp_path / "vlbias_nb", ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run(["nbdev_export"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rel = lambda root: {p.relative_to(root).as_posix() for p in root.rglob("*.py") if "__pycache__" not in p.parts}
    for f in sorted(rel(ROOT / "vlbias_nb")):
        assert filecmp.cmp(ROOT / "vlbias_nb" / f, tmp_path / "vlbias_nb" / f, shallow=False), f"{f} differs from its notebook: run nbdev_export"
    extra = rel(tmp_path / "vlbias_nb") - rel(ROOT / "vlbias_nb")
    assert not extra, f"notebooks export modules missing from the package: {extra}"

def test_notebooks_are_clean(tmp_path):
    "nbdev_clean leaves every notebook unchanged (and keeps papermill's parameters tag)."
    shutil.copytree(ROOT / "nbs", tmp_path / "nbs", symlinks=True)
    shutil.copy(ROOT / "settings.ini", tmp_path / "settings.ini")
    r = subprocess.run(["nbdev_clean"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    dirty = [str(p.relative_to(ROOT)) for p in (ROOT / "nbs").rglob("*.ipynb")
             if p.read_bytes() != (tmp_path / p.relative_to(ROOT)).read_bytes()]
    assert not dirty, f"run nbdev_clean on: {dirty}"

import os
# One CPU thread per xdist worker, and per notebook kernel a worker starts (kernels inherit the environment):
# `pytest -n 2` on 2 cores would otherwise run 2 x 2 OpenMP threads whose busy-waiting slows both many times over.
os.environ.setdefault("OMP_NUM_THREADS", "1"); os.environ.setdefault("MKL_NUM_THREADS", "1")
import pytest, torch
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
from vlbias_nb.paths import has_shared, data_root

def requires_shared(relpath):
    "Skip a test when the shared data file is absent (the reason names VLBIAS_DATA)."
    return pytest.mark.skipif(not has_shared(relpath), reason=f"{relpath} not found under {data_root()} (set VLBIAS_DATA)")

@pytest.fixture(autouse=True)
def _headless(monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")

def make_notebook(folder, name, cells):
    "A throwaway analysis notebook `folder/name`: `cells[0]` is its papermill parameters cell, the rest plain code cells."
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cells[0], metadata={"tags": ["parameters"]})] +
                                  [nbformat.v4.new_code_cell(c) for c in cells[1:]])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "python3", "language": "python"}
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / name); return folder / name

# The notebook runs (rehearsal and smoke analyses) take minutes each, most tests seconds. pytest-xdist's worksteal
# scheduler (pyproject.toml) starts each of the 2 workers on one half of the collection and lets an idle worker take the
# tail of the other's queue: so the long runs are dealt alternately (longest first) to the heads of the two halves.
LONGEST_FIRST = ("test_every_analysis_runs_end_to_end_in_the_rehearsal", "test_analysis_runs_in_smoke_profile",
                 "test_generation_folder_is_kept_and_a_rerun_resumes", "test_gab_with_an_ungendered_candidate_list",
                 "test_a_rehearsal_run_end_to_end_is_labelled_and_recorded")

def _long_rank(item):
    return next((i for i, s in enumerate(LONGEST_FIRST) if s in item.nodeid), None)

def pytest_collection_modifyitems(config, items):
    long = sorted((it for it in items if _long_rank(it) is not None), key=_long_rank)   # stable: each test's own order
    short = [it for it in items if _long_rank(it) is None]
    first, second = long[0::2], long[1::2]
    n_first = max(0, len(items) // 2 - len(first))
    items[:] = first + short[:n_first] + second + short[n_first:]

@pytest.fixture(scope="session")
def processed_site(tmp_path_factory):
    """nbdev's doc processing of the checkout's notebooks (`vlbias_nb.run.site.process_docs`), done once per test run:
    the xdist workers share one copy (built under a file lock in the run's common temporary folder)."""
    from filelock import FileLock
    from vlbias_nb.run.site import process_docs
    shared = tmp_path_factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else tmp_path_factory.getbasetemp()
    dest, done = shared / "vlbias-site", shared / "vlbias-site.done"
    with FileLock(str(shared / "vlbias-site.lock")):
        if not done.exists():
            process_docs(dest); done.write_text("ok")
    return dest / "_proc"

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

# The notebook runs (rehearsal and smoke analyses) take minutes each, most tests seconds: pytest-xdist hands tests to its
# workers in collection order, so the long ones go first and never end up queued last behind one worker.
LONGEST_FIRST = ("test_every_analysis_runs_end_to_end_in_the_rehearsal", "test_analysis_runs_in_smoke_profile",
                 "test_a_rehearsal_run_end_to_end_is_labelled_and_recorded")

def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda it: next((i for i, s in enumerate(LONGEST_FIRST) if s in it.nodeid), len(LONGEST_FIRST)))

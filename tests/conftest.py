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

"""One vocabulary for the analysis parameters (vlbias_nb/resources/parameters.csv, shown in the runner's page): every
analysis notebook names the model, the models, the diffusion pipeline, the device, the seed and the thread counts the
same way, and "all" is always 0."""
import re
import pandas as pd
import pytest
from vlbias_nb.paths import project_root
from vlbias_nb.run.parameters import analysis_notebooks, notebook_parameters

VOCAB = pd.read_csv(project_root() / "vlbias_nb" / "resources" / "parameters.csv").fillna("")
FORBIDDEN = {n.strip(): row["name"] for _, row in VOCAB.iterrows() for n in row.not_named.split(";") if n.strip()}
PARAMS = {(nb, k): p for nb, path in analysis_notebooks().items() for k, p in notebook_parameters(path).items()}

def test_vocabulary_is_well_formed():
    assert {"seed", "model", "models", "diffusion_pipeline", "device", "n_threads"} <= set(VOCAB.name)
    assert not set(FORBIDDEN) & set(VOCAB.name)

def test_no_notebook_uses_a_synonym():
    bad = [f"{nb}.{k} (say {FORBIDDEN[k]})" for nb, k in PARAMS if k in FORBIDDEN]
    assert not bad, "parameters named against the vocabulary: " + ", ".join(bad)

@pytest.mark.parametrize("name,kind", [("seed", "int"), ("model", "str"), ("models", "list"), ("diffusion_pipeline", "str"),
                                       ("device", "str"), ("n_threads", "int"), ("n_blas_threads", "int"), ("n_jobs", "int")])
def test_vocabulary_names_have_one_type(name, kind):
    got = {nb: p.type for (nb, k), p in PARAMS.items() if k == name}
    assert got and all(t == kind for t in got.values()), f"{name}: {got}"

def test_seed_range_and_devices():
    for (nb, k), p in PARAMS.items():
        if k == "seed": assert p.constraint() == "[0, 2**31)", (nb, p.constraint())
        if k == "device": assert p.default in ("auto", "cpu"), (nb, p.default)
        if k == "n_threads": assert "torch" in p.help, (nb, p.help)

def test_all_is_always_zero():
    "A count whose help says what means 'all' says 0, never None; no count defaults to None."
    bad = []
    for (nb, k), p in PARAMS.items():
        if not k.startswith(("n_", "max_")) and not k.endswith(("_max_images", "_images")): continue
        h = p.help.lower()
        if re.search(r"none\s*(:|for|=)\s*all|none means all", h) or (p.type in ("int", "NoneType") and p.default is None):
            bad.append(f"{nb}.{k}")
        if re.search(r"\ball\b", h) and p.type == "int" and not re.search(r"\b0\b", h): bad.append(f"{nb}.{k} (says 'all' without 0)")
    assert not bad, "'all' spelled otherwise than 0: " + ", ".join(bad)

def test_the_check_can_fail():
    assert "clip_model" in FORBIDDEN and FORBIDDEN["pipeline"] == "diffusion_pipeline"

def test_the_parameters_page_shows_the_vocabulary_file():
    import json
    nb = json.loads((project_root() / "nbs" / "run" / "01_parameters.ipynb").read_text(encoding="utf-8"))
    md = next("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown" and "## The parameter vocabulary" in "".join(c["source"]))
    rows = [l for l in md.splitlines() if l.startswith("| `")]
    assert [r.split("|")[1].strip().strip("`") for r in rows] == VOCAB.name.tolist()
    for r, (_, v) in zip(rows, VOCAB.iterrows()): assert v.meaning in r and v["values"] in r, r

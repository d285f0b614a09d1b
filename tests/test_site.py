"""The documentation site: nbdev's doc processing of every notebook succeeds, the home page is the results ledger, every
analysis page carries the outputs of its published run, and no page shows a traceback, a progress bar, a warning or a
machine path. No Quarto needed: this checks what nbdev hands to Quarto."""
import ast, json, re, shutil, subprocess, sys
import pytest
from pathlib import Path
from vlbias_nb.paths import project_root
from vlbias_nb.report import paper_items, papers, published_ledgers, ledger_by_item, ledger_summary, summary_markdown
from vlbias_nb.run.site import (process_docs, absolute_paths, site_navigation, notebook_front_matter, README_START,
                            README_END, RUN_RECORD_TAG)

ROOT = project_root()
ANALYSES = sorted((ROOT / "nbs" / "analyses").rglob("[0-9]*.ipynb"))
LIBRARY = sorted(p for p in (ROOT / "nbs").rglob("[0-9]*.ipynb") if "analyses" not in p.relative_to(ROOT / "nbs").parts)

def _src(c): return "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
def _nb(p): return json.loads(Path(p).read_text(encoding="utf-8"))

def _output_texts(o):
    "Every text an output carries (stream text, text/* and JSON data, error fields)."
    if o.get("output_type") == "stream": yield _src({"source": o["text"]})
    if o.get("output_type") == "error": yield o.get("ename", "") + " " + str(o.get("evalue", "")) + "".join(o.get("traceback", []))
    for k, v in o.get("data", {}).items():
        if k.startswith("text/") or k == "application/json": yield v if isinstance(v, str) else "".join(v) if isinstance(v, list) else json.dumps(v)

def _has_figure(o): return any(k.startswith("image/") for k in o.get("data", {})) or "<img" in "".join(_output_texts(o))
def _has_table(o): return "<table" in "".join(v if isinstance(v, str) else "".join(v) for k, v in o.get("data", {}).items() if k == "text/html")

@pytest.fixture(scope="module")
def proc(tmp_path_factory):
    "The processed notebooks, as `nbdev_docs` would hand them to Quarto."
    return process_docs(tmp_path_factory.mktemp("site"))

def test_doc_processing_succeeds_for_every_notebook(proc):
    done = {p.relative_to(proc).as_posix() for p in proc.rglob("*.ipynb")}
    want = {p.relative_to(ROOT / "nbs").as_posix() for p in (ROOT / "nbs").rglob("*.ipynb") if "_proc" not in p.parts}
    assert want <= done, f"not processed: {sorted(want - done)}"

def test_no_page_shows_tracebacks_progress_bars_warnings_or_machine_paths(proc):
    bad = []
    for p in sorted(proc.rglob("*.ipynb")):
        for i, c in enumerate(_nb(p)["cells"]):
            for o in c.get("outputs", []):
                if o.get("output_type") == "error": bad.append((p.name, i, "error output"))
                for t in _output_texts(o):
                    for what, hit in (("Traceback", "Traceback" in t), ("carriage return", "\r" in t),
                                      ("Warning", "Warning" in t), ("absolute path", bool(absolute_paths(t)))):
                        if hit: bad.append((p.relative_to(proc).as_posix(), i, what, absolute_paths(t)[:2]))
    assert not bad, bad[:20]

def test_home_page_is_the_results_ledger(proc):
    nb = _nb(proc / "index.ipynb")
    html = "".join(t for c in nb["cells"] for o in c.get("outputs", []) for t in _output_texts(o))
    prose = " ".join(_src(c) for c in nb["cells"] if c["cell_type"] == "markdown")
    words = len(re.findall(r"[A-Za-z]{2,}", prose + " " + re.sub(r"<[^>]+>", " ", html)))
    assert words >= 300, words
    items = paper_items()
    rows = html.count('<table class="dataframe vlbias-ledger"')
    assert rows == len(papers()), "one ledger table per paper"
    for it in items.itertuples():                                    # a row per paper item
        assert f"<tr><td>{it.item}</td>" in html.replace("&#x27;", "'").replace("&amp;", "&"), it.item
    assert any("image/png" in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", [])), "no figure"

def test_every_analysis_page_carries_its_results(proc):
    for src in ANALYSES:
        nb = _nb(proc / src.relative_to(ROOT / "nbs"))
        outs = [o for c in nb["cells"] for o in c.get("outputs", [])]
        assert any(_has_figure(o) for o in outs), f"{src.name}: no figure output"
        assert any(_has_table(o) for o in outs), f"{src.name}: no HTML table output"
        assert not any("injected-parameters" in c.get("metadata", {}).get("tags", []) for c in nb["cells"])
        record = [c for c in _nb(src)["cells"] if RUN_RECORD_TAG in c.get("metadata", {}).get("tags", [])]
        assert len(record) == 1 and "profile" in _src(record[0]) and "commit" in _src(record[0]), src.name

@pytest.mark.parametrize("nb", LIBRARY + ANALYSES + [ROOT / "nbs" / "index.ipynb"], ids=lambda p: p.name)
def test_every_page_keeps_its_opening_prose(nb, proc):
    "The title cell holds `# Title` and a one-line `> description` only; the prose that follows survives processing."
    cells = [c for c in _nb(nb)["cells"] if c["cell_type"] != "raw"]
    title = _src(cells[0]).strip().splitlines()
    assert title[0].startswith("# ") and (len(title) == 1 or (len(title) == 3 and not title[1] and title[2].startswith("> "))), \
        f"{nb.name}: the first cell must be '# Title' and a one-line '> description'"
    prose = next((c for c in cells[1:] if c["cell_type"] == "markdown" and RUN_RECORD_TAG not in c.get("metadata", {}).get("tags", [])), None)
    if prose is None: return
    processed = _nb(proc / nb.relative_to(ROOT / "nbs"))
    unlink = lambda t: re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", t)    # nbdev turns `names` into links
    md = unlink("\n".join(_src(c) for c in processed["cells"] if c["cell_type"] == "markdown"))
    first_line = unlink(_src(prose).strip().splitlines()[0])
    assert first_line in md, f"{nb.name}: opening prose lost"

def test_library_cells_with_imports_run_on_their_own():
    "nbdev's doc processing runs every cell holding an import without the cells above it: such a cell holds imports only."
    bad = []
    for nb in LIBRARY:
        for i, c in enumerate(_nb(nb)["cells"]):
            src = _src(c)
            if c["cell_type"] != "code" or re.search(r"^#\|\s*(export|exports|exporti|exec_doc)\b", src, re.M): continue
            try: body = ast.parse(src).body
            except SyntaxError: continue
            imports = [n for t in body for n in ast.walk(t) if isinstance(n, (ast.Import, ast.ImportFrom))]
            if imports and not all(isinstance(t, (ast.Import, ast.ImportFrom)) for t in body): bad.append((nb.name, i))
    assert not bad, f"cells mixing imports with other code: {bad}"

def test_analyses_declare_paper_and_are_not_executed_by_nbdev():
    for nb in ANALYSES:
        fm = notebook_front_matter(nb)
        assert fm.get("paper") in set(papers().paper_name), nb.name
        assert fm.get("skip_exec") is True and fm.get("skip_showdoc") is True, nb.name

def test_navigation_lists_results_then_analyses_by_paper_then_model_cards_then_library():
    committed = (ROOT / "nbs" / "sidebar.yml").read_text(encoding="utf-8")
    import yaml
    assert yaml.safe_load(committed) == site_navigation(), "nbs/sidebar.yml is stale: run vlbias_nb.run.site.write_navigation()"
    side = site_navigation()["website"]["sidebar"]["contents"]
    cards = sorted((ROOT / "nbs" / "cards").glob("*.md"))                        # pages of `vlbias card --publish`, if any
    assert side[0]["href"] == "index.ipynb" and [e["section"] for e in side[1:]] == \
        ["Analyses", *(["Model cards"] if cards else []), "Library reference"]
    assert sum(len(s["contents"]) for s in side[1]["contents"]) == len(ANALYSES)
    cfg = (ROOT / "settings.ini").read_text()
    assert re.search(r"^custom_sidebar\s*=\s*True", cfg, re.M)

def test_published_ledgers_cover_every_item_and_readme_shows_the_same_counts():
    rows = published_ledgers()
    items = paper_items()
    for name in sorted(set(items.analysis) - {""}):
        mine = set(items[items.analysis == name].item)
        got = set(rows[rows.analysis == name].item)
        assert mine <= got, f"figures/{name}/ledger.csv has no row for {sorted(mine - got)}"
    summary = summary_markdown(ledger_summary(ledger_by_item(rows, items)))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index(README_START):readme.index(README_END)]
    assert summary in block, "README's summary counts differ from the published ledgers: run vlbias reproduce --publish"

def test_nbdev_readme_never_touches_readme(tmp_path):
    "settings.ini names no existing readme notebook, so nbdev_readme (run by nbdev_docs) returns before writing."
    for f in ("settings.ini", "README.md"): shutil.copy(ROOT / f, tmp_path / f)
    shutil.copytree(ROOT / "nbs", tmp_path / "nbs", symlinks=True)
    before = (tmp_path / "README.md").read_bytes()
    r = subprocess.run([sys.executable, "-c", "from nbdev.quarto import nbdev_readme; nbdev_readme.__wrapped__(chk_time=True)"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "README.md").read_bytes() == before

def test_published_tables_beside_the_paper_say_whether_they_are_comparable():
    "A published CSV with a column naming the paper also has `comparable` and its `reason` (tiny-model numbers are never results)."
    import pandas as pd
    bad = []
    for f in sorted((ROOT / "figures").rglob("*.csv")):
        t = pd.read_csv(f, nrows=5)
        if any("paper" in str(c).lower() for c in t.columns) and not {"comparable", "reason"} <= set(t.columns):
            bad.append(f.relative_to(ROOT).as_posix())
    assert not bad, f"tables beside the paper without comparable/reason: {bad}"

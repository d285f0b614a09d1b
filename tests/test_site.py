"""The documentation site: nbdev's doc processing of every notebook succeeds, the home page is the results ledger, every
analysis page carries the outputs of its published run, and no page shows a traceback, a progress bar, a warning or a
machine path. No Quarto needed: this checks what nbdev hands to Quarto."""
import ast, json, re, shutil, subprocess, sys
import pytest
from pathlib import Path
from vlbias_nb.paths import project_root
from vlbias_nb.report import paper_items, papers, published_ledgers, ledger_by_item, ledger_summary, summary_markdown
from vlbias_nb.run.publish_page import absolute_paths, README_START, README_END, RUN_RECORD_TAG
from vlbias_nb.run.navigation import site_navigation, notebook_front_matter
from vlbias_nb.run.figure_links import FIGURE_MARKDOWN
from vlbias_nb.run.site import process_docs

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

def _has_figure(o):
    "An image output, an `<img>`, or a figure as the site shows it (`figure_markdown`: the saved PNG in a lightbox link)."
    return any(k.startswith("image/") for k in o.get("data", {})) or "<img" in "".join(_output_texts(o)) or \
        bool(FIGURE_MARKDOWN.match("".join(o.get("data", {}).get("text/markdown", ""))))
def _has_table(o): return "<table" in "".join(v if isinstance(v, str) else "".join(v) for k, v in o.get("data", {}).items() if k == "text/html")

@pytest.fixture(scope="module")
def proc(processed_site):
    "The processed notebooks, as `nbdev_docs` would hand them to Quarto (conftest's `processed_site`, shared with the browser test)."
    return processed_site

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
    assert html.count('<div class="vlbias-ledger-group">') == len(papers()), "one ledger per paper"
    for it in items.itertuples():                                    # a row per paper item
        assert f"<tr><td><b>{it.item}</b>" in html.replace("&#x27;", "'").replace("&amp;", "&"), it.item
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

def test_navigation_lists_results_then_analyses_by_paper_then_model_cards_then_guide_then_library():
    committed = (ROOT / "nbs" / "sidebar.yml").read_text(encoding="utf-8")
    import yaml
    assert yaml.safe_load(committed) == site_navigation(), "nbs/sidebar.yml is stale: run vlbias_nb.run.navigation.write_navigation()"
    side = site_navigation()["website"]["sidebar"]["contents"]
    cards = sorted((ROOT / "nbs" / "cards").glob("*.md"))                        # pages of `vlbias card --publish`, if any
    guide = guide_pages(ROOT / "nbs")                                             # the manual the README links to
    assert guide, "no guide pages in nbs/guide/"
    assert side[0]["href"] == "index.ipynb" and [e["section"] for e in side[1:]] == \
        ["Analyses", *(["Model cards"] if cards else []), "Guide", "Library reference"]
    assert next(e for e in side if e.get("section") == "Guide")["contents"] == guide_entries(ROOT / "nbs", guide)
    if cards:                                   # the navbar's model cards: a menu of the published pages, each saying what it is
        navbar = site_navigation()["website"]["navbar"]["left"]
        assert navbar[2] == {"text": "Model cards", "menu": card_entries(ROOT / "nbs", card_pages(ROOT / "nbs"))}
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


# ---- The site as a reader meets it (issue 32) ----
import html as _html, posixpath, yaml
from vlbias_nb.run.navigation import page_file, card_entries, card_pages, guide_entries, guide_pages, site_navigation, analysis_name
from vlbias_nb.run.reader_page import plumbing_reason, raw_backticks, RESULTS_TAG, headlines, LEDGER_LABEL
from vlbias_nb.run.site import render_html

def _fm(nb):
    c = nb["cells"][0] if nb["cells"] else None
    if c and c["cell_type"] == "raw" and _src(c).lstrip().startswith("---"): return yaml.safe_load(_src(c).strip().strip("-")) or {}
    return {}

def _site_pages(proc):
    "Every page of the processed site as Quarto writes it: source path under nbs/ → page path (`output-file`)."
    pages = {}
    for p in proc.rglob("*"):
        if not p.is_file() or "_proc" in p.relative_to(proc).parts: continue
        rel = p.relative_to(proc).as_posix()
        if p.suffix == ".ipynb":
            out = _fm(_nb(p)).get("output-file")
            pages[rel] = posixpath.join(posixpath.dirname(rel), out) if out else page_file(rel)
        elif p.suffix in (".md", ".qmd"): pages[rel] = page_file(rel)
    return pages

_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
_LINKS = re.compile(r'\]\(([^)\s]+)\)|(?:href|src)="([^"]+)"')

def _links_of(p):
    "(where, target) of every link of the processed notebook or Markdown page `p`: Markdown text, Markdown and HTML outputs."
    texts = []
    if p.suffix == ".md": texts.append(("text", p.read_text(encoding="utf-8")))
    else:
        for i, c in enumerate(_nb(p)["cells"]):
            if c["cell_type"] == "markdown": texts.append((f"cell {i}", _CODE.sub("", _src(c))))
            for o in c.get("outputs", []):
                for k in ("text/html", "text/markdown"):
                    v = o.get("data", {}).get(k)
                    if v: texts.append((f"cell {i} output", v if isinstance(v, str) else "".join(v)))
    for where, t in texts:
        for m in _LINKS.finditer(t): yield where, _html.unescape(m.group(1) or m.group(2))

def test_every_link_lands(proc):
    """A crawl of the processed site: every link inside it (Markdown, HTML outputs, the navigation, absolute links to the
    site's own host) names a file that exists, a notebook or Markdown page by its source (Quarto maps it to its page),
    an HTML page by the name Quarto writes (`output-file`)."""
    from nbdev.config import get_config
    cfg = get_config(path=ROOT)
    host = cfg.doc_host.rstrip("/") + cfg.doc_baseurl.rstrip("/") + "/"
    pages = _site_pages(proc)
    files = {p.relative_to(proc).as_posix() for p in proc.rglob("*") if p.is_file()}
    html_pages = set(pages.values())
    missing, n = [], 0
    def check(page, where, target):
        nonlocal n
        if target.startswith(host): base, target = "", target[len(host):]
        elif re.match(r"^([a-z][\w+.-]*:|#|//)", target) or not target: return
        else: base = posixpath.dirname(page)
        path = posixpath.normpath(posixpath.join(base, target.split("#")[0].split("?")[0]))
        n += 1
        ok = path in html_pages if path.endswith(".html") else path in files
        if not ok: missing.append((page, where, target))
    for p in sorted(proc.rglob("*")):
        if p.suffix in (".ipynb", ".md") and p.is_file():
            for where, t in _links_of(p): check(p.relative_to(proc).as_posix(), where, t)
    nav = yaml.safe_load((proc / "sidebar.yml").read_text(encoding="utf-8"))["website"]
    for e in re.findall(r"[\w./-]+\.(?:ipynb|md)", yaml.safe_dump(nav)): check("", "navigation", e)
    assert n > 300, f"only {n} links crawled"
    assert not missing, f"{len(missing)} links lead nowhere, e.g. {missing[:10]}"

def _visible_code(c) -> bool:
    return c["cell_type"] == "code" and not re.search(r"^#\|\s*(code-fold|echo)\s*:", _src(c), re.M) and bool(_src(c).strip())

def _result_label(o) -> bool:
    h = "".join(_output_texts(o))
    return bool(re.search(r'class="vlbias-label vlbias-(result|validation|paper|ledger-label)"', h)) and '<details class="vlbias-fold">' not in h[:40]

@pytest.mark.parametrize("src", ANALYSES, ids=lambda p: p.name)
def test_every_analysis_page_opens_with_its_results(src, proc):
    """On the processed page (what Quarto renders, top to bottom): the first labelled result (the Results section:
    the ledger of the published run, ours beside the paper's) comes before any code a reader sees, and every plumbing
    cell (parameters, imports, the set-up block before the first section) is folded."""
    cells = _nb(proc / src.relative_to(ROOT / "nbs"))["cells"]
    first_result = next(i for i, c in enumerate(cells) if any(_result_label(o) for o in c.get("outputs", [])))
    first_code = next((i for i, c in enumerate(cells) if _visible_code(c)), len(cells))
    assert first_result < first_code, f"{src.name}: first result in cell {first_result}, visible code from cell {first_code}"
    assert RESULTS_TAG in cells[first_result].get("metadata", {}).get("tags", [])
    section = False
    for i, c in enumerate(cells):
        if c["cell_type"] == "markdown" and re.search(r"^##\s", _src(c), re.M) and RESULTS_TAG not in c.get("metadata", {}).get("tags", []): section = True
        if _visible_code(c):
            assert not plumbing_reason(_src(c), c.get("metadata", {}).get("tags", []), (), not section), f"{src.name}: plumbing cell {i} open"

def test_headlines_name_outputs_of_the_published_runs(proc):
    "Every headline named in resources/site/headlines.yaml is an output of its analysis's published run (else it is silently skipped)."
    stale = []
    for src in ANALYSES:
        cells = _nb(proc / src.relative_to(ROOT / "nbs"))["cells"]
        shown = " ".join(_src({"source": o["data"]["text/html"]}) for c in cells if RESULTS_TAG in c.get("metadata", {}).get("tags", [])
                         for o in c.get("outputs", []) if "text/html" in o.get("data", {}))
        for frag in headlines().get(analysis_name(src), []):
            if frag.casefold() not in _html.unescape(shown).casefold(): stale.append((src.name, frag))
    assert not stale, stale

def test_no_raw_markdown_in_html_outputs(proc):
    "No HTML output shows Markdown as text: no backtick outside code (ledger notes, table cells)."
    bad = [(p.relative_to(proc).as_posix(), i, b) for p in sorted(proc.rglob("*.ipynb")) for i, c in enumerate(_nb(p)["cells"])
           for o in c.get("outputs", []) for b in raw_backticks("".join(_output_texts(o)) if "text/html" in o.get("data", {}) else "")]
    assert not bad, f"{len(bad)} raw backticks, e.g. {bad[:5]}"

def test_no_page_takes_an_embedded_image_for_its_preview(proc):
    "Every page names the site's preview image (Quarto's og:image / twitter:image), which exists: never a base64 figure."
    for p in sorted(proc.rglob("*.ipynb")):
        fm = _fm(_nb(p))
        if not fm: continue
        img = fm.get("image", "")
        assert img and not img.startswith("data:"), p
        assert (p.parent / img).resolve().is_file(), (p, img)
    test_fmt = yaml.safe_load((ROOT / "_quarto.yml").read_text())["format"]
    assert list(test_fmt) == ["html"], f"one output format, got {list(test_fmt)}"

def test_every_ledger_opens_with_a_row_a_reader_can_use():
    """On each analysis page (its Results ledger, one row per item, and its ledger of every row) and on the home page,
    the first row of a ledger has a number of ours (not one of `LEDGER_AWAITING`) whenever any row has one, and the rows
    are in the order of `ITEM_STATUSES`."""
    from vlbias_nb.report import LEDGER_AWAITING, ITEM_STATUSES, status_rank, item_table_html
    from vlbias_nb.run.reader_page import analysis_ledger_html
    from vlbias_nb.run.navigation import analysis_hrefs
    status = re.compile(r'<span class="vlbias-status"[^>]*>(.*?)</span>')
    pages = {f"{n} ({how})": analysis_ledger_html(n, by_item=how == "items") for n in analysis_hrefs() for how in ("items", "rows")}
    bi = ledger_by_item(published_ledgers())
    pages.update({f"home {p}": item_table_html(bi, p) for p in papers().paper_name})
    bad = []
    for page, h in pages.items():
        if not h: continue
        for group in h.split('<div class="vlbias-ledger-group">')[1:]:
            got = [_html.unescape(s) for s in status.findall(group)]
            main = got[:len(status.findall(group.split('<details class="vlbias-fold vlbias-ledger-rest">')[0]))]
            if got and got[0] in LEDGER_AWAITING and any(s not in LEDGER_AWAITING for s in got): bad.append((page, got[:3]))
            ranks = [status_rank(s) for s in main]
            if ranks != sorted(ranks): bad.append((page, "out of order", main[:6]))
    assert not bad, bad

"""The site in a real browser: headless Chromium (Debian's `chromium`) loads rendered pages at 1400 px and at 390 px and
fails on a page that pans sideways, a table wider than its box without a scroll container, a link or `#fragment` that
lands nowhere (or leaves a local preview for the deployed site), `<NA>`/`nan` in a table, raw Markdown markers in the
text (a backtick, `**` that is not a power such as `2**31`, `*a phrase*`), an analysis page longer than 25 screens
at 1400 px or whose first result is further down than 1,500 px, a figure on an analysis page that a click does not
enlarge to a file at least as wide as it is shown (1400 and 390 px), a result figure of an analysis page (not a folded
pipeline check) whose smallest text is under 9 px as shown at 1400 px, and a wide display equation (the LIC page's
eq. 11) that does not scroll inside its own box at 390 px.

No Quarto here: the pages are nbdev's processed notebooks (conftest's `processed_site`, shared with tests/test_site.py)
rendered by nbconvert (`render_html`, which emulates Quarto's folds, heading ids and text column). To stay fast it
renders a representative set once per test run (`PAGES`: the home page, every analysis page, the model cards, the
guide pages (`nbs/guide/*.md`, Markdown pages as the cards are) and six library pages, among them the two whose
docstrings held Markdown) and loads each page once, in one Chromium process
holding it in a frame per width, two pages at a time. Skipped, saying so, where Chromium is absent (`apt-get install -y chromium`);
the equation check also needs Debian's MathJax (`apt-get install -y libjs-mathjax`), which the pages then load instead of
nbconvert's MathJax on the web."""
import html, json, posixpath, re, shutil, subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote
import pytest
from vlbias_nb.paths import project_root
from vlbias_nb.run.navigation import page_file
from vlbias_nb.run.figure_links import figure_text_px, MIN_FIGURE_TEXT_PX
from vlbias_nb.run.site import render_html, site_host

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MATHJAX = Path("/usr/share/javascript/mathjax/MathJax.js")     # Debian's libjs-mathjax (MathJax 2, as nbconvert's pages use)
pytestmark = pytest.mark.skipif(not CHROMIUM, reason="needs headless Chromium: apt-get install -y chromium (Debian's package)")

ROOT = project_root()
ANALYSES = sorted(p.relative_to(ROOT / "nbs").as_posix() for p in (ROOT / "nbs" / "analyses").rglob("[0-9]*.ipynb"))
CARDS = sorted(p.relative_to(ROOT / "nbs").as_posix() for p in (ROOT / "nbs" / "cards").glob("*.md"))
GUIDE = sorted(p.relative_to(ROOT / "nbs").as_posix() for p in (ROOT / "nbs" / "guide").glob("*.md"))
LIBRARY = ["library.ipynb", "02_seeds.ipynb", "18_report.ipynb", "papers/social_counterfactuals/01_intersectional_probing.ipynb",
           "data/08_fairness_datasets.ipynb", "run/01_parameters.ipynb"]
PAGES = ["index.ipynb", *ANALYSES, *CARDS, *GUIDE, *LIBRARY]
WIDTHS = (1400, 390)
SCREEN = 900                   # px: the window's height, one screen
MAX_SCREENS = 25               # an analysis page (its folds closed) at 1400 px is at most this many screens

_MEASURE = r"""<script>(async () => {
  await new Promise(r => document.readyState === "complete" ? r() : window.addEventListener("load", r));
  if (window.MathJax && MathJax.Hub) await new Promise(r => MathJax.Hub.Queue(r));        // equations typeset
  const doc = document.documentElement, main = document.querySelector("main") || document.body;
  const label = document.querySelector(".vlbias-label");
  const res = {height: doc.scrollHeight, pans: [doc.scrollWidth - window.innerWidth],
               first_label_y: label ? Math.round(label.getBoundingClientRect().top + window.scrollY) : -1};
  document.querySelectorAll("details").forEach(d => d.open = true);          // every fold open: all content measured
  await new Promise(r => setTimeout(r, 100));
  res.pans.push(doc.scrollWidth - window.innerWidth);
  const mr = main.getBoundingClientRect(), within = r => r.left >= mr.left - 1 && r.right <= mr.right + 1;
  const marks = [...main.querySelectorAll(".vlbias-label, h1, h2, h3, h4")];
  const where = e => { let l = ""; for (const m of marks) if (m.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING) l = m.textContent; return l.trim().slice(0, 90); };
  res.wide = []; res.missing = [];
  for (const t of main.querySelectorAll("table")) {
    let ok = within(t.getBoundingClientRect());
    for (let e = t; !ok && e && e !== main; e = e.parentElement)
      if (/(auto|scroll)/.test(getComputedStyle(e).overflowX) && within(e.getBoundingClientRect())) ok = true;
    if (!ok) res.wide.push([where(t), Math.round(t.getBoundingClientRect().width), Math.round(mr.width)]);
    const bad = [...t.querySelectorAll("td")].filter(td => /^(<NA>|nan|NaN|NaT|None)$/.test(td.textContent.trim())).length;
    if (bad) res.missing.push([where(t), bad]);
  }
  res.links = [...main.querySelectorAll("a[href]")].map(a => a.getAttribute("href"));
  res.ids = [...document.querySelectorAll("[id], a[name]")].map(e => e.id || e.getAttribute("name"));
  res.markdown = [];
  const skip = "code, pre, script, style, kbd, samp, textarea, .math, mjx-container, .mjx-chtml, .MathJax_CHTML, .MathJax_Preview, .MJX_Assistive_MathML";
  const walk = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    if (n.parentElement.closest(skip)) continue;
    const t = n.textContent.replace(/\$\$[\s\S]*?\$\$|\$[^$\n]+\$/g, "");
    if (/`|(?<![\w)])\*\*|\*\*(?![\w(])/.test(t) || /(^|[\s(])\*[^\s*][^*]*[^\s*]\*(?=[\s).,;:]|$)/.test(t)) res.markdown.push([where(n.parentElement), t.trim().slice(0, 90)]);
  }
  res.figures = [...main.querySelectorAll("img")].map(img => { const a = img.closest("a.lightbox");
    return {where: where(img), href: a ? a.getAttribute("href") : null, width: img.getBoundingClientRect().width,
            folded: !!img.closest("details.vlbias-fold"), natural: null}; });
  await Promise.all(res.figures.filter(f => f.href && !f.href.startsWith("data:")).map(f => new Promise(ok => {
    const im = new Image(); im.onload = () => { f.natural = im.naturalWidth; ok(); }; im.onerror = () => { f.natural = 0; ok(); };
    im.src = new URL(f.href, document.baseURI).href; })));
  res.equations = [...main.querySelectorAll(".math.display")].map(e => ({where: where(e), scroll: e.scrollWidth, client: e.clientWidth,
    overflow: getComputedStyle(e).overflowX, typeset: !!e.querySelector(".mjx-chtml, mjx-container")}));
  parent.postMessage({width: window.innerWidth, res: res}, "*");
})();</script>"""

_DRIVER = """<!doctype html><html><body style="margin:0"><script>
const got = {};
window.addEventListener("message", e => { got[e.data.width] = e.data.res;
  if (Object.keys(got).length === %d) { const m = document.createElement("pre"); m.id = "vlbias-measure";
    m.textContent = JSON.stringify(got); document.body.appendChild(m); } });
</script>%s</body></html>"""

def measure(page: Path) -> dict:
    """What `_MEASURE` finds on the rendered `page` at each of `WIDTHS`: one headless Chromium (a fresh profile, no
    network) loads a driver page holding the page in one frame per width, each frame reporting to it."""
    probe, driver = page.with_name(page.stem + ".probe.html"), page.with_name(page.stem + ".driver.html")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", _MEASURE + "</body>", 1), encoding="utf-8")
    frames = "".join(f'<iframe src="{probe.name}" style="width:{w}px;height:{SCREEN}px;border:0;display:block"></iframe>' for w in WIDTHS)
    driver.write_text(_DRIVER % (len(WIDTHS), frames), encoding="utf-8")
    profile = page.parent / f".chromium-{page.stem}"
    # virtual time (not wall time): MathJax typesets a page in timed chunks, the LIC page's in about 2 virtual minutes
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={profile}", f"--window-size={max(WIDTHS)},{SCREEN}", "--virtual-time-budget=300000",
                        "--dump-dom", driver.as_uri()], capture_output=True, text=True, timeout=240)
    probe.unlink(); driver.unlink(); shutil.rmtree(profile, ignore_errors=True)
    m = re.search(r'<pre id="vlbias-measure">(.*?)</pre>', r.stdout, re.S)
    assert m, f"no measurement of {page.name}: {r.stderr[-500:]}"
    got = json.loads(html.unescape(m.group(1)))
    assert sorted(map(int, got)) == sorted(WIDTHS), (page.name, list(got))
    return {int(w): v for w, v in got.items()}

@pytest.fixture(scope="module")
def rendered(processed_site, tmp_path_factory):
    "(html folder, {page: {width: measurement}}, every page of the whole site): `PAGES` rendered once and measured."
    proc, tmp = processed_site, tmp_path_factory.mktemp("browser")
    subset = tmp / "proc"
    for p in proc.rglob("*"):                                  # the chosen pages and every non-page file they may show
        rel = p.relative_to(proc).as_posix()
        if not p.is_file() or "_proc" in rel.split("/") or (p.suffix in (".ipynb", ".md") and rel not in PAGES): continue
        (subset / rel).parent.mkdir(parents=True, exist_ok=True); shutil.copy(p, subset / rel)
    out = tmp / "html"
    pages = render_html(subset, out, mathjax_url=MATHJAX.as_uri() + "?config=TeX-AMS_CHTML-full,Safe" if MATHJAX.exists() else None)
    assert len(pages) == len(PAGES), sorted(set(PAGES) - {p.relative_to(out).as_posix() for p in pages})
    with ThreadPoolExecutor(2) as pool: got = list(pool.map(measure, pages))
    by_page = {p.relative_to(out).as_posix(): m for p, m in zip(pages, got)}
    every = [p.relative_to(proc).as_posix() for p in proc.rglob("*") if p.is_file() and "_proc" not in p.relative_to(proc).parts]
    site = {page_file(p) for p in every if p.endswith((".ipynb", ".md"))}
    return out, by_page, site | set(every)

def test_no_page_pans_sideways(rendered):
    _, pages, _ = rendered
    bad = [(p, w, px) for p, m in pages.items() for w in WIDTHS for px in m[w]["pans"] if px > 1]
    assert not bad, f"pages wider than the window (page, window, px too wide): {bad}"

def test_every_table_fits_or_scrolls_in_its_own_box(rendered):
    _, pages, _ = rendered
    bad = [(p, w, t) for p, m in pages.items() for w in WIDTHS for t in m[w]["wide"]]
    assert not bad, f"{len(bad)} tables wider than the column without a scroll box (page, window, [where, width, column]): {bad[:8]}"

def test_no_table_shows_missing_values(rendered):
    _, pages, _ = rendered
    bad = [(p, t) for p, m in pages.items() for t in m[1400]["missing"]]
    assert not bad, f"tables with <NA>/nan cells (page, [where, cells]): {bad[:8]}"

def test_no_raw_markdown_in_rendered_text(rendered):
    _, pages, _ = rendered
    bad = [(p, t) for p, m in pages.items() for t in m[1400]["markdown"]]
    assert not bad, f"{len(bad)} texts showing Markdown markers (page, [where, text]): {bad[:8]}"

def test_every_link_and_fragment_lands_and_stays_local(rendered):
    """Every link of the chosen pages names a page or file of the site (any page of it, rendered here or not) and, on a
    rendered page, an element with its `#fragment`; none is an absolute link to the deployed site."""
    out, pages, site = rendered
    from nbdev.config import get_config
    host = site_host(get_config(path=ROOT))
    bad, n = [], 0
    for p, m in pages.items():
        for raw in m[1400]["links"]:
            if raw.startswith(host): bad.append((p, raw, "absolute link to the deployed site")); continue
            if re.match(r"^([a-z][\w+.-]*:|//)", raw): continue                  # another site, mail, data
            n += 1
            path, _, frag = raw.partition("#")
            rel = posixpath.normpath(posixpath.join(posixpath.dirname(p), unquote(path))) if path else p
            if rel.startswith(".."): bad.append((p, raw, "outside the site")); continue
            if rel not in site and not (out / rel).exists(): bad.append((p, raw, "no such page or file")); continue
            if frag and rel in pages and unquote(frag) not in pages[rel][1400]["ids"]: bad.append((p, raw, "no such anchor"))
    assert n > 100, f"only {n} links crawled"
    assert not bad, f"{len(bad)} links land nowhere, e.g. {bad[:10]}"

def test_analysis_pages_can_be_finished_and_open_with_their_results(rendered):
    """At 1400 px each analysis page, its folds closed, is at most `MAX_SCREENS` screens long, and its first label (the
    Results section's ledger) is within its first 1,500 px."""
    _, pages, _ = rendered
    analyses = {p: m[1400] for p, m in pages.items() if p.startswith("analyses/")}
    assert len(analyses) == len(ANALYSES)
    long = [(p, round(m["height"] / SCREEN, 1)) for p, m in analyses.items() if m["height"] > MAX_SCREENS * SCREEN]
    assert not long, f"analysis pages longer than {MAX_SCREENS} screens at 1400 px (page, screens): {long}"
    late = [(p, m["first_label_y"]) for p, m in analyses.items() if not 0 <= m["first_label_y"] <= 1500]
    assert not late, f"first result further down than 1,500 px: {late}"

def test_every_figure_of_an_analysis_page_enlarges_to_full_resolution(rendered):
    """Every image on an analysis page sits in a lightbox link (Quarto's `lightbox` class) to a file of the site whose
    natural width is at least the width the image is shown at, at 1400 and at 390 px."""
    _, pages, _ = rendered
    n, bad = 0, []
    for p, m in pages.items():
        if not p.startswith("analyses/"): continue
        for w in WIDTHS:
            for f in m[w]["figures"]:
                n += 1
                if not f["href"] or f["href"].startswith("data:"): bad.append((p, w, f["where"], "not in a lightbox link to a file"))
                elif not f["natural"]: bad.append((p, w, f["where"], f"{f['href']} does not load"))
                elif f["natural"] < f["width"] - 0.5: bad.append((p, w, f["where"], f"{f['href']}: {f['natural']} px wide, shown at {f['width']:.0f}"))
    assert n >= 2 * 50, f"only {n // 2} figures on the analysis pages"
    assert not bad, f"{len(bad)} figures a click does not enlarge to full resolution: {bad[:8]}"

def test_analysis_result_figures_have_legible_text(rendered):
    """Every analysis page's result figure (not a folded pipeline check) shown at 1400 px: its smallest text (from its
    saved SVG: the font size in pt × the shown width over the SVG's width in pt) is at least `MIN_FIGURE_TEXT_PX`."""
    _, pages, _ = rendered
    figs = [(a, f) for a in ANALYSES for f in pages[page_file(a)][1400]["figures"] if f["href"] and not f["folded"]]
    assert len(figs) >= 20, [(a, f["href"]) for a, f in figs]          # the measure found them (27 result figures at smoke)
    small = []
    for a, f in figs:
        svg = ROOT / Path(f["href"]).with_suffix(".svg")                # figures/<analysis>/<name>.png: its saved SVG
        px = figure_text_px(svg.read_text(encoding="utf-8"), f["width"])
        if px is not None and px < MIN_FIGURE_TEXT_PX:
            small.append((Path(a).stem, f["where"], Path(f["href"]).name, round(f["width"]), round(px, 1)))
    assert not small, f"figures whose smallest text is under {MIN_FIGURE_TEXT_PX} px (page, where, file, shown px, text px): {small}"

@pytest.mark.skipif(not MATHJAX.exists(), reason="needs Debian's MathJax to typeset the equations: apt-get install -y libjs-mathjax")
def test_a_wide_equation_scrolls_in_its_own_box_on_a_phone(rendered):
    """At 390 px the LIC page's display equations are typeset, eq. (11) (the widest) overflows its box, which scrolls
    (`overflow-x: auto`), and the page itself does not pan."""
    _, pages, _ = rendered
    m = pages[page_file(next(a for a in ANALYSES if "/lic/" in a))][390]
    eqs = m["equations"]
    assert eqs and all(e["typeset"] for e in eqs), eqs[:3]
    wide = [e for e in eqs if e["scroll"] > e["client"] + 1]
    assert wide, f"no display equation wider than its box at 390 px: {eqs[:5]}"
    assert all(e["overflow"] in ("auto", "scroll") for e in wide), wide
    assert max(m["pans"]) <= 1, m["pans"]

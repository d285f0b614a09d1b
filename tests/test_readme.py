"""The README is the front door: its two commands are what a newcomer runs (CI runs the second one verbatim), it stays
short (at most `README_MAX_BYTES`), and the manual it points to is the guide on the documentation site (`nbs/guide/*.md`):
every link into the site lands on a page the site has, every guide page is one click from the README, and every
`vlbias <subcommand>` the README or the guide shows is one the command has."""
import re, subprocess, sys
from nbdev.config import get_config
from vlbias_nb.paths import project_root
from vlbias_nb.run.navigation import guide_pages, page_file
from vlbias_nb.run.site import pandoc_id, site_host

ROOT = project_root()
README_MAX_BYTES = 12_000          # 12 KB: a front door, not a manual (the manual is nbs/guide/)

def _readme(): return (ROOT / "README.md").read_text(encoding="utf-8")

def _commands():
    return re.findall(r"```bash\n(.+?)\n```", _readme(), flags=re.S)[:2]

def test_readme_opens_with_two_commands():
    main_job, tests = _commands()
    assert "vlbias reproduce --profile smoke" in main_job and "pip install" in main_job
    assert "pytest" in tests and "pip install" in tests

def test_ci_runs_readme_test_command_verbatim():
    ci = (ROOT / ".ci/run").read_text().splitlines()
    assert _commands()[1] in ci

def test_readme_is_a_front_door_of_at_most_12_kb():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes (at most {README_MAX_BYTES}): move the long part to a page of nbs/guide/"

def _site_links(text):
    "(path under the site, fragment) of every link of `text` into the deployed site."
    host = site_host(get_config(path=ROOT))
    return [(m.group(1), m.group(2) or "") for m in re.finditer(re.escape(host) + r"([^)\s#\"]*)(?:#([^)\s\"]*))?", text)]

def _heading_ids(md):
    "The ids pandoc (Quarto) gives the headings of the Markdown page `md` (code blocks skipped)."
    md = re.sub(r"```.*?```", "", md, flags=re.S)
    return {pandoc_id(re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h)) for h in re.findall(r"^#{1,6}\s+(.+?)\s*$", md, re.M)}

def test_every_site_link_of_the_readme_lands_and_every_guide_page_is_one_click_away():
    nbs = ROOT / "nbs"
    pages = {page_file(p.relative_to(nbs).as_posix()): p for p in nbs.rglob("*")
             if p.suffix in (".ipynb", ".md") and not any(s.startswith((".", "_")) for s in p.relative_to(nbs).parts)}
    links = _site_links(_readme())
    bad = []
    for path, frag in links:
        page = pages.get(path or "index.html")
        if page is None: bad.append((path, "no such page of the site")); continue
        if frag and page.suffix == ".md" and frag not in _heading_ids(page.read_text(encoding="utf-8")):
            bad.append((f"{path}#{frag}", f"no heading of {page.relative_to(ROOT)} has this id"))
    assert not bad, bad
    linked = {path for path, _ in links}
    guide = guide_pages(nbs)
    assert guide, "no guide pages in nbs/guide/"
    unlinked = [g for g in guide if page_file(g) not in linked]
    assert not unlinked, f"guide pages the README does not link: {unlinked}"

def _shown_subcommands(md):
    "Every `vlbias <word>` shown as a command in `md`: at the start of a command line of a code block, or of an inline code span."
    blocks = re.findall(r"```[^\n]*\n(.*?)```", md, flags=re.S)
    inline = re.sub(r"```.*?```", "", md, flags=re.S)
    got = {m.group(1) for b in blocks for m in re.finditer(r"(?:^|&&|;|\|)[ \t]*(?:\$[ \t]+)?vlbias[ \t]+([a-z][\w-]*)", b, re.M)}
    return got | set(re.findall(r"`vlbias\s+([a-z][\w-]*)", inline))

def test_every_vlbias_subcommand_shown_exists():
    r = subprocess.run([sys.executable, "-m", "vlbias_nb.run.cli", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r"^usage: vlbias .*?\{([\w,-]+)\}", r.stdout, re.M)
    assert m, r.stdout[:500]
    known = set(m.group(1).split(","))
    docs = {"README.md": _readme(), **{g: (ROOT / "nbs" / g).read_text(encoding="utf-8") for g in guide_pages(ROOT / "nbs")}}
    shown = {name: _shown_subcommands(text) for name, text in docs.items()}
    assert "reproduce" in shown["README.md"], shown["README.md"]          # the scan sees the README's first command
    unknown = {name: sorted(s - known) for name, s in shown.items() if s - known}
    assert not unknown, f"subcommands shown that `vlbias --help` does not list ({sorted(known)}): {unknown}"

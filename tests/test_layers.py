"""The package is one house in layers: foundations (paths, metrics, text, report, resources) < data < zoo < methods <
papers < run. A module imports only from its own layer or below; the papers never import each other; there is no
import circle (lazy imports inside functions included); and only the zoo downloads or loads pretrained weights."""
import ast, pytest
from pathlib import Path
from vlbias_nb.paths import project_root

PKG = project_root() / "vlbias_nb"
LAYERS = {"data": 1, "zoo": 2, "methods": 3, "papers": 4, "run": 5}   # anything else at the top: 0, foundations
DOWNLOADERS = {"from_pretrained", "hf_hub_download", "snapshot_download", "urlretrieve", "load_state_dict_from_url",
               "retrieve", "download_url_to_file"}

def _modules() -> dict:
    "`{dotted name: path}` of every module of the package (the nbdev index excluded)."
    out = {}
    for p in PKG.rglob("*.py"):
        if "__pycache__" in p.parts or p.name == "_modidx.py": continue
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__": parts = parts[:-1]
        out[".".join(parts)] = p
    return out

MODULES = _modules()

def _layer(mod: str) -> int: return LAYERS.get(mod.split(".")[1], 0) if mod.count(".") >= 1 else 0

def _resolve(mod: str, node: ast.ImportFrom, is_pkg: bool) -> list:
    "The package modules an `ImportFrom` in module `mod` names."
    if node.level:
        base = mod.split(".") if is_pkg else mod.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else: target = node.module or ""
    if not target.startswith("vlbias_nb"): return []
    found = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
    return found or ([target] if target in MODULES else [])

def imports_of(mod: str) -> set:
    "The package modules `mod` imports anywhere in its code (top level or inside functions)."
    p = MODULES[mod]
    out = set()
    for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
        if isinstance(n, ast.ImportFrom): out.update(_resolve(mod, n, p.name == "__init__.py"))
        elif isinstance(n, ast.Import): out.update(a.name for a in n.names if a.name in MODULES)
    out.discard(mod)
    return {m for m in out if m != "vlbias_nb"}

GRAPH = {m: imports_of(m) for m in MODULES}

def _paper(mod: str):
    parts = mod.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "papers" else None

def test_graph_is_not_empty():
    assert len(MODULES) > 30 and sum(map(len, GRAPH.values())) > 50

def test_imports_go_downward_only():
    bad = [(m, t) for m, ts in GRAPH.items() for t in ts if _layer(t) > _layer(m)]
    assert not bad, "imports from a higher layer: " + ", ".join(f"{m} -> {t}" for m, t in sorted(bad))

def test_papers_never_import_each_other():
    bad = [(m, t) for m, ts in GRAPH.items() for t in ts if _paper(m) and _paper(t) and _paper(m) != _paper(t)]
    assert not bad, "paper -> other paper: " + ", ".join(f"{m} -> {t}" for m, t in sorted(bad))

def test_no_import_circles():
    seen, stack, cycles = set(), [], []
    def visit(m):
        if m in stack: cycles.append(stack[stack.index(m):] + [m]); return
        if m in seen: return
        seen.add(m); stack.append(m)
        for t in sorted(GRAPH[m]): visit(t)
        stack.pop()
    for m in sorted(GRAPH): visit(m)
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c) for c in cycles)

# The run layer's rooms, lowest floor first: a room imports only rooms on lower floors (lazy imports included), so the
# runner, the site and the card never reach back up (issue 45). A new module of vlbias_nb/run must be given its floor.
RUN_FLOORS = ["profiles",
              "publish_page", "navigation", "reader_page", "figure_links", "site",                     # the site
              "parameters", "inputs", "prepare", "records", "outputs", "publish", "execution", "reproduce",   # the runner
              "card", "card_compare", "card_publish", "card_cli",                                       # the card
              "cli", "runner"]              # the vlbias command, and its module's name before the split (an alias)
RUN_MODULE_LINES = 400         # issue 45: no room of vlbias_nb/run over ~400 lines

def _run_rooms() -> dict:
    return {m: p for m, p in MODULES.items() if m.startswith("vlbias_nb.run.")}

def _floor(mod: str) -> int: return RUN_FLOORS.index(mod.split(".")[2])

def test_every_run_module_has_a_floor():
    assert sorted(m.split(".")[2] for m in _run_rooms()) == sorted(RUN_FLOORS)

def test_run_modules_import_downward_only():
    bad = [(m, t) for m in _run_rooms() for t in GRAPH[m] if t.startswith("vlbias_nb.run.") and _floor(t) >= _floor(m)]
    assert not bad, "a run module imports one on its own floor or above: " + ", ".join(f"{m} -> {t}" for m, t in sorted(bad))
    assert sum(t.startswith("vlbias_nb.run.") for m in _run_rooms() for t in GRAPH[m]) > 20      # the rooms do import each other

def test_run_modules_are_small():
    big = {m: n for m, p in _run_rooms().items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > RUN_MODULE_LINES}
    assert not big, f"run modules over {RUN_MODULE_LINES} lines (split them by concern): {big}"

def _called(tree) -> list:
    "`(line, name)` of every call in `tree` (the attribute or function name called)."
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            f = n.func
            out.append((n.lineno, f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None))
    return out

def test_only_the_zoo_downloads_or_loads_pretrained_weights():
    "Only the zoo loads weights; `vlbias_nb.data` may fetch data set archives (`pooch.retrieve`) under `downloads_allowed`."
    bad = []
    for mod, p in MODULES.items():
        if mod.startswith("vlbias_nb.zoo"): continue
        calls = _called(ast.parse(p.read_text(encoding="utf-8")))
        policed = any(name == "downloads_allowed" for _, name in calls)
        for line, name in calls:
            if name == "retrieve" and mod.startswith("vlbias_nb.data") and policed: continue   # a data set archive, under the policy
            if name in DOWNLOADERS: bad.append(f"{mod}:{line} {name}")
    assert not bad, "weights loaded or downloaded outside vlbias_nb.zoo: " + ", ".join(bad)

def test_the_checker_catches_what_it_should(tmp_path):
    "The rules fail on a made-up upward import and a circle (the checks can fail)."
    g = {"vlbias_nb.zoo.a": {"vlbias_nb.papers.x.b"}, "vlbias_nb.papers.x.b": {"vlbias_nb.zoo.a"}}
    assert any(_layer(t) > _layer(m) for m, ts in g.items() for t in ts)
    assert _paper("vlbias_nb.papers.gab.binding") == "gab" and _layer("vlbias_nb.run.cli") == 5 and _layer("vlbias_nb.paths") == 0


def environment_reads(src: str) -> list:
    """Line numbers where `src` reads a `VLBIAS_*` variable: `os.environ.get(X)`, `os.environ[X]`, `X in os.environ` or
    `os.getenv(X)` with X a "VLBIAS_…" string or a name ending in `_ENV`/`_ENVS` (the package's names for its variables)."""
    def named(x):
        return (isinstance(x, ast.Constant) and isinstance(x.value, str) and x.value.startswith("VLBIAS_")) or \
               (isinstance(x, ast.Name) and x.id.endswith(("_ENV", "_ENVS"))) or (isinstance(x, ast.Subscript) and named(x.value))
    def is_environ(x): return isinstance(x, ast.Attribute) and x.attr == "environ"
    out = []
    for n in ast.walk(ast.parse(src)):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.args and named(n.args[0]) and (
                (n.func.attr in ("get", "pop") and is_environ(n.func.value)) or n.func.attr == "getenv"):
            out.append(n.lineno)
        elif isinstance(n, ast.Subscript) and is_environ(n.value) and named(n.slice) and isinstance(n.ctx, ast.Load):
            out.append(n.lineno)
        elif isinstance(n, ast.Compare) and named(n.left) and any(is_environ(c) for c in n.comparators):
            out.append(n.lineno)
    return sorted(out)

def test_every_vlbias_variable_is_read_in_paths_only():
    bad = {m: environment_reads(p.read_text(encoding="utf-8")) for m, p in MODULES.items() if m != "vlbias_nb.paths"}
    assert {m: l for m, l in bad.items() if l} == {}
    assert environment_reads(MODULES["vlbias_nb.paths"].read_text(encoding="utf-8"))      # the checker sees paths' own reads

def test_environment_reads_checker():
    src = ('import os\nA = os.environ.get("VLBIAS_X")\nB = os.environ[CACHE_ENV]\nC = DATA_ENV in os.environ\n'
           'D = os.getenv("VLBIAS_Y")\nE = os.environ.get("HOME")\nos.environ["VLBIAS_Z"] = "1"\nF = os.environ.get(k)\n'
           'G = os.environ.get(DATASET_ENVS[d])\n')
    assert environment_reads(src) == [2, 3, 4, 5, 9]

def test_coco_downloads_root_comes_from_paths(monkeypatch, tmp_path):
    from vlbias_nb.data.coco import coco_cache_dir
    from vlbias_nb.paths import downloads_dir
    monkeypatch.setenv("VLBIAS_DOWNLOADS", str(tmp_path / "dl"))
    assert coco_cache_dir() == downloads_dir() == tmp_path / "dl"
    monkeypatch.delenv("VLBIAS_DOWNLOADS")
    assert coco_cache_dir() == project_root() / ".cache" / "downloads"

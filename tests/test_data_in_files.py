"""Data lives in files, not in code: no literal collection in the package spans more than 40 lines; every file in
`vlbias_nb/resources/` is read by some code or test; the loaders of `vlbias_nb.resources` fail with one clear message
naming the file; and the collections moved out of the code kept their values."""
import ast, fnmatch, hashlib, json, warnings
import pytest
import vlbias_nb.resources as resources
from vlbias_nb.paths import MissingDataError, project_root
from vlbias_nb.resources import (ResourceError, resource_path, read_word_list, read_resource_csv, read_resource_json,
                                 read_resource_yaml, known_answer)

ROOT = project_root()
PKG, TESTS, RES = ROOT / "vlbias_nb", ROOT / "tests", ROOT / "vlbias_nb" / "resources"
MAX_LINES = 40
LOADERS = [read_word_list, read_resource_csv, read_resource_json, read_resource_yaml]

def _sources(folder):
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts and p.name != "_modidx.py")

def _parse(path):
    with warnings.catch_warnings():                 # the package's own escape-sequence warnings are not this test's business
        warnings.simplefilter("ignore", SyntaxWarning); warnings.simplefilter("ignore", DeprecationWarning)
        return ast.parse(path.read_text(encoding="utf-8"))

def long_literals(path, max_lines=MAX_LINES) -> list[str]:
    "`file:line` of each list / tuple / dict / set display in `path` whose source spans more than `max_lines` lines."
    tree = _parse(path)
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return [f"{where}:{n.lineno} ({type(n).__name__}, {n.end_lineno - n.lineno + 1} lines)"
            for n in ast.walk(tree)
            if isinstance(n, (ast.List, ast.Tuple, ast.Dict, ast.Set)) and n.end_lineno - n.lineno + 1 > max_lines]

def test_no_long_literal_collections_in_code():
    bad = [hit for p in _sources(PKG) for hit in long_literals(p)]
    assert not bad, (f"literal collections longer than {MAX_LINES} lines belong in vlbias_nb/resources/ "
                     "(read through vlbias_nb.resources): " + "; ".join(bad))

def test_the_scan_finds_a_long_literal(tmp_path):
    p = tmp_path / "probe.py"
    p.write_text("def f():\n    return {'a': [\n" + "".join(f"        {i},\n" for i in range(45)) + "    ]}\nY = (1,\n 2)\n")
    assert long_literals(p) == ["probe.py:2 (Dict, 47 lines)", "probe.py:2 (List, 47 lines)"]   # nested ones too

def _name_patterns(path) -> set[str]:
    "Every string constant of `path`, and every f-string with its `{...}` parts as `*` (a glob pattern)."
    out = set()
    for n in ast.walk(_parse(path)):
        if isinstance(n, ast.Constant) and isinstance(n.value, str): out.add(n.value)
        elif isinstance(n, ast.JoinedStr):
            pat = "".join(v.value if isinstance(v, ast.Constant) else "*" for v in n.values)
            if not pat.startswith("*") and len(pat.replace("*", "")) >= 6: out.add(pat)
    return out

def test_every_resource_is_read_by_code_or_tests():
    "A resource counts as read when its path under resources/ is named (or matched by an f-string) in package or test code."
    patterns = set()
    for p in _sources(PKG) + _sources(TESTS):
        if p.name != "test_data_in_files.py": patterns |= _name_patterns(p)
    files = sorted(str(f.relative_to(RES)) for f in RES.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
    assert len(files) > 3
    orphans = [f for f in files if not any(f == s or fnmatch.fnmatchcase(f, s) for s in patterns if "/" in s or "." in s)]
    assert not orphans, f"files in vlbias_nb/resources/ that no code or test reads: {orphans}"

def test_every_paper_items_file_belongs_to_a_paper(monkeypatch):
    "report.paper_items reads resources/paper_items/<slug>.csv for each paper of papers.csv: no other file there is read."
    from vlbias_nb.report import paper_items
    read = []
    monkeypatch.setattr(resources, "resource_path", lambda name, _f=resources.resource_path: read.append(name) or _f(name))
    from vlbias_nb.report import stated_tolerance
    paper_items(); stated_tolerance("LIC", "Tab. 1", "x")            # the stated tolerances (the ledger's agreement rule)
    on_disk = {f"paper_items/{f.name}" for f in (RES / "paper_items").glob("*.csv")}
    assert on_disk and on_disk <= set(read), f"paper item files nothing reads: {sorted(on_disk - set(read))}"

@pytest.mark.parametrize("loader", LOADERS, ids=lambda f: f.__name__)
def test_loader_names_a_missing_file(loader):
    with pytest.raises(MissingDataError, match=r"Missing package resource 'no_such/file\.x'.*vlbias_nb/resources"):
        loader("no_such/file.x")

@pytest.mark.parametrize("loader,text,what", [(read_resource_json, "{oops", "JSON"), (read_resource_yaml, "a: [1, 2", "YAML"),
                                              (read_resource_csv, 'a,b\n"x,1\n', "CSV"), (read_word_list, b"\xff\xfe\xfa", "UTF-8 text")],
                         ids=["json", "yaml", "csv", "txt"])
def test_loader_names_a_malformed_file(loader, text, what, tmp_path, monkeypatch):
    monkeypatch.setattr(resources, "RESOURCES", tmp_path)
    f = tmp_path / "sub" / "bad.file"; f.parent.mkdir()
    f.write_bytes(text.encode() if isinstance(text, str) else text)
    with pytest.raises(ResourceError, match=rf"Package resource 'sub/bad\.file' \(.*bad\.file\) is not valid {what}"):
        loader("sub/bad.file")

def test_word_list_skips_blanks_and_comments(tmp_path, monkeypatch):
    monkeypatch.setattr(resources, "RESOURCES", tmp_path)
    (tmp_path / "w.txt").write_text("# header\nman\n\n  woman  # trailing comment\n")
    assert read_word_list("w.txt") == ["man", "woman"]

def test_known_answer_names_a_missing_key():
    assert known_answer("prompt_array.debias_itc.after_over_before_at_most")["maxskew"] == 0.5
    with pytest.raises(KeyError, match="'prompt_array.nope'"): known_answer("prompt_array.nope")

# --- the collections moved out of the code keep their values -----------------------------------------------------------
# sha256 of json.dumps(value) (key order included), taken from the Python literals before they were moved to files.
MOVED = {
    "vlbias_nb.papers.gab.activities.DEFAULT_GAB_ACTIVITIES": "997acafb3c994d7822c3c8c53c2b2cefa209015a5ab69caf767f88253ba885da",
    "vlbias_nb.run.profiles.PROFILES": "b9a73038976b022255fbe298078540f6c846adb540e63eef87e48fde6cd2553c",
    "vlbias_nb.text.GENSYNTH_WORD_TABLE": "73bc03a12a2f02f33ac9e07ef5f0eeb80ae02905ba93634c54adce87f3d35994",
    "vlbias_nb.text.GENSYNTH_PLURAL_ROWS": "71d5f6a5197b7e9b2751fc2de42832d94dbe0cf812306745ef65fc5f56b3ff96",
    "vlbias_nb.text.LIC_FEMININE": "0f8bc6bda71773c78111bb9bf00a924cca80f10ee00ba8a2e692202a2ef079d3",
    "vlbias_nb.text._IRREGULAR_PLURALS": "bc335fd7d6ee661bbd002af17c615011ec54f61814c3d3226f7afb7b73eed6f9",
    "vlbias_nb.text.LIC_MASCULINE": "830a89534d9b5c7bd58263a8b11c9c66b384580be4a24e0be230f20e2fa20c5c",
    "vlbias_nb.methods.downstream.CLIP_CIFAR_TEMPLATES": "20da23be985f68bbf154008b0d1af16c8537d898a2c345e7383a749cc973f905",
    "vlbias_nb.methods.downstream.CLIP_CALTECH_TEMPLATES": "245d8882ac2c473cdfc4d53da61cdfd5b5bc7c101c7130679f76e763da883aeb",
}

# Since the move, the parameter vocabulary (resources/parameters.csv) renamed seven profile keys; undone here, in place.
RENAMED_SINCE = [(("full", "parameters"), "model", "clip_model"),
                 (("full", "notebooks", "coco_spurious_clusters"), "n_blas_threads", "n_threads"),
                 (("full", "notebooks", "gensynth_editing"), "diffusion_pipeline", "edit_pipeline"),
                 (("full", "notebooks", "gensynth_editing"), "models", "bench_models"),
                 (("full", "notebooks", "prompt_array"), "model", "bias_model"),
                 (("full", "notebooks", "gab"), "diffusion_pipeline", "diffusion_model"),
                 (("full", "notebooks", "social_counterfactuals"), "diffusion_pipeline", "pipeline")]

# Keys added since (new parameters wired into the full profile); removed here before hashing.
ADDED_SINCE = [(("full", "notebooks", "coco_spurious_clusters"), "cluster_captions"),      # GenSynth: cluster COCO train (issue 22)
               (("full", "notebooks", "gensynth_editing"), "imagenet_root"),               # GenSynth: Tab. 3's ImageNet column (issue 22)
               (("full", "notebooks", "gab"), "fid_target"),                              # GAB: §4.3.1 per-image FID filter (issue 22)
               (("full", "notebooks", "gab"), "fid_outlier_iqr"),                         # GAB: §4.3.1 filter by outliers, not the paper's result (issue 31)
               (("full", "notebooks", "prompt_array"), "tab2_models"),                    # Prompt Array: Tab. 2's four CLIP models (issue 22)
               (("full", "notebooks", "prompt_array"), "fig4_models"),                    # Prompt Array: Fig. 4's three CLIP models (issue 22)
               (("full", "notebooks", "prompt_array"), "tab4_model_steps"),               # Prompt Array: Tab. 4's λ = 0 runs' length (issue 36)
               ((), "rehearsal"),                                                         # the rehearsal profile (issue 23)
               (("full", "notebooks", "social_counterfactuals"), "p2p_variant"),          # SocialCounterfactuals: Brooks et al.'s generator (issue 31)
               (("full", "notebooks", "social_counterfactuals"), "cfg_range"),            # SocialCounterfactuals: CFG ~ U(7.5, 15) per set (issue 31)
               (("full", "notebooks", "tfidf_table1"), "n_random_feature_runs"),          # GenSynth: Tab. 1's random-feature row, 20 runs (issue 31)
               (("full", "notebooks", "prompt_array"), "keep_best"),                      # Prompt Array: App. F's early stopping only (issue 31)
               *[(("full", "notebooks", "lic"), k) for k in ("release_runs", "release_epochs", "release_lr", "release_hidden_dim",
                                                            "release_batch_size", "release_human_captions_per_image")]]   # LIC on the released captions (issue 30)

# Values changed since (a fidelity fix); their old value is put back here before hashing.
CHANGED_SINCE = [(("full", "notebooks", "gab"), "fid_model", "inception_v3")]              # GAB: the standard FID network (issue 22)

def _before_renames(profiles):
    import copy
    out = copy.deepcopy(profiles)
    for path, key in ADDED_SINCE:
        d = out
        for k in path: d = d[k]
        d.pop(key)
    for path, key, old in CHANGED_SINCE:
        d = out
        for k in path: d = d[k]
        d[key] = old
    for path, new, old in RENAMED_SINCE:
        d = out
        for k in path: d = d[k]
        d.update({(old if k == new else k): v for k, v in [(k, d.pop(k)) for k in list(d)]})
    return out

@pytest.mark.parametrize("qualname", MOVED)
def test_moved_collection_kept_its_value(qualname):
    import importlib
    mod, name = qualname.rsplit(".", 1)
    value = getattr(importlib.import_module(mod), name)
    if name == "PROFILES": value = _before_renames(value)
    assert hashlib.sha256(json.dumps(value).encode()).hexdigest() == MOVED[qualname]

def test_profiles_keep_python_types():
    "YAML floats stay floats (`2e-5` without a dot would be a string in YAML 1.1), booleans booleans, empty strings strings."
    from vlbias_nb.run.profiles import PROFILES
    pa, sc = PROFILES["full"]["notebooks"]["prompt_array"], PROFILES["full"]["notebooks"]["social_counterfactuals"]
    assert pa["lr_model"] == 2e-5 and isinstance(pa["lr_model"], float) and pa["fit_planted"] is False
    assert sc["gen_occupations"] == "" and sc["filter_keep_fraction"] == 0.0

def test_resources_ship_in_the_wheel():
    "MANIFEST.in and setup.py's package_data both name vlbias_nb/resources, so sdist and wheel carry every file."
    assert "recursive-include vlbias_nb/resources *" in (ROOT / "MANIFEST.in").read_text()
    assert "'resources/**/*'" in (ROOT / "setup.py").read_text()


def test_no_plural_words_kept():
    from vlbias_nb.text import _NO_PLURAL
    assert _NO_PLURAL == {"pregnant", "she", "her", "hers", "herself", "he", "his", "him", "himself"}

def test_word_lists_name_their_source():
    "Every word list under resources/words/ opens with a `#` comment naming the paper (or repository) it comes from."
    files = sorted((RES / "words").glob("*"))
    assert files
    for f in files:
        first = f.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# ") and any(w in first for w in ("Tab.", "App.", "Sec.", "§", "repository")), (f.name, first)

"""The ledger means what it says (issue #31): over the published ledgers (`figures/*/ledger.csv`) and the tables each run
publishes beside its ledger (`figures/<name>/*.csv`),

(a) every row with status "reproduced" passes `vlbias_nb.report.agreement` (the paper's printed precision read from
    its printed text `paper_printed`, the tolerance stated with its reason in `resources/paper_items/tolerances.csv`,
    or — a sampled quantity only — an informative 95 % interval) and has no `departs`; every "partly reproduced" row
    passes it too and has a `departs` (issue #40: no row agrees through an interval on a deterministic quantity, nor
    through an interval that is not informative; an "inconclusive" row is one whose interval is not informative);
(b) no ledger row that stands beside the paper (status "reproduced", or `comparable` true) reports a number that a
    table of the same run publishes in a row marked `comparable == False`.

Ledgers published before the columns `evidence`, `tolerance`, `departs` existed are judged too:
`report.published_ledgers` fills them with '' and the agreement is recomputed here from ours, paper and the interval.

The figures roots are a parameter: `VLBIAS_LEDGER_FIGURES` (paths separated by os.pathsep; default the checkout's
`figures/`), so the same checks run on smoke-run output folders, e.g. after
`vlbias run tfidf_table1 --profile smoke --out /tmp/me/tfidf_table1`:
`VLBIAS_LEDGER_FIGURES=/tmp/me python -m pytest -q -n 0 tests/test_ledger_honesty.py`.
The checker itself is tested on small planted figures folders (a contradiction, a missed tolerance, and the near
misses that must not raise an alarm).
"""
import math
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from vlbias_nb.paths import project_root
from vlbias_nb.report import (COMPARABILITY_REASONS, agreement, published_ledgers, stated_tolerance, with_ledger_comparability,
                               SAMPLING_KINDS)

REL = 1e-9   # "the same number": equal within this relative difference


def figures_roots() -> list[Path]:
    "The figures roots to judge: $VLBIAS_LEDGER_FIGURES (os.pathsep-separated) or the checkout's figures/."
    env = os.environ.get("VLBIAS_LEDGER_FIGURES", "").strip()
    return [Path(p) for p in env.split(os.pathsep) if p.strip()] if env else [project_root() / "figures"]


def _finite(v) -> bool:
    try: return v is not None and not isinstance(v, bool) and math.isfinite(float(v))
    except (TypeError, ValueError): return False


def _same(a, b) -> bool:
    "Whether two numbers are the same within `REL` relative difference (exactly equal when one is 0)."
    a, b = float(a), float(b)
    return abs(a - b) <= REL * max(abs(a), abs(b))


def _text(v) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v).strip()


def _false(v) -> bool:
    "A `comparable` cell that says no (False, 'False', 0)."
    return _text(v).lower() in ("false", "0", "0.0", "no")


_HALF = re.compile(r"printed precision \(±([0-9.eE+-]+)\)")

def _digits(row) -> int | None:
    """The decimals the row's agreement used when it was measured by printed precision (`tolerance` says
    'within the paper's printed precision (±h)': h = half a unit of the last decimal); else None (read from the paper)."""
    m = _HALF.search(_text(row.get("tolerance")))
    return None if not m else int(round(-math.log10(2 * float(m.group(1)))))


def ledger_folders(root) -> dict[Path, str]:
    """The folders under `root` that hold a ledger.csv beside the run's tables, with the analysis each belongs to: the
    published layout `figures/<name>/ledger.csv`, and a run's output `--out DIR`: `DIR/<name>/tables/ledger.csv` (or
    one level deeper, when DIR is itself `<root>/<name>`)."""
    root, found = Path(root), {}
    for pattern in ("*/ledger.csv", "*/tables/ledger.csv", "*/*/tables/ledger.csv"):
        for f in sorted(root.glob(pattern)):
            found[f.parent] = f.parent.parent.name if f.parent.name == "tables" else f.parent.name
    return found


def ledger_rows(root) -> pd.DataFrame:
    """Every ledger row under `root` (`ledger_folders`), read by `report.published_ledgers` (which fills the columns an
    older ledger lacks with ''), with `analysis` and `folder` (where the run's tables are)."""
    frames = []
    for folder, name in ledger_folders(root).items():
        t = published_ledgers(folder.parent)
        frames.append(t[t.analysis == folder.name].assign(analysis=name, folder=str(folder)))
    return pd.concat(frames, ignore_index=True) if frames else published_ledgers(Path(root) / "__none__").assign(folder="")


def _sampling(row):
    "The row's `sampling` (None: deterministic — also for a ledger published before the column existed) and `runs`."
    s = _text(row.get("sampling")) or None
    return s, (int(float(row["runs"])) if s == "runs" and _finite(row.get("runs")) else None)


def reproduced_misses(figures) -> list[str]:
    """Rule (a) over the ledgers under `figures`: every 'reproduced' row passes `agreement` — its paper value as printed,
    stated tolerance, interval judged as its `sampling` says (never for a deterministic quantity; only when informative
    for a sampled one) — and has no `departs`; every 'partly reproduced' row passes it and has a `departs`; an
    'inconclusive' row's agreement is inconclusive. One message per row that does not."""
    rows = ledger_rows(figures)
    out = []
    for r in rows[rows.status.isin(["reproduced", "partly reproduced", "inconclusive"])].to_dict("records"):
        where = f"{r['analysis']}/ledger.csv: {r['paper_name']} {r['item']} / {r['quantity']!r}"
        st = r["status"]
        if st == "reproduced" and _text(r.get("departs")):
            out.append(f"{where}: marked reproduced but departs from the paper ({r['departs']}): at most 'partly reproduced'")
            continue
        if st == "partly reproduced" and not _text(r.get("departs")):
            out.append(f"{where}: marked partly reproduced without saying how it departs from the paper (`departs`)")
            continue
        if not (_finite(r["ours"]) and _finite(r["paper"])):
            out.append(f"{where}: marked {st} without both numbers (ours {r['ours']!r}, paper {r['paper']!r})")
            continue
        sampling, runs = _sampling(r)
        if sampling not in SAMPLING_KINDS:
            out.append(f"{where}: sampling {sampling!r} is none of {list(SAMPLING_KINDS)}")
            continue
        if sampling == "runs" and runs is None:
            out.append(f"{where}: sampling 'runs' without the number of runs")
            continue
        ci = (r["ci_low"], r["ci_high"]) if _finite(r["ci_low"]) and _finite(r["ci_high"]) else None
        paper = _text(r.get("paper_printed")) or r["paper"]
        chance = r["chance"] if _finite(r.get("chance")) else None
        ok, how = agreement(r["ours"], paper, ci, _digits(r), stated_tolerance(r["paper_name"], r["item"], r["quantity"]),
                            sampling, runs, chance)
        if st == "inconclusive" and ok is not None:
            out.append(f"{where}: ours {r['ours']:.6g} vs paper {paper} is marked inconclusive but the rule says "
                       f"{'agrees' if ok else 'differs'}: {how}")
        elif st != "inconclusive" and not ok:
            out.append(f"{where}: ours {r['ours']:.6g} vs paper {paper} is marked {st} but lies {how}")
    return out


def _model_matches(table_model, ledger_model) -> bool:
    "Same model: equal, or one names the other (a table's 'TF-IDF' and the ledger's 'none (model-free): TF-IDF'); unknown matches."
    t, l = _text(table_model).lower(), _text(ledger_model).lower()
    return not t or not l or t == l or t in l or l in t


def _significant_digits(v: float) -> int:
    "Significant digits of `v` as its shortest repr prints it: -5.7 → 2, 0.2871 → 4, 0.07948127861632856 → 16."
    m = repr(abs(float(v))).lower().split("e")[0].replace(".", "").lstrip("0")
    return len(m.rstrip("0")) or 1


def _numeric_cells(row: dict, cols) -> list[tuple[str, float]]:
    return [(c, float(row[c])) for c in cols if _finite(row.get(c))]


def table_contradictions(figures) -> list[str]:
    """Rule (b) over the runs under `figures`: a ledger row that stands beside the paper (status 'reproduced', or
    `comparable` true) must not report a number that a table of the same run (a CSV beside its ledger.csv with a
    `comparable` column) publishes in a row with `comparable == False`.

    A table row holds the ledger's number when (all of):
    * the same number (within 1e-9 relative) is in its `ours` column — or, for a table without one, in any numeric column;
    * its `model` (where the table has that column) is the ledger row's model (equal, or one names the other); a
      `models` column (a comma-separated list) must name it;
    * its `paper` (where the table has that column and a value) is the ledger row's paper number;
    * for a whole number or zero (counts and zeros coincide by chance), the table has `ours` and `paper` columns and
      both matched: the table states the same comparison;
    * in a table without `ours`, a number printed with fewer than 4 significant digits (-5.7, 79.4: such rounded values
      coincide by chance) matches only in a row whose `model` names the ledger row's model.
    Rows that publish the paper's own numbers (reason "the paper's own numbers") hold no number of ours and are skipped.
    One message per (ledger row, table row) pair that contradicts."""
    rows = ledger_rows(figures)
    rows = with_ledger_comparability(rows) if len(rows) else rows.assign(comparable=False)   # reproduced or differs, no `departs`
    out = []
    for (analysis, folder), mine in rows.groupby(["analysis", "folder"]):
        stands = mine[(mine.status == "reproduced") | mine.comparable.astype(bool)]
        stands = stands[stands.ours.map(_finite)]
        if not len(stands): continue
        for f in sorted(Path(folder).glob("*.csv")):
            if f.name == "ledger.csv": continue
            t = pd.read_csv(f, keep_default_na=False, na_values=[""])
            if "comparable" not in t.columns: continue
            t = t[t.comparable.map(_false)]
            if "reason" in t.columns: t = t[t.reason.map(_text) != COMPARABILITY_REASONS["paper"]]
            if not len(t): continue
            has_ours, has_paper, has_model = "ours" in t.columns, "paper" in t.columns, "model" in t.columns
            has_models = "models" in t.columns                 # a row over several models: "tiny-clip, tiny-hf-clip, ..."
            num_cols = ["ours"] if has_ours else [c for c in t.columns if c not in ("comparable", "reason")]
            for trow in t.to_dict("records"):
                cells = _numeric_cells(trow, num_cols)
                for r in stands.to_dict("records"):
                    hit = [c for c, v in cells if _same(v, r["ours"])]
                    if not hit: continue
                    if has_model and not _model_matches(trow.get("model"), r.get("model")): continue
                    if has_models and _text(trow.get("models")) and _text(r.get("model")) and not any(
                            _model_matches(m.strip(), r.get("model")) for m in _text(trow.get("models")).split(",")): continue
                    paper_ok = has_paper and _finite(trow.get("paper")) and _finite(r["paper"]) and _same(trow["paper"], r["paper"])
                    if has_paper and _finite(trow.get("paper")) and not paper_ok: continue
                    v = float(r["ours"])
                    if (v == 0 or float(v).is_integer()) and not (has_ours and paper_ok): continue
                    if (not has_ours and _significant_digits(v) < 4
                            and not (has_model and _text(trow.get("model")) and _text(r.get("model"))
                                     and _model_matches(trow.get("model"), r.get("model")))): continue
                    out.append(f"{analysis}: ledger row {r['paper_name']} {r['item']} / {r['quantity']!r} ({r['status']}, "
                               f"ours {v:.6g}) stands beside the paper, but {f.name} publishes {v:.6g} (column {hit[0]!r}) "
                               f"as not comparable: {_text(trow.get('reason')) or 'no reason given'}")
    return out


# --- the published ledgers (or the roots named in VLBIAS_LEDGER_FIGURES) ------------------------------------------

ROOTS = figures_roots()

@pytest.mark.parametrize("root", ROOTS, ids=str)
def test_reproduced_rows_pass_their_tolerance(root):
    if not ledger_folders(root): pytest.skip(f"no ledger under {root}")
    bad = reproduced_misses(root)
    assert not bad, f"{len(bad)} ledger row(s) marked reproduced that miss their tolerance:\n" + "\n".join(bad)


@pytest.mark.parametrize("root", ROOTS, ids=str)
def test_no_ledger_table_contradiction(root):
    if not ledger_folders(root): pytest.skip(f"no ledger under {root}")
    bad = table_contradictions(root)
    assert not bad, f"{len(bad)} ledger/table contradiction(s):\n" + "\n".join(bad)


# --- the checker on planted figures folders -------------------------------------------------------------------

OLD_COLUMNS = ["paper_name", "item", "quantity", "status", "ours", "paper", "delta", "planted", "chance", "ci_low",
               "ci_high", "model", "data", "needs", "note", "comparable", "reason"]   # a ledger published before evidence/tolerance/departs

def _row(quantity, status, ours, paper, ci=(np.nan, np.nan), model="m", comparable=True, chance=np.nan, **kw):
    return dict(paper_name="GenSynth", item="Tab. 6", quantity=quantity, status=status, ours=ours, paper=paper,
                delta=ours - paper, planted=np.nan, chance=chance, ci_low=ci[0], ci_high=ci[1], model=model, data="d",
                needs="", note="", comparable=comparable, reason="", **kw)

def _write(root: Path, analysis: str, ledger: list[dict], tables: dict | None = None, columns=None):
    d = root / analysis
    d.mkdir(parents=True)
    t = pd.DataFrame(ledger)
    (t[columns] if columns else t).to_csv(d / "ledger.csv", index=False)
    for name, df in (tables or {}).items(): pd.DataFrame(df).to_csv(d / f"{name}.csv", index=False)


def test_misses_found_in_an_old_ledger(tmp_path):
    """A ledger without the new columns: the agreement is recomputed; a miss is found, and — with no `sampling` column,
    every number is read as deterministic (issue #40) — so is a row that only an interval covers."""
    _write(tmp_path, "old", [_row("miss: 1220 vs 1275", "reproduced", 1220.0, 1275.0),
                             _row("covered by the interval", "reproduced", 26.1, 27.9, ci=(20.8, 28.2)),
                             _row("printed precision", "reproduced", 0.2349, 0.23),
                             _row("interval excludes", "reproduced", 0.0795, 0.06, ci=(0.0787, 0.0803)),
                             _row("a miss not marked reproduced", "needs full profile", 1.0, 2.0)], columns=OLD_COLUMNS)
    bad = reproduced_misses(tmp_path)
    assert len(bad) == 3, bad
    assert any("1220" in b and "1275" in b for b in bad) and any("0.0795" in b for b in bad)
    assert any("'covered by the interval'" in b and "never agreement" in b for b in bad)


def test_departs_and_digits_in_a_new_ledger(tmp_path):
    "New columns: `departs` on a reproduced row fails; `digits` recorded in `tolerance` (±0.05 → 1 decimal) is honoured."
    _write(tmp_path, "new", [_row("departs", "reproduced", 5.0, 5.0, evidence="own pipeline", tolerance="", departs="MiniLM, not RoBERTa"),
                             _row("one decimal printed", "reproduced", 0.2335, 0.2, evidence="own pipeline",
                                  tolerance="within the paper's printed precision (±0.05)", departs=""),
                             _row("three decimals printed", "reproduced", 0.2335, 0.2, evidence="own pipeline",
                                  tolerance="within the paper's printed precision (±0.0005)", departs="")])
    bad = reproduced_misses(tmp_path)
    assert len(bad) == 2, bad
    assert "departs" in bad[0] and "three decimals printed" in bad[1]


def test_stated_tolerance_is_read_from_the_resources(tmp_path, monkeypatch):
    "A row within a tolerance stated (with its reason) in paper_items/tolerances.csv passes; the same item's row beyond it fails."
    import vlbias_nb.report as report
    planted = pd.DataFrame([dict(paper_name="GenSynth", item="Tab. 6", quantity="*", tolerance=2.0, reason="planted: run-to-run spread")])
    monkeypatch.setattr(report, "tolerances", lambda: planted)
    _write(tmp_path, "tol", [_row("within 2", "reproduced", 11.5, 10.0), _row("beyond 2", "reproduced", 12.5, 10.0)], columns=OLD_COLUMNS)
    bad = reproduced_misses(tmp_path)
    assert len(bad) == 1 and "beyond 2" in bad[0] and "stated tolerance ±2" in bad[0], bad


def test_intervals_judged_by_what_they_measure(tmp_path):
    """Issue #40: an interval never makes a deterministic quantity agree; a sampled one agrees through its interval only
    when it is informative (>= 3 runs, and excluding chance or within 10 % of the paper's value); an uninformative one
    is 'inconclusive', never 'reproduced' nor 'partly reproduced'; the paper's value is read as printed ("134.0")."""
    _write(tmp_path, "iv", [
        _row("ratio through a bootstrap interval", "reproduced", 2.234, 2.18, ci=(2.1, 2.4), evidence="released outputs",
             tolerance="", departs="", sampling="", runs=np.nan, paper_printed="2.18"),
        _row("two runs", "reproduced", -0.96, 8.7, ci=(-64.8, 62.9), evidence="own pipeline", tolerance="", departs="",
             sampling="runs", runs=2, paper_printed="8.7"),
        _row("two runs, other data", "partly reproduced", -0.96, 8.7, ci=(-64.8, 62.9), evidence="own pipeline", tolerance="",
             departs="val only", sampling="runs", runs=2, paper_printed="8.7"),
        _row("CIDEr printed 134.0", "reproduced", 133.8, 134.0, evidence="released outputs", tolerance="", departs="",
             sampling="", runs=np.nan, paper_printed="134.0"),
        _row("two runs, marked inconclusive", "inconclusive", -0.96, 8.7, ci=(-64.8, 62.9), evidence="own pipeline",
             tolerance="", departs="", sampling="runs", runs=2, paper_printed="8.7"),
        _row("five runs, informative", "reproduced", 8.5, 8.7, ci=(8.0, 9.1), evidence="own pipeline", tolerance="",
             departs="", sampling="runs", runs=5, paper_printed="8.7"),
        _row("bootstrap excluding chance", "reproduced", 0.66, 0.7, ci=(0.52, 0.8), chance=0.5, evidence="released outputs",
             tolerance="", departs="", sampling="bootstrap", runs=np.nan, paper_printed="0.70"),
        _row("wrongly inconclusive", "inconclusive", 8.71, 8.7, ci=(0.0, 20.0), evidence="own pipeline", tolerance="",
             departs="", sampling="runs", runs=2, paper_printed="8.7")])
    bad = reproduced_misses(tmp_path)
    flagged = sorted(q for q in ("ratio through a bootstrap interval", "two runs", "two runs, other data", "CIDEr printed 134.0",
                                 "two runs, marked inconclusive", "five runs, informative", "bootstrap excluding chance",
                                 "wrongly inconclusive") if any(f"{q!r}" in b for b in bad))
    assert flagged == sorted(["ratio through a bootstrap interval", "two runs", "two runs, other data", "CIDEr printed 134.0",
                              "wrongly inconclusive"]), bad
    assert any("never agreement" in b for b in bad) and any("from 2 runs; at least 3 are needed" in b for b in bad)


def test_contradiction_found_and_near_misses_not(tmp_path):
    "The classifier-AUC case: the ledger says comparable, a table of the same run says not comparable for the same number."
    ledger = [_row("text AUC", "reproduced", 79.4, 78.0, ci=(75.6, 83.1), model="MiniLM"),
              _row("a count", "reproduced", 14.0, 14.0, model="none (model-free)"),
              _row("partly", "partly reproduced", 3.8, 19.7, comparable=False)]
    tables = {"classifier_auc": dict(data=["planted", "COCO"], classifier=["a", "text"], ours=[68.3, 79.4], paper=[np.nan, 78.0],
                                     comparable=[False, False], reason=["planted", "a different classifier"]),
              # near misses, none a contradiction: comparable, another model, another paper number, a count without the paper's,
              # the not-comparable ledger row's own number
              "same_but_comparable": dict(ours=[79.4], paper=[78.0], comparable=[True], reason=[""]),
              "other_model": dict(model=["tiny-clip"], ours=[79.4], paper=[78.0], comparable=[False], reason=["random weights"]),
              "other_models": dict(models=["tiny-clip, tiny-flava"], ours=[79.4], paper=[78.0], comparable=[False], reason=["random weights"]),
              "other_paper": dict(ours=[79.4], paper=[63.4], comparable=[False], reason=["other item"]),
              "count_coincidence": dict(n_images=[14], comparable=[False], reason=["data"]),
              "partly_number": dict(ours=[3.8], paper=[19.7], comparable=[False], reason=["MiniLM"])}
    _write(tmp_path, "run_a", ledger, tables)
    _write(tmp_path, "run_b", [_row("elsewhere", "reproduced", 0.123456, 0.12, model="x")],
           {"t": dict(value=[79.4, 0.5], comparable=[False, False], reason=["", ""])})   # 79.4 of another run: no alarm
    bad = table_contradictions(tmp_path)
    assert len(bad) == 1, bad
    assert "run_a" in bad[0] and "classifier_auc.csv" in bad[0] and "79.4" in bad[0]


def test_contradiction_in_a_table_without_ours(tmp_path):
    "A table without an `ours` column (a wide table) is searched in every numeric column; whole numbers are not matched there."
    _write(tmp_path, "wide", [_row("maxskew", "reproduced", 0.2871, 0.29, model="ViT-B-16/openai"),
                              _row("count", "reproduced", 8.0, 8.0, model="")],
           {"tab3": dict(model=["ViT-B-16/openai"], maxskew=[0.2871], n=[8], comparable=[False], reason=["smoke"])})
    bad = table_contradictions(tmp_path)
    assert len(bad) == 1 and "maxskew" in bad[0], bad


def test_rounded_numbers_and_paper_tables_are_no_alarm(tmp_path):
    """The false alarm the published figures gave: ours -5.7 (one decimal) equals another cluster's ΔM in the table of
    the paper's own numbers. Neither that table nor a rounded value in a table without `ours` and without the model is a
    contradiction; the same rounded value in a wide table naming the model is."""
    _write(tmp_path, "r", [_row("animals", "reproduced", -5.7, -2.9, ci=(-15.5, 3.0), model="MiniLM")],
           {"paper_tab6": dict(paper_name=["x"], delta_m=[-5.7], comparable=[False], reason=[COMPARABILITY_REASONS["paper"]]),
            "wide_no_model": dict(cluster=[3], delta_m=[-5.7], comparable=[False], reason=["pipeline check"])})
    assert table_contradictions(tmp_path) == []
    _write(tmp_path / "w", "r", [_row("animals", "reproduced", -5.7, -2.9, ci=(-15.5, 3.0), model="MiniLM")],
           {"wide_model": dict(model=["MiniLM"], delta_m=[-5.7], comparable=[False], reason=["val only"])})
    assert len(table_contradictions(tmp_path / "w")) == 1
    assert [_significant_digits(v) for v in (-5.7, 0.2871, 79.4, 1220.0, 0.0)] == [2, 4, 3, 3, 1]


def test_checker_can_fail_on_a_published_style_pair(tmp_path):
    "Removing the contradiction (the table's row made comparable) clears the alarm: the checker depends on `comparable`."
    tables = {"auc": dict(ours=[79.4], paper=[78.0], comparable=[False], reason=["x"])}
    _write(tmp_path / "a", "r", [_row("q", "reproduced", 79.4, 78.0, ci=(75.6, 83.1))], tables)
    tables["auc"]["comparable"] = [True]
    _write(tmp_path / "b", "r", [_row("q", "reproduced", 79.4, 78.0, ci=(75.6, 83.1))], tables)
    assert len(table_contradictions(tmp_path / "a")) == 1 and table_contradictions(tmp_path / "b") == []


def test_run_output_layout(tmp_path):
    "A run's output (`vlbias run NAME --out DIR`: DIR/NAME/tables/ledger.csv) is judged like a published folder."
    run = tmp_path / "tfidf_table1"
    _write(run, "tfidf_table1", [_row("q", "reproduced", 79.4, 78.0, ci=(75.6, 83.1))],
           {"auc": dict(ours=[79.4], paper=[78.0], comparable=[False], reason=["x"])})
    (run / "tfidf_table1").rename(run / "tables"); run.rename(tmp_path / "x"); (tmp_path / "tfidf_table1").mkdir()
    (tmp_path / "x").rename(tmp_path / "tfidf_table1" / "tfidf_table1")          # DIR/NAME/NAME/tables/ledger.csv
    assert list(ledger_folders(tmp_path / "tfidf_table1").values()) == ["tfidf_table1"]
    assert list(ledger_folders(tmp_path).values()) == ["tfidf_table1"]
    bad = table_contradictions(tmp_path / "tfidf_table1")
    assert len(bad) == 1 and bad[0].startswith("tfidf_table1:"), bad
    _write(tmp_path / "miss", "r", [_row("q", "reproduced", 1.0, 2.0)], columns=OLD_COLUMNS)
    assert len(reproduced_misses(tmp_path / "miss")) == 1


def test_figures_roots_parameter(monkeypatch, tmp_path):
    monkeypatch.setenv("VLBIAS_LEDGER_FIGURES", f"{tmp_path / 'x'}{os.pathsep}{tmp_path / 'y'}")
    assert figures_roots() == [tmp_path / "x", tmp_path / "y"]
    monkeypatch.delenv("VLBIAS_LEDGER_FIGURES")
    assert figures_roots() == [project_root() / "figures"]


def test_paper_values_keep_the_print():
    "Issue #40: the paper's values are kept as printed, so '48.0' is read as ±0.05 (the float 48.0 would give ±0.5)."
    from vlbias_nb.report import paper_values, printed_decimals
    lic = paper_values("LIC", "Tab. 1").set_index(["model", "metric"]).printed
    assert (lic["OSCAR", "CIDEr"], lic["UpDn", "LIC_M"], lic["UpDn", "LIC"], lic["Transformer", "Ratio"]) == ("134.0", "48.0", "9.0", "2.18")
    gab = paper_values("GAB", "Tab. 1", model="NegCLIP-ViT-B-32").set_index("data").printed
    assert gab.to_dict() == {"phaze1": "0.70", "phaze2": "0.60", "phaze3": "0.75"}
    assert [printed_decimals(x) for x in (lic["OSCAR", "CIDEr"], gab["phaze1"])] == [1, 2]
    assert agreement(133.80, lic["OSCAR", "CIDEr"])[0] is False and agreement(2.234, lic["Transformer", "Ratio"], ci=(2.1, 2.4))[0] is False

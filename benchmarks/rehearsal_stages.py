"""The full profile's first cost baseline (issue 23): per notebook and stage, what a rehearsal run spent.

    vlbias reproduce --profile rehearsal --out runs/rehearsal      # or: vlbias run NAME --profile rehearsal
    python benchmarks/rehearsal_stages.py runs/rehearsal [--markdown]

Reads every `run.json` under the folder (`stage_summary`, written by the runner from the notebooks' `timed_stage`
blocks) and prints one row per notebook and stage: items, seconds, items/s and peak resident memory (and CUDA memory on
a GPU), plus the device and the run's wall time. The rehearsal builds the real architectures at random weights (same
FLOPs as the pretrained ones) on a few items, so items/s is a per-item cost at the real sizes, except where
profiles.yaml's `substitutions` reduce a size (listed under the table). Last line: the total seconds of timed stages.
"""
import argparse, json, sys
from pathlib import Path

def rows(folder: Path):
    for f in sorted(folder.rglob("run.json")):
        if "failed" in f.parts or ".staging" in str(f): continue
        rec = json.loads(f.read_text())
        dev = rec.get("device", {})
        dev = (dev.get("gpu") or dev.get("used") or "?") if isinstance(dev, dict) else str(dev)
        for s in rec.get("stage_summary", []):
            yield dict(notebook=rec.get("notebook", f.parent.name), profile=rec.get("profile", ""), run_seconds=rec.get("seconds"),
                       device=dev, **s)

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="a runs folder (vlbias ... --out DIR), searched for run.json files")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table (for the guide page nbs/guide/profiles.md)")
    a = ap.parse_args(argv)
    folder = Path(a.folder)
    if not folder.is_dir(): sys.exit(f"error: {folder} is not a folder of runs (give the --out folder of a rehearsal run)")
    rs = list(rows(folder))
    if not rs: sys.exit(f"error: no run.json with timed stages under {folder}: run `vlbias run NAME --profile rehearsal --out {folder}` first")
    cols = ["notebook", "stage", "records", "items", "seconds", "items_per_s", "peak_rss_mb", "peak_cuda_mb"]
    fmt = lambda v: "" if v is None else f"{v:,.3g}" if isinstance(v, float) and v < 100 else f"{v:,.0f}" if isinstance(v, (int, float)) else str(v)
    if a.markdown:
        print("| " + " | ".join(cols) + " |"); print("|" + "---|" * len(cols))
        for r in rs: print("| " + " | ".join(fmt(r.get(c)) for c in cols) + " |")
    else:
        w = [max(len(c), *(len(fmt(r.get(c))) for r in rs)) for c in cols]
        print("  ".join(c.ljust(x) for c, x in zip(cols, w)))
        for r in rs: print("  ".join(fmt(r.get(c)).ljust(x) for c, x in zip(cols, w)))
    devs = sorted({r["device"] for r in rs}); profs = sorted({r["profile"] for r in rs})
    print(f"profile(s): {', '.join(profs)}; device(s): {', '.join(devs)}")
    print(f"timed stages: {sum(r['seconds'] for r in rs):,.1f} s")
    return 0

if __name__ == "__main__": sys.exit(main())

"""The main job's time (issue 36): `vlbias reproduce --profile smoke`, the whole wall time and each notebook's.

    python benchmarks/bench_smoke.py                       # runs vlbias reproduce --profile smoke --out runs/bench_smoke (-j: the cores)
    python benchmarks/bench_smoke.py -j 1 --out /tmp/s     # one notebook at a time
    python benchmarks/bench_smoke.py --read runs/smoke     # reads a finished run's run.json files instead of running

Prints one row per notebook (its wall seconds from its run.json, when it started and finished, relative to the first
start), the sum of the notebooks' seconds, and, when it ran the job itself, the CPU seconds of the job and its
children (user + system; the machine may be shared, so compare CPU as well as wall). The wall time of a read run is
the span from the first notebook's start to the last one's finish. The last line is the total wall time in seconds.
"""
import argparse, json, os, resource, subprocess, sys, time
from datetime import datetime
from pathlib import Path

def read_runs(folder: Path) -> list[dict]:
    "One dict per notebook run.json under `folder` (not failed/ or .staging/): name, seconds, start and finish (epoch s)."
    out = []
    for f in sorted(folder.glob("*/run.json")):
        rec = json.loads(f.read_text())
        end = datetime.strptime(rec["finished"], "%Y-%m-%dT%H:%M:%S").timestamp()
        out.append({"notebook": rec.get("notebook", f.parent.name), "profile": rec.get("profile"), "seconds": float(rec["seconds"]),
                    "start": end - float(rec["seconds"]), "end": end})
    return out

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--read", metavar="DIR", help="a finished reproduce's output folder: report it, run nothing")
    ap.add_argument("--out", default="runs/bench_smoke", help="output folder of the run (default runs/bench_smoke)")
    ap.add_argument("-j", "--jobs", type=int, default=None, help="passed to vlbias reproduce (default: its own, the cores)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="passed to vlbias reproduce")
    a = ap.parse_args(argv)
    wall = cpu = None
    if a.read: folder = Path(a.read)
    else:
        folder = Path(a.out)
        cmd = ["vlbias", "reproduce", "--profile", "smoke", "--out", str(folder)]
        cmd += ["-j", str(a.jobs)] if a.jobs else []
        cmd += ["--only", *a.only] if a.only else []
        print("running: " + " ".join(cmd), flush=True)
        t0 = time.time()
        r = subprocess.run(cmd)
        wall = time.time() - t0
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = ru.ru_utime + ru.ru_stime
        if r.returncode: print(f"vlbias reproduce failed (exit {r.returncode}) after {wall:.0f} s", file=sys.stderr); return r.returncode
    runs = [r for r in read_runs(folder) if r["profile"] in (None, "smoke")]
    if not runs: sys.exit(f"no smoke run.json under {folder}")
    first = min(r["start"] for r in runs)
    print(f"{'notebook':<26}{'seconds':>9}{'start':>8}{'finish':>8}")
    for r in sorted(runs, key=lambda r: -r["seconds"]):
        print(f"{r['notebook']:<26}{r['seconds']:>9.1f}{r['start'] - first:>8.0f}{r['end'] - first:>8.0f}")
    print(f"{'sum of notebooks':<26}{sum(r['seconds'] for r in runs):>9.1f}")
    if cpu is not None: print(f"CPU seconds (user + system, the job and its children): {cpu:.0f}; cores: {os.cpu_count()}")
    total = wall if wall is not None else max(r["end"] for r in runs) - first
    print(f"smoke reproduce: {len(runs)} notebooks, total {total:.0f} s")
    return 0

if __name__ == "__main__": sys.exit(main())

"""How robust is the prompt-array smoke known answer to the seed and the CPU thread count?

Runs the analysis notebook `nbs/analyses/07_prompt_array.ipynb` (smoke profile, planted data) up to and including the
debiasing cell, once per seed, each in its own process with the given number of threads, and checks the notebook's
known answer on the result: MaxSkew and NDKL (all test prompts and the held-out ones) at most half of the fitted
model's, and held-out R@1 at least 80 % of it. Prints one row per seed; the last line is the count of seeds meeting it.

    python benchmarks/bench_prompt_array_seeds.py --seeds 0 1 2 3 4 5 --threads 1
"""
import argparse, json, os, subprocess, sys
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parents[1] / "nbs" / "analyses" / "07_prompt_array.ipynb"
LAST_CELL = "res = train_run(vlm, train_faces, debias_config()"      # the debiasing cell: `before` and `after` exist after it

WORKER = r"""
import json, sys, torch
torch.set_num_threads(int(sys.argv[2]))
cells = [''.join(c['source']) for c in json.load(open(sys.argv[1]))['cells'] if c['cell_type'] == 'code']
ns = {'display': lambda *a, **k: None}
exec(cells[0], ns)                                   # the parameters cell
ns.update(seed=int(sys.argv[3]), out_dir=sys.argv[4])
for src in cells[1:]:
    exec(src, ns)
    if sys.argv[5] in src: break
b, a, res = ns['before'], ns['after'], ns['res']
print(json.dumps({'before': b, 'after': a, 'kept_step': res.best_step}))
"""

def known_answer(b: dict, a: dict) -> bool:
    "The notebook's known-answer check (its assertions after the debiasing cell)."
    return (a["maxskew"] <= 0.5 * b["maxskew"] and a["ndkl"] <= 0.5 * b["ndkl"]
            and a["maxskew_heldout_prompts"] <= 0.5 * b["maxskew_heldout_prompts"] and a["R@1"] >= 0.8 * b["R@1"])

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="/tmp/bench_prompt_array_seeds")
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    met = 0
    for s in args.seeds:
        out = Path(args.out) / f"seed{s}"; out.mkdir(parents=True, exist_ok=True)
        r = subprocess.run([sys.executable, "-c", WORKER, str(NOTEBOOK), str(args.threads), str(s), str(out), LAST_CELL],
                           env=env, capture_output=True, text=True, cwd=str(NOTEBOOK.parent))
        if r.returncode != 0: sys.exit(f"seed {s} failed:\n{r.stderr[-3000:]}")
        d = json.loads(r.stdout.strip().splitlines()[-1]); b, a = d["before"], d["after"]
        ok = known_answer(b, a); met += ok
        print(f"seed {s}: MaxSkew {b['maxskew']:.3f} -> {a['maxskew']:.3f} ({100 * a['maxskew'] / b['maxskew']:.0f} %), "
              f"NDKL {b['ndkl']:.3f} -> {a['ndkl']:.3f} ({100 * a['ndkl'] / b['ndkl']:.0f} %), "
              f"R@1 {b['R@1']:.3f} -> {a['R@1']:.3f} ({100 * a['R@1'] / b['R@1']:.0f} % kept), kept step {d['kept_step']}: "
              f"{'meets' if ok else 'MISSES'} the known answer", flush=True)
    print(f"known answer met on {met} of {len(args.seeds)} seeds ({args.threads} thread(s)): {met} seeds")

if __name__ == "__main__": main()

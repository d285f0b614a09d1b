"""Benchmark (not a test): GenSynth Tab. 1, TF-IDF gender-agnostic row on COCO val 2017, unbalanced.

From the 25,014 real captions and their images' gender labels to Bias@5, Bias@10, MaxSkew@25, MaxSkew@100: remove
gendered words, fit TF-IDF, caption-to-caption retrieval over all 25,014 queries (own image excluded), blockwise.
(The authors' reference script, oxai/debias-gensynth measure_bias.py, takes about 180 s.) Target: <= 6 s wall on
2 cores, peak memory <= 3 GB. Reports the median of the repeats (wall and process CPU time) and the process's peak
resident memory. Needs the shared captions (VLBIAS_DATA). The last printed line is the figure:
`tfidf table1: X.X s wall (peak Y.Y GB)`.

What bounds the peak memory (measured on this machine, issue #35): the resident floor before the computation (Python,
numpy, pandas, scipy, scikit-learn, the captions: about 0.2 GB; it was 0.7 GB while `vlbias_nb.seeds` imported
torch at the top) plus, per thread, one block of queries: the dense float32 score block (block_size x 25,014 items,
4 bytes each) and its top-K temporaries (NaN check, chunk maxima, the sparse rare-term product), about 6 bytes per
query-item in all. So peak ~ floor + n_jobs x block_size x 25,014 x 6 bytes: block 2048 with 2 threads 0.88 GB
(1.33 GB with torch loaded), block 512 (the default since) 0.40 GB, block 256 0.33 GB, with the same per-caption
values (tested: any block size and thread count give identical results) and less CPU time at 512 than at 2048 (the
block fits the caches better). The authors' script peaked at 240 MB in the measurement recorded in issue #35 (it holds
no score block: one query at a time, 180 s); it is not run here (no network to fetch it).

    python benchmarks/bench_tfidf_table1.py [--repeats 3] [--n-jobs 2] [--block-size 512]
"""
import argparse, os, platform, resource, statistics, sys, time
import numpy as np

def _rss_gb() -> float:
    "This process's resident memory now (Linux /proc; NaN elsewhere)."
    try: return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) * 1024 / 1e9
    except (OSError, StopIteration): return float("nan")

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n-jobs", type=int, default=2, help="threads over query blocks (the target machine has 2 cores)")
    ap.add_argument("--block-size", type=int, default=512, help="queries per block (memory ~ n_jobs x block x items x 6 bytes)")
    ap.add_argument("--captions", default="shared:coco/annotations/captions_val2017.json")
    args = ap.parse_args()
    from vlbias_nb.data.coco import load_coco_captions, coco_annotation_file, coco_source_available
    from vlbias_nb.text import gender_labels
    from vlbias_nb.papers.gensynth.retrieval_baselines import tfidf_table1_metrics
    if not coco_source_available(args.captions):
        sys.exit(f"{args.captions} is not available: set VLBIAS_DATA to the shared data folder")
    coco = load_coco_captions(coco_annotation_file(args.captions))
    labels = gender_labels(coco.captions_by_image())
    caps = coco.captions
    floor_gb = _rss_gb()
    walls, cpus = [], []
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        row = tfidf_table1_metrics(caps, labels, n_jobs=args.n_jobs, block_size=args.block_size, progress=False).mean()
        walls.append(time.perf_counter() - t0); cpus.append(time.process_time() - c0)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9      # ru_maxrss is in KiB on Linux
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"numpy {np.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
          f"load average {load:.1f}, n_jobs={args.n_jobs}, block_size={args.block_size}")
    print(f"{len(caps)} queries x {len(caps)} captions; " + ", ".join(f"{k} = {v:.4f}" for k, v in row.items() if "share" not in k))
    print(f"resident before the computation {floor_gb:.2f} GB (torch loaded: {'torch' in sys.modules}); peak {peak_gb:.2f} GB; "
          f"one score block {args.block_size} x {len(caps)} float32 = {args.block_size * len(caps) * 4 / 1e9:.2f} GB per thread")
    print(f"wall per repeat: {', '.join(f'{w:.2f}' for w in walls)} s; process CPU: {', '.join(f'{c:.2f}' for c in cpus)} s")
    print(f"tfidf table1: {statistics.median(walls):.1f} s wall (peak {peak_gb:.1f} GB)")

if __name__ == "__main__":
    main()

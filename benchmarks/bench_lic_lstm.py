"""Benchmark (not a test): wall time of one LSTM LIC run — train the LIC attribute classifier on ~6k masked captions
and score the test captions — with the paper's training setup (LIC App. A.1: 20 epochs, Adam, lr 5e-5, batch 64).

Captions: 5,966 training + 662 test captions (the sizes of the paper's gender split), drawn from the gender-labelled
images of the real COCO val 2017 captions when VLBIAS_DATA has them (labels derived from the captions, gender words
masked), else from the planted-bias generator. Target: <= 60 s on 2 cores.
The last printed line is the figure: `lic lstm run: X.X s`.

    python benchmarks/bench_lic_lstm.py [--epochs 20] [--hidden-dim 64] [--threads 0]
"""
import argparse, os, platform, time
import numpy as np
import torch
from vlbias_nb.captioning_bias import (ClassifierConfig, CaptionAttributeClassifier, caption_gender_labels, prepare_caption,
                                       paper_classifier)
from vlbias_nb.metrics import lic_score, leakage_accuracy
from vlbias_nb.paths import has_shared, shared_path

def captions_and_labels(n_total, seed):
    "(captions, labels 0 = female / 1 = male, source) of n_total captions of gender-labelled images."
    rel = "coco/annotations/captions_val2017.json"
    if has_shared(rel):
        from vlbias_nb.data import load_coco_captions
        by_image, source = load_coco_captions(shared_path(rel)).captions_by_image(), "COCO val 2017 (real)"
    else:
        from vlbias_nb.synthetic import make_planted_coco
        by_image, source = make_planted_coco(n_images=4000, undefined_share=0.0, seed=seed).captions.captions_by_image(), "planted"
    labels = caption_gender_labels(by_image)
    pairs = [(c, int(g == "male")) for i, g in labels.items() for c in by_image[i]]
    pick = np.random.default_rng(seed).permutation(len(pairs))[:n_total]
    return [pairs[j][0] for j in pick], np.array([pairs[j][1] for j in pick]), source

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, default=5966)
    ap.add_argument("--test", type=int, default=662)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--hidden-dim", type=int, default=ClassifierConfig().hidden_dim)
    ap.add_argument("--threads", type=int, default=0, help="0: the library default (1 thread for the LSTM)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    caps, y, source = captions_and_labels(args.train + args.test, args.seed)
    toks = [prepare_caption(c) for c in caps]
    cfg = paper_classifier("lstm", epochs=args.epochs, hidden_dim=args.hidden_dim, num_threads=args.threads, device="cpu")
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{source}: {args.train} train + {args.test} test captions, mean {np.mean([len(t) for t in toks]):.1f} tokens; "
          f"LSTM emb {cfg.embedding_dim}, hidden {cfg.hidden_dim} x 2 layers x 2 directions, {cfg.epochs} epochs, lr {cfg.lr}")
    t0, c0 = time.perf_counter(), time.process_time()
    clf = CaptionAttributeClassifier(cfg, 2, seed=args.seed).fit(toks[:args.train], y[:args.train])
    p = clf.predict_proba(toks[args.train:])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"test accuracy {100 * leakage_accuracy(p, y[args.train:]):.1f} %, LIC score {lic_score(p, y[args.train:], 100):.1f}; "
          f"final train loss {clf.history[-1]:.3f}")
    print(f"cpu time {cpu:.1f} s")
    print(f"lic lstm run: {wall:.1f} s")

if __name__ == "__main__":
    main()

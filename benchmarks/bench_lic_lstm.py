"""Benchmark (not a test): wall time of one whole LSTM LIC run — a balanced split, the human-caption classifier f*
and the model-caption classifier f_hat each trained and scored (LIC eqs. 9-11 from one run) — with the paper's LSTM
training setup (LIC App. A.1: 20 epochs, Adam, lr 5e-5, batch 64).

Data: ~6k captions per classifier (the size of the paper's gender split: 5,966 training + 662 test images). The real
COCO val 2017 captions have only ~1.7k gender-labelled images, so the benchmark takes the planted-bias generator
with the paper's split size, each caption lengthened by a place phrase so that it is at least as long as COCO's
(it prints the mean token count): at least the FLOPs of real captions. `--source coco` times the real COCO val captions instead (one caption per image, fewer images).
The model captions are the faithful captioner's (another human caption of each image).
Target: <= 60 s on 2 cores. The last printed line is the figure: `lic lstm run: X.X s`.

`--protocol` instead prices the paper's whole protocol on the LIC authors' released captions (issue #30): it times one
LSTM epoch (and the prediction) on the gender split (5,966 training captions) and the skin-tone split (1,972) of
NIC's released captions, with the full profile's classifier (hidden 256, batch 64) and the smoke profile's (the lic
notebook's release_* defaults), and multiplies out runs x epochs x caption sets x attributes: 9 captioners x (gender +
skin tone) on every image, 6 masked sets of Tab. 4, and f* (x human captions per image) + f_hat per captioner on the
COCO 2017 val subset. Its last line: `lic paper protocol: X CPU-hours`.

    python benchmarks/bench_lic_lstm.py [--n-jobs 2] [--epochs 20] [--source planted|coco]
    python benchmarks/bench_lic_lstm.py --protocol
"""
import argparse, os, platform, time
from pathlib import Path
import numpy as np
import torch
from vlbias_nb.papers.lic.lic_runs import lic_over_runs
from vlbias_nb.papers.lic.captioning_bias import paper_classifier
from vlbias_nb.papers.lic.captioners import faithful_captioner
from vlbias_nb.papers.lic.captions import caption_gender_labels, prepare_caption
from vlbias_nb.paths import has_shared, shared_path

def planted_data(n_images, seed):
    "Human captions {id: [5 captions]} and labels of a balanced planted set, each caption padded to COCO length."
    from vlbias_nb.data.synthetic import make_planted_coco
    p = make_planted_coco(n_images=n_images, undefined_share=0.0, seed=seed, overall_male_share=0.5)
    rng = np.random.default_rng(seed)
    tail = ["on a sunny day", "in front of a building", "with some people around", "next to a small table"]
    human = {i: [f"{c.rstrip('.')} {tail[rng.integers(len(tail))]}" for c in caps]
             for i, caps in p.captions.captions_by_image().items()}
    return human, caption_gender_labels(human), "planted (lengthened captions)"

def coco_data():
    from vlbias_nb.data.coco import load_coco_captions
    human = load_coco_captions(shared_path("coco/annotations/captions_val2017.json")).captions_by_image()
    labels = caption_gender_labels(human)
    return {i: human[i] for i in labels}, labels, "COCO val 2017 (real)"

def _epoch_seconds(caps, labels, hidden, batch, repeat=1):
    "Seconds of one training epoch + one prediction pass of the LSTM over the balanced split of `labels`."
    from vlbias_nb.papers.lic.captions import balanced_split, attribute_codes
    from vlbias_nb.papers.lic.captioning_bias import CaptionAttributeClassifier
    tr, te = balanced_split(labels, 0.1, 0)
    values = sorted(set(labels.values()))
    cfg = paper_classifier("lstm", epochs=1, hidden_dim=hidden, batch_size=batch, device="cpu")
    t0 = time.perf_counter()
    for _ in range(repeat):
        CaptionAttributeClassifier(cfg, 2, 0).fit([prepare_caption(caps[i]) for i in tr], attribute_codes(tr, labels, values)) \
            .predict_proba([prepare_caption(caps[i]) for i in te])
    return (time.perf_counter() - t0) / repeat, len(tr)

def protocol_cost(n_jobs: int):
    "Print the cost of the paper's protocol and of the smoke profile's on the released captions."
    import json, nbformat
    from vlbias_nb.data.releases import has_release
    from vlbias_nb.data.lic_release import load_lic_captions, lic_labels
    from vlbias_nb.run.profiles import PROFILES
    if not has_release("lic"): raise SystemExit("--protocol needs the LIC release (VLBIAS_LIC_RELEASE or lic/bias_data in VLBIAS_DATA)")
    g, s = load_lic_captions("NIC"), load_lic_captions("NIC", "skin")
    caps_g, caps_s = dict(zip(g.image_id, g.caption)), dict(zip(s.image_id, s.caption))
    lab_g, lab_s = lic_labels(g), lic_labels(s, "skin")
    nb = nbformat.read(Path(__file__).parents[1] / "nbs/analyses/lic/06_lic.ipynb", as_version=4)
    params = {}
    for c in nb.cells:
        if "release_runs =" in c.source:
            for line in c.source.splitlines():
                if line.startswith("release_"): k, v = line.split("#")[0].split("=", 1); params[k.strip()] = eval(v)
    full = {k: v for k, v in PROFILES["full"]["notebooks"]["lic"].items() if k.startswith("release_")}
    n_val_g, n_val_s = 744, 254                                   # balanced training images of the COCO 2017 val subset
    print(f"torch {torch.__version__}, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}; NIC's released captions")
    out = {}
    for name, p in (("smoke", params), ("paper (full profile)", {**params, **full})):
        tg, ng = _epoch_seconds(caps_g, lab_g, p["release_hidden_dim"], p["release_batch_size"])
        ts, ns = _epoch_seconds(caps_s, lab_s, p["release_hidden_dim"], p["release_batch_size"])
        per_run = (9 + 6) * tg + 9 * ts + 9 * (p["release_human_captions_per_image"] + 1) * (tg * n_val_g / ng + ts * n_val_s / ns)
        total = p["release_runs"] * p["release_epochs"] * per_run
        out[name] = total
        print(f"{name}: hidden {p['release_hidden_dim']}, batch {p['release_batch_size']}: one epoch {tg:.1f} s (gender, {ng:,} captions), "
              f"{ts:.1f} s (skin, {ns:,}); x {p['release_runs']} runs x {p['release_epochs']} epochs x (15 gender sets + 9 skin sets on every "
              f"image + 9 x {p['release_human_captions_per_image'] + 1} classifiers per attribute on the val subset) = {total:,.0f} CPU-s "
              f"({total / 3600:.2f} CPU-hours; {total / n_jobs / 60:.1f} min wall on {n_jobs} workers)")
    print(f"lic paper protocol: {out['paper (full profile)'] / 3600:.1f} CPU-hours (smoke: {out['smoke'] / 60:.1f} CPU-minutes)")

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=6628, help="planted images (paper split: 5,966 + 662)")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--n-jobs", type=int, default=2, help="classifiers trained at once (f* and f_hat: 2)")
    ap.add_argument("--source", choices=["planted", "coco"], default="planted")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--protocol", action="store_true", help="price the paper's protocol on the released captions (and the smoke profile's)")
    args = ap.parse_args()
    if args.protocol: return protocol_cost(args.n_jobs)
    if args.source == "coco" and not has_shared("coco/annotations/captions_val2017.json"):
        raise SystemExit("--source coco needs the COCO val captions under VLBIAS_DATA")
    human, labels, source = coco_data() if args.source == "coco" else planted_data(args.images, args.seed)
    labels = {i: g for i, g in labels.items() if g in ("male", "female")}
    generated = faithful_captioner({i: human[i] for i in labels}, args.seed)
    cfg = paper_classifier("lstm", epochs=args.epochs, device="cpu")
    lens = [len(prepare_caption(generated[i])) for i in labels]
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{source}: {len(labels)} labelled images, mean {np.mean(lens):.1f} tokens per caption; LSTM emb {cfg.embedding_dim}, "
          f"hidden {cfg.hidden_dim} x 2 layers x 2 directions, {cfg.epochs} epochs, lr {cfg.lr}; {args.n_jobs} job(s)")
    t0 = time.perf_counter()
    res = lic_over_runs(human, generated, labels, cfg, n_runs=1, seed=args.seed, human_captions_per_image=1,
                        progress=False, n_jobs=args.n_jobs)
    wall = time.perf_counter() - t0
    r = res.runs.iloc[0]
    print(f"train {int(r.n_train)} + test {int(r.n_test)} captions per classifier; LIC_M {r.LIC_M:.1f}, LIC_D {r.LIC_D:.1f}, "
          f"LIC {r.LIC:.1f} (faithful captioner: expected ~0)")
    print(f"lic lstm run: {wall:.1f} s")

if __name__ == "__main__":
    main()

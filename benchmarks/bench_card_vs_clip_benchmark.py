"""Peer benchmark: the card's zero-shot image path against LAION's CLIP_benchmark, same checkpoint, same images, one script.

One extra install line (CLIP_benchmark is an optional benchmark dependency; it brings only webdataset and braceexpand
and leaves torch, open_clip and torchvision as they are — `pip install --dry-run clip_benchmark==1.6.2` shows it):

    pip install clip_benchmark==1.6.2

    python benchmarks/bench_card_vs_clip_benchmark.py [--n-images 512] [--rounds 2] [--batch-size 64] [--device cpu]

What is compared (both tools in this process, the same torch threads, alternated round by round, cold every time):
- the checkpoint: open_clip ViT-B-32 (QuickGELU, OpenAI's preprocessing) at random weights (`VLBIAS_WEIGHTS=random`,
  the rehearsal's switch: the same FLOPs as the pretrained weights), built by the zoo and saved with `torch.save` of
  its `state_dict`; CLIP_benchmark loads that file as `--model ViT-B-32-quickgelu --pretrained <file>`;
- the images: `--n-images` CIFAR-10 test images in torchvision's `cifar-10-batches-py/` layout, generated
  (`vlbias_nb.data.rehearsal.make_cifar10`: random 32² pixels, random labels). Their pickles carry no official MD5,
  so torchvision's integrity check is switched off for CIFAR10 in this process (the only change to CLIP_benchmark's
  path); the accuracies are chance-level by construction (random weights, random labels): a pipeline check only;
- ours: what the card's zero-shot capability task does (`load_cifar10`, the CLIP CIFAR templates, the zero-shot
  classifier through the embedding cache, `CardContext.image_embeddings`) with a fresh embedding cache each run, so
  no image or text is a cache hit; the model's default preprocessing workers (`default_image_workers`);
- CLIP_benchmark: what `clip_benchmark eval --dataset cifar10 --task zeroshot_classification` runs after loading the
  model (`build_dataset`, its DataLoader, `zero_shot_classifier`, `run_classification`), at its defaults
  (`--num_workers 4`, mixed precision on: `torch.autocast` on CPU is bfloat16), at `--num_workers 0`, and at
  `--no_amp --num_workers 0` (float32, the precision of ours: the run the logits are compared with).
Each rate is images per second of the whole zero-shot evaluation (data set, classifier of 10 classes × 18 templates,
image loop), the model already loaded, and of the image loop alone; the medians over rounds are printed. The machine may be shared: rates are noisy, compare within a run.
Last line: our images/s over CLIP_benchmark's at its defaults.
"""
import argparse, os, sys, tempfile, time, statistics
from pathlib import Path
import numpy as np
import torch

ARCH_CB = "ViT-B-32-quickgelu"        # CLIP_benchmark's model name for the zoo's ViT-B-32/openai architecture

def ours(vlm, root: Path, cache_dir: Path, batch_size: int):
    "The card's zero-shot path on CIFAR-10 test under `root`, cold (a fresh cache): (seconds, image seconds, logits, labels, prompts)."
    from vlbias_nb.methods.downstream import load_cifar10
    from vlbias_nb.methods.zero_shot import zero_shot_classifier
    from vlbias_nb.methods.embedding_cache import EmbeddingCache
    t0 = time.perf_counter()
    cache = EmbeddingCache(cache_dir)
    from vlbias_nb.methods.card import CardContext, CardConfig
    ctx = CardContext(vlm, "ViT-B-32/openai", {"cifar10": str(root)}, CardConfig(batch_size=batch_size, progress=False), cache)
    data = load_cifar10(root, split="test", check_md5=False)
    clf = zero_shot_classifier(vlm, data.classnames, data.templates, cache=cache)
    t1 = time.perf_counter()
    emb = ctx.image_embeddings("cifar10", data.images)
    t2 = time.perf_counter()
    logits = clf.logits(emb, 100.0)
    from vlbias_nb.methods.zero_shot import class_prompts
    return time.perf_counter() - t0, t2 - t1, logits, np.asarray(data.labels), class_prompts(data.classnames, data.templates)

def clip_benchmark_run(model, transform, tokenizer, root: Path, batch_size: int, num_workers: int, amp: bool, device: str):
    "CLIP_benchmark's zero-shot classification on CIFAR-10 test under `root`: (seconds, image seconds, logits, labels, prompts)."
    from clip_benchmark.datasets.builder import build_dataset, get_dataset_collate_fn
    from clip_benchmark.metrics.zeroshot_classification import zero_shot_classifier, run_classification
    import clip_benchmark.metrics.zeroshot_classification as zc
    zc.tqdm = lambda it, *a, **k: it                       # no progress bars in the timed loop
    t0 = time.perf_counter()
    ds = build_dataset(dataset_name="cifar10", root=str(root), transform=transform, split="test", download=True,
                       task="zeroshot_classification")
    dl = torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                                     collate_fn=get_dataset_collate_fn("cifar10"))
    clf = zero_shot_classifier(model, tokenizer, ds.classes, ds.templates, device, amp=amp)
    t1 = time.perf_counter()
    logits, target = run_classification(model, clf, dl, device, amp=amp)
    return time.perf_counter() - t0, time.perf_counter() - t1, logits.numpy(), target.numpy(), [[t.format(c=c) for t in ds.templates] for c in ds.classes]

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-images", type=int, default=512, help="CIFAR-10 test images (generated)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds; each runs every configuration once, the order alternating")
    ap.add_argument("--batch-size", type=int, default=64, help="both tools (CLIP_benchmark's default is 64)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    try:
        import clip_benchmark  # noqa: F401
    except ImportError:
        sys.exit("CLIP_benchmark is not installed: pip install clip_benchmark==1.6.2 (see this script's docstring)")
    os.environ["VLBIAS_WEIGHTS"] = "random"
    import torchvision.datasets
    C10 = torchvision.datasets.CIFAR10                                    # generated pickles: no official MD5
    C10._check_integrity, C10.meta = (lambda self: True), {**C10.meta, "md5": None}
    from importlib.metadata import version
    from vlbias_nb.data.rehearsal import make_cifar10
    from clip_benchmark.models import load_clip
    dev = args.device
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        root = make_cifar10(d / "cifar10", n_items=args.n_images)
        from vlbias_nb.zoo.model_names import load_card_model
        vlm = load_card_model("ViT-B-32/openai", device=dev)
        ckpt = d / "vit-b-32-random.pt"
        torch.save(vlm.model.state_dict(), ckpt)
        model, transform, tokenizer = load_clip(model_type="open_clip", model_name=ARCH_CB, pretrained=str(ckpt),
                                                cache_dir=None, device=dev)
        model.eval()
        same = all(torch.equal(a, b) for a, b in zip(vlm.model.state_dict().values(), model.state_dict().values()))
        print(f"checkpoint: open_clip {ARCH_CB}, {sum(p.numel() for p in model.parameters()):,} parameters, random weights "
              f"(seed 0), {ckpt.stat().st_size / 1e6:.0f} MB; the two tools' weights identical: {same}")
        print(f"images: {args.n_images} generated CIFAR-10 test images (32², upscaled to 224² by both tools' transforms); "
              f"{dev}, {torch.get_num_threads()} torch threads, batch {args.batch_size}; torch {torch.__version__}, "
              f"open_clip {version('open_clip_torch')}, clip_benchmark {version('clip_benchmark')}")
        configs = [("ours", None), ("CLIP_benchmark defaults (--num_workers 4, amp)", dict(num_workers=4, amp=True)),
                   ("CLIP_benchmark --num_workers 0 (amp)", dict(num_workers=0, amp=True)),
                   ("CLIP_benchmark --no_amp --num_workers 0 (fp32)", dict(num_workers=0, amp=False))]
        times = {name: [] for name, _ in configs}; itimes = {name: [] for name, _ in configs}; out = {}
        for r in range(args.rounds):
            order = configs if r % 2 == 0 else configs[::-1]
            for name, kw in order:
                if kw is None: dt, di, lg, y, prompts = ours(vlm, root, d / f"cache-{r}", args.batch_size)
                else: dt, di, lg, y, prompts = clip_benchmark_run(model, transform, tokenizer, root, args.batch_size, device=dev, **kw)
                times[name].append(dt); itimes[name].append(di); out[name] = (lg, y, prompts)
                print(f"round {r + 1}: {name}: {args.n_images / dt:.2f} images/s ({dt:.1f} s, of which the image loop {di:.1f} s; "
                      f"load {os.getloadavg()[0]:.1f})", flush=True)
        rate = {name: args.n_images / statistics.median(ts) for name, ts in times.items()}
        irate = {name: args.n_images / statistics.median(ts) for name, ts in itimes.items()}
        (lo, yo, po), fp32 = out["ours"], configs[3][0]
        print(f"\nimages/s, median of {args.rounds} round(s), cold ({args.n_images} images, {dev}); whole evaluation "
              f"(data set, classifier, images) | image loop only:")
        for name, _ in configs:
            print(f"  {name:<48} {rate[name]:7.2f} | {irate[name]:6.2f}" + ("" if name == "ours" else
                  f"   ours / this = {rate['ours'] / rate[name]:.2f} | {irate['ours'] / irate[name]:.2f}"))
        for name, _ in configs[1:]:
            lc, yc, pc = out[name]
            assert np.array_equal(yo, yc), "the two tools read different labels"
            print(f"logits, ours vs {name}: max |Δ| {np.abs(lo - lc).max():.1e}, predictions agree on "
                  f"{(lo.argmax(1) == lc.argmax(1)).mean():.1%}; prompts identical: {po == pc}")
        ok = np.abs(lo - out[fp32][0]).max() <= 1e-4
        print(f"fp32 logits equal to 1e-4: {ok}; top-1 accuracy (chance 10 %, random weights and labels): ours "
              f"{(lo.argmax(1) == yo).mean():.3f}, CLIP_benchmark fp32 {(out[fp32][0].argmax(1) == yo).mean():.3f}")
        print(f"ours / CLIP_benchmark at its defaults: {rate['ours'] / rate[configs[1][0]]:.2f} (images/s ratio, whole evaluation)")

if __name__ == "__main__":
    sys.exit(main())

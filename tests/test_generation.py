"Sharded, resumable generation: a run killed at any point and rerun equals an uninterrupted run."
import os, signal, subprocess, sys, time, sqlite3, textwrap
import numpy as np, pytest
from pathlib import Path
from PIL import Image
from vlbias_nb.generation import (GenerationManifest, run_generation, shard_batches, load_diffusion_pipeline,
                                  is_black_image)

SCRIPT = textwrap.dedent("""
    import sys, time
    from PIL import Image
    from vlbias_nb.generation import run_generation, load_diffusion_pipeline, edit_batch
    out, slow = sys.argv[1], float(sys.argv[2])
    pipe = load_diffusion_pipeline("tiny-instruct-pix2pix", device="cpu", seed=0)
    src = Image.new("RGB", (64, 64), (120, 80, 40))
    items = [{"key": f"e{i:02d}", "seed": 1000 + i, "image": src, "instruction": "make this person more feminine",
              "guidance_scale": [9.5, 15.0][i % 2]} for i in range(8)]
    gen = edit_batch(pipe, num_inference_steps=2)
    def slowed(b):
        time.sleep(slow); return gen(b)
    run_generation(items, slowed, out, batch_size=2, shard=0, n_shards=1, progress=False, params={"steps": 2})
""")

def _rows(path):
    p = Path(path) / "manifest.sqlite"
    if not p.exists(): return 0
    try:
        with sqlite3.connect(p, timeout=5) as c: return c.execute("SELECT COUNT(*) FROM items").fetchone()[0]
    except sqlite3.OperationalError: return 0

def _run(out, slow=0.0):
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(out), str(slow)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

def test_killed_run_resumes_to_identical_output(tmp_path, kill_after_rows=4):
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    p = _run(ref); assert p.wait(timeout=600) == 0, p.stderr.read().decode()[-2000:]
    p = _run(killed, slow=0.5)
    t0 = time.time()
    while _rows(killed) < kill_after_rows and time.time() - t0 < 300 and p.poll() is None: time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL); p.wait()
    assert 0 < _rows(killed) < 8, "the kill should land mid-run"
    p = _run(killed); assert p.wait(timeout=600) == 0, p.stderr.read().decode()[-2000:]
    a, b = GenerationManifest(ref / "manifest.sqlite").to_frame(), GenerationManifest(killed / "manifest.sqlite").to_frame()
    assert a.equals(b)
    for f in a.output:
        assert (ref / f).read_bytes() == (killed / f).read_bytes()
    assert not list(killed.rglob("*.part")), "no half-written files remain"

def test_shards_cover_items_once():
    items = [{"key": f"k{i}", "seed": i} for i in range(11)]
    got = [it["key"] for s in range(3) for b in shard_batches(items, 2, s, 3) for it in b]
    assert sorted(got) == sorted(it["key"] for it in items)

def test_bad_keys_and_lengths(tmp_path):
    with pytest.raises(ValueError, match="must use only letters"):
        run_generation([{"key": "a/b", "seed": 0}], lambda b: [], tmp_path, shard=0, n_shards=1, progress=False)
    with pytest.raises(RuntimeError, match="returned 0 images for 1 items"):
        run_generation([{"key": "a", "seed": 0}], lambda b: [], tmp_path, shard=0, n_shards=1, progress=False)

def test_black_images_are_flagged(tmp_path):
    m = run_generation([{"key": "blk", "seed": 0}, {"key": "ok", "seed": 1}],
                       lambda b: [Image.new("RGB", (4, 4), (0, 0, 0) if it["key"] == "blk" else (9, 9, 9)) for it in b],
                       tmp_path, shard=0, n_shards=1, progress=False).to_frame()
    assert m.set_index("key").black.to_dict() == {"blk": True, "ok": False}

def test_unknown_and_unavailable_pipelines():
    with pytest.raises(KeyError, match="Unknown diffusion pipeline"): load_diffusion_pipeline("nope/nothing", device="cpu")

def test_rerun_skips_done_items_but_regenerates_on_other_parameters(tmp_path):
    "Same parameters: nothing is generated again. Other parameters: every item is made again and replaced."
    calls = []
    def gen(value):
        def batch(b):
            calls.append([it["key"] for it in b]); return [Image.new("RGB", (4, 4), (value,) * 3) for _ in b]
        return batch
    items = [{"key": f"k{i}", "seed": i} for i in range(3)]
    run_generation(items, gen(10), tmp_path, batch_size=3, shard=0, n_shards=1, progress=False, params={"steps": 2})
    run_generation(items, gen(10), tmp_path, batch_size=3, shard=0, n_shards=1, progress=False, params={"steps": 2})
    assert calls == [["k0", "k1", "k2"]]
    m = run_generation(items, gen(200), tmp_path, batch_size=3, shard=0, n_shards=1, progress=False, params={"steps": 50})
    assert len(calls) == 2
    df = m.to_frame()
    assert len(df) == 3 and set(df.params) == {'{"steps": 50}'}
    assert np.asarray(Image.open(tmp_path / df.output[0]))[0, 0, 0] == 200

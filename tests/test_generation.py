"Sharded, resumable generation: a run killed at any point and rerun equals an uninterrupted run."
import os, signal, subprocess, sys, time, sqlite3, textwrap
import numpy as np, pytest
from pathlib import Path
from PIL import Image
from vlbias_nb.methods.generation import (GenerationManifest, run_generation, shard_batches, load_diffusion_pipeline,
                                  is_black_image)

SCRIPT = textwrap.dedent("""
    import sys, time
    from PIL import Image
    from vlbias_nb.methods.generation import run_generation, load_diffusion_pipeline, edit_batch
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

# --- several processes -----------------------------------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import sys, time
    from vlbias_nb.methods.generation import GenerationManifest
    path, shard, n, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    time.sleep(max(0.0, start - time.time()))   # every writer opens the new manifest at the same moment (its WAL switch races)
    m = GenerationManifest(path, timeout=60)
    for i in range(n):   # one transaction per row: as many lock hand-overs as possible
        m.record([dict(key=f"s{shard}_{i:04d}", shard=shard, seed=i, params="{}", inputs="{}", output=f"images/{i}.png",
                       sha256="x", black=0)])
        if i % 25 == 0: m.done_keys()
""")

def test_manifest_takes_concurrent_writers(tmp_path):
    "Three processes opening one new manifest at the same moment and writing 150 rows each: every row arrives, none twice."
    start = str(time.time() + 5)          # after every writer has imported the package
    ps = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "manifest.sqlite"), str(s), "150", start],
                           stderr=subprocess.PIPE) for s in range(3)]
    for p in ps: assert p.wait(timeout=300) == 0, p.stderr.read().decode()[-2000:]
    m = GenerationManifest(tmp_path / "manifest.sqlite").to_frame()
    assert len(m) == 450 and m.key.is_unique and m.groupby("shard").size().tolist() == [150] * 3

def test_shard_batches_deal_whole_batches():
    items = [{"key": f"k{i}", "seed": i} for i in range(7)]
    keys = lambda s, n: [[it["key"] for it in b] for b in shard_batches(items, 2, s, n)]
    assert keys(0, 1) == [["k0", "k1"], ["k2", "k3"], ["k4", "k5"], ["k6"]]
    assert keys(0, 2) == [["k0", "k1"], ["k4", "k5"]] and keys(1, 2) == [["k2", "k3"], ["k6"]]   # the same batches
    with pytest.raises(ValueError, match="shard must be in 0..1"): shard_batches(items, 2, 2, 2)

def _free_port():
    import socket
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

def test_accelerate_launch_two_cpu_processes_equal_one_process(tmp_path):
    """`accelerate launch --num_processes 2 -m vlbias_nb.run.cli generate gensynth_editing` on the CPU: the two shards are
    disjoint, their union is the one-process run row for row, and every image is byte-identical."""
    from vlbias_nb.paths import has_shared
    if not has_shared("coco-mini/annotations/instances_train2017.json"): pytest.skip("coco-mini not in the shared data")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}   # what accelerate gives each process: CPU
    args = ["-m", "vlbias_nb.run.cli", "generate", "gensynth_editing", "-p", "n_sources", "2", "-p", "edit_batch_size", "4"]
    one = subprocess.run([sys.executable, *args, "--generation-dir", str(tmp_path / "one")], env=env, capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
              "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port())]
    two = subprocess.run([*launch, *args, "--generation-dir", str(tmp_path / "two")], env=env, capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    assert "16 of 16 items done" in two.stdout and "(2 process(es))" in two.stdout
    a = GenerationManifest(tmp_path / "one/edits/manifest.sqlite").to_frame()
    b = GenerationManifest(tmp_path / "two/edits/manifest.sqlite").to_frame()
    assert len(a) == 16 and set(a.shard) == {0} and set(b.shard) == {0, 1}
    s0, s1 = set(b.key[b.shard == 0]), set(b.key[b.shard == 1])
    assert s0 and s1 and not s0 & s1 and s0 | s1 == set(a.key)                  # disjoint shards, union = all
    assert len(s0) == len(s1) == 8                                               # 4 batches of 4 dealt 2 and 2
    pd_equal = a.drop(columns="shard").reset_index(drop=True).equals(b.drop(columns="shard").reset_index(drop=True))
    assert pd_equal                                                              # same rows: inputs, seeds, params, sha256
    for f in a.output:
        assert (tmp_path / "one/edits" / f).read_bytes() == (tmp_path / "two/edits" / f).read_bytes()
    assert not list((tmp_path / "two").rglob("*.part"))

def test_generation_benchmark_runs_on_cpu_at_tiny_size():
    "benchmarks/bench_generation.py --tiny: runs on the CPU and ends with the figure and its unit."
    from vlbias_nb.paths import project_root
    r = subprocess.run([sys.executable, str(project_root() / "benchmarks/bench_generation.py"), "--tiny", "--steps", "1",
                        "--batch-sizes", "1", "2", "--repeats", "1"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("device: ") and "GFLOP per UNet call" in lines[0]
    assert [l.split(":")[0] for l in lines[1:3]] == ["batch  1", "batch  2"]
    import re
    m = re.fullmatch(r"instruct-pix2pix 64px edits \(tiny, cpu\): (\d+\.\d+) images/s", lines[-1])
    assert m and float(m.group(1)) > 0

def test_vlbias_generate_refuses_bad_requests_in_one_line(capsys, tmp_path):
    from vlbias_nb.run.cli import main
    assert main(["generate", "gensynth_editing"]) == 2                            # smoke: generation_dir '' = inside a run
    assert "pass --generation-dir DIR" in capsys.readouterr().err
    assert main(["generate", "tfidf_table1", "--generation-dir", str(tmp_path)]) == 2
    assert "has no generation step" in capsys.readouterr().err
    assert main(["generate", "gensynth_editing", "-p", "source_instances", str(tmp_path / "none.json"),
                 "--generation-dir", str(tmp_path)]) == 2
    assert "source_instances" in capsys.readouterr().err and not (tmp_path / "edits").exists()

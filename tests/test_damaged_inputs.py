"Issue 34's cases outside the runner: damaged checkpoints, an empty generation manifest, a UTF-8 byte-order mark."
import json
import pytest
import torch
from pathlib import Path
from vlbias_nb.run.card import card_main
from vlbias_nb.zoo.factory import load_model, tiny_hf_model
from vlbias_nb.zoo.registry import DamagedWeightsError
from vlbias_nb.methods.generation import GenerationManifest, CorruptManifestError
from vlbias_nb.paths import read_json_input, read_text_input


@pytest.mark.parametrize("content, why", [
    (b"", "empty, truncated or not a checkpoint"),
    (b"garbage" * 100, "empty, truncated or not a checkpoint"),
    (None, "do not fit the model's architecture"),
])
def test_a_damaged_checkpoint_is_one_message_exit_2(tmp_path, capsys, content, why):
    "Case 5: `vlbias card ARCH,ckpt.pt` with an empty, garbage or foreign checkpoint: one line naming the file, exit 2."
    ckpt = tmp_path / "ckpt.pt"
    if content is None: torch.save({"not.a.layer": torch.zeros(3)}, ckpt)
    else: ckpt.write_bytes(content)
    assert card_main([f"ViT-B-32,{ckpt}", "--only", "gab.text_bias", "--out", str(tmp_path / "card")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(ckpt) in err and why in err and "Traceback" not in err, err
    assert "weights_only=False`" not in err                       # never torch's advice to load unsafely


def test_a_pickle_that_is_not_plain_weights_is_refused(tmp_path):
    "A checkpoint holding a pickled module (weights_only refuses it): refused, never loaded unsafely."
    ckpt = tmp_path / "module.pt"
    torch.save({"m": torch.nn.Linear(2, 2)}, ckpt)
    with pytest.raises(DamagedWeightsError, match="refuses to unpickle it safely"):
        load_model(str(ckpt), device="cpu", arch="ViT-B-32")


def test_a_damaged_safetensors_in_a_transformers_folder(tmp_path):
    "Case 5: `local-dir:` / a transformers folder whose model.safetensors is garbage: one error naming the folder."
    m = tiny_hf_model("hf-clip")
    m.model.save_pretrained(tmp_path); m.tokenizer.save_pretrained(tmp_path); m.image_processor.save_pretrained(tmp_path)
    load_model(str(tmp_path), device="cpu")                                  # intact: loads
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(DamagedWeightsError, match=f"{tmp_path}.*cannot be loaded"):
        load_model(str(tmp_path), device="cpu")


def test_an_empty_manifest_is_reported_before_anything_is_generated(tmp_path):
    "Case 4: a zero-byte manifest.sqlite is not taken for an empty one (which would make every image again)."
    (tmp_path / "manifest.sqlite").write_bytes(b"")
    GenerationManifest(tmp_path / "manifest.sqlite")                         # no images yet: a manifest being created
    (tmp_path / "manifest.sqlite").write_bytes(b"")
    (tmp_path / "images").mkdir(); (tmp_path / "images" / "a.png").write_bytes(b"png")   # images made, their record lost
    with pytest.raises(CorruptManifestError, match="is empty \\(0 bytes\\).*Move it aside"):
        GenerationManifest(tmp_path / "manifest.sqlite")
    assert (tmp_path / "manifest.sqlite").stat().st_size == 0                # nothing written over it


def test_a_byte_order_mark_is_read_past(tmp_path):
    "Case 8: a captions file saved with a UTF-8 BOM reads as the same JSON (it was called malformed)."
    obj = {"annotations": [{"image_id": 1, "caption": "a man"}]}
    f = tmp_path / "captions.json"
    f.write_bytes(b"\xef\xbb\xbf" + json.dumps(obj).encode())
    assert read_json_input(f) == obj and not read_text_input(f).startswith("\ufeff")


def test_sqlite_disk_io_error_names_the_manifest(tmp_path):
    "Case 6: SQLite's bare 'disk I/O error' (a disk filling during `vlbias generate`) becomes an OSError naming the file."
    import sqlite3, errno
    man = GenerationManifest(tmp_path / "manifest.sqlite")
    e = man._error(sqlite3.OperationalError("disk I/O error"))
    assert isinstance(e, OSError) and e.errno == errno.EIO and e.filename == str(tmp_path / "manifest.sqlite")
    assert "is the disk full" in str(e)

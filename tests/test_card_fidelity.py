"""The card's measures as the papers define them (issue 33, point 3): SocialCounterfactuals' physical segments use the
released data set's 5 traits (K = 10 / 30), hand-worked and planted."""
import math
import numpy as np
import pytest
from vlbias_nb.data.rehearsal import write_generation_folder
from vlbias_nb.methods.embedding_cache import image_key
from vlbias_nb.papers.social_counterfactuals.counterfactual_captions import set_filename
from vlbias_nb.run import card as C

CFG = dict(n_boot=200, n_chance=100, n_perm=200, progress=False)

@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1"); monkeypatch.delenv("VLBIAS_ALLOW_DOWNLOAD", raising=False)

def test_social_counterfactuals_card_k_is_the_released_five_traits(tmp_path):
    """Planted physical × gender (5 × 2 = 10 images a set) and physical × race (5 × 6 = 30) sets: the card's MaxSkew uses
    K = 10 and 30 (Tab. 2's K), not the caption file's 14 traits (K = 28 / 84). Per occupation 4 candidate sets; all four
    images of code 0 rank first, so the top K holds 4 images of a value whose pool share is 1/K: MaxSkew = ln(4)."""
    occs = ["doctor", "pilot"]
    keys = [f"s{s:05d}_{set_filename('A photo of a', seg, o)}_c{c:03d}_{pos:02d}"
            for seg, K in (("physical_gender", 10), ("physical_race", 30)) for s, o in enumerate(occs) for c in range(4) for pos in range(K)]
    sc = write_generation_folder(tmp_path / "sc", keys, size=16)
    paths = [str(sc / "images" / f"{k}.png") for k in keys]
    first = [p for p in paths if p.endswith("_00.png")]
    order = first + [p for p in paths if p not in first]
    model = C.PlantedCardModel({image_key(p): i / len(order) for i, p in enumerate(order)}, name="planted-card")
    card = C.make_card("planted-card", tmp_path / "card", ["social_counterfactuals.maxskew"], {"social_counterfactuals": str(sc)},
                       C.CardConfig(**CFG), model=model, cache=None)
    ms = card["measures"]
    for seg, K in (("physical_gender", 10), ("physical_race", 30)):
        m = ms[f"social_counterfactuals.maxskew.{seg}"]
        assert (m["k"], m["n"], m["n_items"]) == (K, 2, 2 * 4 * K), (seg, m)
        assert abs(m["value"] - math.log(4)) < 1e-9 and f"MaxSkew@{K} " in m["what"]
        assert m["chance_high"] < m["value"]

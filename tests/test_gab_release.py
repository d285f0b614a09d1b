"""The GAB authors' released outputs (data.gab_release) through the project's aggregation (papers.gab.binding): on a
slice of the real files, the aggregation reproduces the authors' own *_agg.csv exactly and Tab. 1's shares; skipped
without the shared release."""
import numpy as np, pandas as pd, pytest
from vlbias_nb.data.releases import has_release
from vlbias_nb.data.gab_release import read_text_encoder_bias, read_t2i, read_t2i_agg, plant_gab_release
from vlbias_nb.papers.gab.activities import activity_table
from vlbias_nb.papers.gab.binding import (release_t2i_pairs, release_text_encoder_bias, t2i_per_activity,
                                          text_encoder_bias_share, paper_tab1)

needs_release = pytest.mark.skipif(not has_release("gab"), reason="the GAB release (VLBIAS_GAB_RELEASE) is not here")
KEYS = ["source", "caption", "mode", "model", "activity"]

@needs_release
@pytest.mark.parametrize("caption", ["man", "woman", "person"])
def test_aggregation_reproduces_the_authors_agg_exactly(caption):
    rows = read_t2i(phazes=["phaze3"], captions=[caption])           # a slice: the stereotypical activities, both modes
    agg = read_t2i_agg(phazes=["phaze3"], captions=[caption])
    ours = t2i_per_activity(release_t2i_pairs(rows, activity_table(), neutral_truth="woman"), by=KEYS[:4])
    m = agg.merge(ours, on=KEYS, how="outer", indicator=True)
    assert (m._merge == "both").all() and len(m) == 2 * 11 * 12
    assert (m.score == m.accuracy).all()                            # exactly, not approximately
    if caption == "person":   # the paper's rule (the expected performer's image) differs from what the authors' files encode
        paper = t2i_per_activity(release_t2i_pairs(rows, activity_table(), neutral_truth="expected"), by=KEYS[:4])
        d = agg.merge(paper, on=KEYS)
        men = d.activity.isin(activity_table().query("expected == 'man'").activity)
        assert (d[~men].score == d[~men].accuracy).all() and not (d[men].score == d[men].accuracy).all()

@needs_release
def test_tab1_from_the_released_outputs():
    rb = release_text_encoder_bias(read_text_encoder_bias(phazes=["phaze1"]), activity_table())
    share = text_encoder_bias_share(rb[rb.model == "RN50x64/openai"]).share.iloc[0]
    p = paper_tab1().query("model == 'RN50x64/openai' and source == 'phaze1'").value.iloc[0]
    assert share == p == 0.5                                         # 5 of 10 LAION activities, as printed
    # every model and source within the paper's two printed decimals, or its print is not k/n rounded (7/12 printed 0.59,
    # a slip; 2/3 printed 0.66 and 11/12 printed 0.91, truncated): four cells, the ledger says "differs" and why
    rb = release_text_encoder_bias(read_text_encoder_bias(), activity_table())
    ours = pd.concat([text_encoder_bias_share(d).assign(model=m) for m, d in rb.groupby("model")])
    t = ours.merge(paper_tab1(), on=["model", "source"])
    assert len(t) == 33 and ((t.share - t.value).abs() < 0.0085).all()
    assert int(((t.share - t.value).abs() > 0.005).sum()) == 4


@pytest.mark.skipif(not (has_release("gab") and has_release("gab_early")), reason="the GAB releases are not here")
def test_negclip_from_the_earlier_release():
    "Tab. 1's NegCLIP row from the earlier text-encoder release, through the same reader and aggregation: 0.70 / 0.60 / 0.75."
    neg = read_text_encoder_bias(release="gab_early", models=["ViT-B-32 negCLIP.pt"])
    assert set(neg.model) == {"NegCLIP-ViT-B-32"} and neg.groupby("source").size().to_dict() == {"phaze1": 10, "phaze2": 15, "phaze3": 12}
    spelled = {(s, a.lower()): a for s, a in zip(*read_text_encoder_bias().pipe(lambda d: (d.source, d.activity)))}
    neg = neg.assign(activity=[spelled.get((s, a.lower()), a) for s, a in zip(neg.source, neg.activity)])   # 'picking flower'
    share = text_encoder_bias_share(release_text_encoder_bias(neg, activity_table())).set_index("source").share
    paper = paper_tab1().query("model == 'NegCLIP-ViT-B-32'").set_index("source").value
    assert share.round(6).to_dict() == {"phaze1": 0.7, "phaze2": 0.6, "phaze3": 0.75} == paper.to_dict()

def test_planted_release_through_the_aggregation(tmp_path):
    plant_gab_release(tmp_path)                                      # its *_agg.csv: the man's image right (p >= 0.5)
    rows, agg = read_t2i(tmp_path, phazes=["phaze3"], captions=["man"]), read_t2i_agg(tmp_path, phazes=["phaze3"], captions=["man"])
    ours = t2i_per_activity(release_t2i_pairs(rows, activity_table()), by=KEYS[:4])
    m = agg.merge(ours, on=KEYS)
    assert len(m) == 8 and np.array_equal(m.score.to_numpy(), m.accuracy.to_numpy())

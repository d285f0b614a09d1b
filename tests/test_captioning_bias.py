"LIC pipeline (vlbias_nb.papers.lic: captions, captioning_bias (classifiers), lic_runs, captioners, gender_metrics, caption_accuracy): known answers of the synthetic captioners, inputs, alignment, classifiers, BA/DBA."
import json
import numpy as np
import pytest
import torch
from conftest import requires_shared
from vlbias_nb.papers.lic.captioning_bias import (
    ClassifierConfig, CaptionAttributeClassifier, paper_classifier, word_contributions)
from vlbias_nb.papers.lic.captions import (
    ImageIdMismatchError, OOV_TOKEN, caption_gender_labels, caption_gender, load_generated_captions,
    load_attribute_annotations, match_inputs, prepare_caption, balanced_split)
from vlbias_nb.papers.lic.lic_runs import lic_over_runs, lic_chance_tolerance
from vlbias_nb.papers.lic.captioners import faithful_captioner, amplifying_captioner, attribute_context_words
from vlbias_nb.papers.lic.gender_metrics import (
    gender_ratio, gender_error, ba_vocabulary, caption_ba, caption_dba_g, caption_dba_o)
from vlbias_nb.metrics import lic_score
from vlbias_nb.resources import known_answer
from vlbias_nb.data.synthetic import make_planted_coco

# Small, fast classifier for tests: the paper's LSTM shape, fewer units/epochs and a larger learning rate.
FAST = ClassifierConfig(kind="lstm", epochs=6, lr=3e-3, embedding_dim=32, hidden_dim=16, batch_size=32)


@pytest.fixture(scope="module")
def planted():
    "Planted COCO-format captions: every image gendered, gender named in 1..5 of its 5 captions."
    p = make_planted_coco(n_images=800, undefined_share=0.0, seed=3)
    human = p.captions.captions_by_image()
    return human, caption_gender_labels(human), p


@pytest.fixture(scope="module")
def planted_lic(planted):
    human, labels, _ = planted
    fa = faithful_captioner(human, seed=1)
    am = amplifying_captioner(human, labels, strength=1.0, n_insert=2, min_count=20, seed=1)
    kw = dict(config=FAST, n_runs=3, seed=0, human_captions_per_image=1, progress=False, keep_classifiers=True)
    return {"faithful": lic_over_runs(human, fa, labels, name="faithful", **kw),
            "amplifier": lic_over_runs(human, am, labels, name="amplifier", **kw), "captions": (fa, am)}


def _t_tolerance(res, floor):
    "t_{0.975, N-1} x standard error of the mean of the paired per-run LIC, at least `floor` (points x100)."
    return lic_chance_tolerance(res, floor)


def test_planted_labels_are_the_truth(planted):
    human, labels, p = planted
    truth = dict(zip(p.truth.image_id, p.truth.gender))
    assert labels == truth                                     # caption-derived gender recovers the planted gender


def test_known_answers_on_planted_captions(planted_lic):
    """Faithful captioner: LIC within chance of 0; amplifier: clearly positive.

    Tolerance: the faithful mean LIC must lie within t_{0.975,N-1} standard errors of 0 (what chance alone produces
    95 % of the time, SE from the run-to-run sd of the paired LIC), and within 2 points (the paper's own run-to-run sd
    of LIC_M is 0.7-1.5); the amplifier's interval LIC - max(t*SE, 5) must lie above 0 and above the
    faithful captioner's mean LIC."""
    f, a = planted_lic["faithful"], planted_lic["amplifier"]
    ka = known_answer("lic.planted")
    tol_f, tol_a = _t_tolerance(f, ka["faithful_t_floor"]), _t_tolerance(a, ka["amplifier_t_floor"])
    assert abs(f.summary["LIC"]) <= tol_f, (f.summary, tol_f)
    assert a.summary["LIC"] - tol_a > max(0.0, f.summary["LIC"]), (a.summary, tol_a)
    assert f.summary["LIC_D"] > ka["human_lic_d_above"]                              # planted contexts are gender-skewed: human captions leak
    assert len(a.runs) == 3 and {"LIC_M_std", "LIC_D_std", "LIC_std"} <= set(a.summary)


def test_lic_summary_is_metrics_lic_of_the_stored_posteriors(planted_lic):
    r = planted_lic["amplifier"]
    np.testing.assert_allclose(r.runs.LIC_M, lic_score(r.probs_model, r.labels_model, 100))
    np.testing.assert_allclose(r.summary["LIC_M"], r.runs.LIC_M.mean())
    np.testing.assert_allclose(r.summary["LIC_std"], r.runs.LIC.std(ddof=1))
    n_test = r.runs.n_test.iloc[0]
    assert r.probs_model.shape == (3, n_test, 2) and r.probs_data.shape == (3, n_test, 2)


def test_human_classifier_sees_only_the_model_vocabulary(planted, planted_lic):
    "Vocabulary alignment: f* is trained on human captions whose words outside V_pre became <unk>."
    human, labels, _ = planted
    r = planted_lic["faithful"]
    fa = planted_lic["captions"][0]
    vpre = {t for i in labels for t in prepare_caption(fa[i])}
    assert set(r.human_classifier.vocab.itos) - {"<pad>", "<unk>"} <= vpre
    assert r.vocabulary >= vpre


def test_lic_is_deterministic_given_the_seed(planted):
    human, labels, _ = planted
    fa = faithful_captioner(human, seed=1)
    kw = dict(config=FAST.__class__(**{**FAST.__dict__, "epochs": 1}), n_runs=2, seed=5, human_captions_per_image=1, progress=False)
    a, b = lic_over_runs(human, fa, labels, **kw), lic_over_runs(human, fa, labels, **kw)
    assert a.summary == b.summary
    c = lic_over_runs(human, fa, labels, n_jobs=2, **kw)          # f* and f_hat trained in two worker processes
    np.testing.assert_allclose(c.probs_model, a.probs_model, atol=1e-6)
    np.testing.assert_allclose(c.probs_data, a.probs_data, atol=1e-6)


@requires_shared("coco/annotations/captions_val2017.json")
def test_known_answers_on_real_coco_val():
    "Human side on the real COCO val 2017 captions (caption-derived gender): faithful ~ 0, amplifier clearly > 0."
    from vlbias_nb.data.coco import load_coco_captions
    from vlbias_nb.paths import shared_path
    human = load_coco_captions(shared_path("coco/annotations/captions_val2017.json")).captions_by_image()
    labels = caption_gender_labels(human)
    # all five human captions per image (the authors' code): with one (caption 0) the derived seeds give a faithful LIC of
    # 4.5 against a t interval of 3.8; the faithful captioner's LIC runs about +2.5 on these captions (K = 5: 1.9, 3.9, 1.6)
    kw = dict(config=FAST, n_runs=3, seed=0, human_captions_per_image=5, progress=False, n_jobs=2)
    f = lic_over_runs(human, faithful_captioner(human, 0), labels, name="faithful", **kw)
    a = lic_over_runs(human, amplifying_captioner(human, labels, min_count=20, seed=0), labels, name="amplifier", **kw)
    assert f.runs.n_train.iloc[0] == 926 and f.runs.n_test.iloc[0] == 102          # 514 female images -> 463 + 51 each
    assert f.summary["LIC_D"] > 25                              # masked human captions still reveal gender
    ka = known_answer("lic.planted")                            # the fast test classifier: the t-interval checks of the fixtures
    assert abs(f.summary["LIC"]) <= _t_tolerance(f, ka["faithful_t_floor"]), f.summary
    assert a.summary["LIC"] - _t_tolerance(a, ka["amplifier_t_floor"]) > max(0.0, f.summary["LIC"]), a.summary


# ---- inputs -------------------------------------------------------------------------------------------------------

def test_generated_captions_with_unknown_ids_name_the_file(tmp_path):
    human = {1: ["a man"], 2: ["a woman"], 3: ["a dog"]}
    p = tmp_path / "oscar_results.json"
    p.write_text(json.dumps([{"image_id": 1, "caption": "x"}, {"image_id": 2, "caption": "y"}, {"image_id": 99, "caption": "z"}]))
    gen = load_generated_captions(p)
    with pytest.raises(ImageIdMismatchError, match=r"oscar_results\.json are not in the human captions: 99"):
        match_inputs(human, {"OSCAR": gen}, {1: "male", 2: "female"}, generated_sources={"OSCAR": str(p)})
    p.write_text(json.dumps([{"image_id": 1, "caption": "x"}]))
    with pytest.raises(ImageIdMismatchError, match=r"lack 1 image id\(s\) of the labelled evaluation images: 2"):
        match_inputs(human, {"OSCAR": load_generated_captions(p)}, {1: "male", 2: "female"}, generated_sources={"OSCAR": str(p)})


def test_attribute_file_without_matching_ids(tmp_path):
    p = tmp_path / "images_val2014.csv"
    p.write_text("id,bb_skin,bb_gender\n500,Light,Male\n501,Dark,Female\n")
    with pytest.raises(ImageIdMismatchError, match="images_val2014.csv has human captions"):
        match_inputs({1: ["a"]}, {}, load_attribute_annotations(p), str(p))
    with pytest.warns(UserWarning, match="1 labelled image id"):
        assert match_inputs({500: ["a"]}, {}, load_attribute_annotations(p), str(p)) == {500: "male"}


def test_race_path_no_masking(tmp_path, planted):
    "Skin tone from a Zhao-format file; captions are not masked (LIC §5), so a named word can carry the attribute."
    human, _, _ = planted
    ids = sorted(human)[:400]
    skin = {i: ("darker" if k % 2 else "lighter") for k, i in enumerate(ids)}
    p = tmp_path / "images_val2014.csv"
    p.write_text("id,bb_skin,bb_gender\n" + "".join(f"{i},{'Dark' if v == 'darker' else 'Light'},Unsure\n" for i, v in skin.items()))
    labels = load_attribute_annotations(p, "skin")
    assert labels == skin
    sub = {i: human[i] for i in ids}
    gen = {i: f"a person {'woman' if skin[i] == 'darker' else 'man'} outside" for i in ids}   # a gender word leaks the label
    masked = lic_over_runs(sub, gen, labels, FAST, n_runs=1, mask=True, human_captions_per_image=1, progress=False)
    unmasked = lic_over_runs(sub, gen, labels, FAST, n_runs=1, mask=False, human_captions_per_image=1, progress=False)
    assert masked.summary["LIC_M"] < 35 < 45 < unmasked.summary["LIC_M"]


# ---- classifiers --------------------------------------------------------------------------------------------------

def test_paper_training_setups():
    assert (paper_classifier("lstm").epochs, paper_classifier("lstm").lr) == (20, 5e-5)
    assert (paper_classifier("bert-ft").epochs, paper_classifier("bert-ft").lr) == (5, 1e-5)
    assert (paper_classifier("bert-pre").epochs, paper_classifier("bert-pre").lr) == (20, 5e-5)


@pytest.mark.parametrize("kind", ["bert-ft", "bert-pre"])
def test_tiny_bert_classifiers_train_and_bert_pre_is_frozen(kind):
    toks = [prepare_caption(f"a man with a {w}") for w in ["tie", "suit"] * 10] + \
           [prepare_caption(f"a woman with a {w}") for w in ["purse", "dress"] * 10]
    y = [0] * 20 + [1] * 20
    clf = CaptionAttributeClassifier(paper_classifier(kind, epochs=3, lr=1e-3, bert="tiny-bert", batch_size=8), seed=0)
    clf.fit(toks, y)
    p = clf.predict_proba(toks[:2] + [[OOV_TOKEN, "<gender>"]])
    assert p.shape == (3, 2) and np.allclose(p.sum(1), 1)
    from vlbias_nb.papers.lic.captioning_bias import load_bert
    ref, _ = load_bert("tiny-bert", toks, seed=0)                 # same seed -> the initial BERT weights
    changed = any(not torch.equal(a, b) for a, b in zip(ref.state_dict().values(), clf.net.bert.state_dict().values()))
    assert changed == (kind == "bert-ft")


def test_occlusion_contribution_finds_the_revealing_word():
    toks = [["a", "<gender>", "with", w] for w in ["tie", "suit"] * 30] + [["a", "<gender>", "with", w] for w in ["purse", "dress"] * 30]
    clf = CaptionAttributeClassifier(ClassifierConfig(epochs=25, lr=1e-2, hidden_dim=8, embedding_dim=8, batch_size=16)).fit(toks, [0] * 60 + [1] * 60)
    c = word_contributions(clf, ["a", "<gender>", "with", "dress"], 1)
    c_tie = word_contributions(clf, ["a", "<gender>", "with", "tie"], 0)
    assert c.argmax() == 3 and c_tie.argmax() == 3 and c[3] > 0 and c_tie[3] > 0, (c, c_tie)
    # both occlusions meet at "a <gender> with <unk>": together they span p_female(dress) - p_female(tie), whatever the
    # classifier makes of the unseen <unk> (one side alone depends on that prior: 0.13 for 'dress' with the derived seeds)
    p = clf.predict_proba([["a", "<gender>", "with", "dress"], ["a", "<gender>", "with", "tie"]])[:, 1]
    assert np.isclose(c[3] + c_tie[3], p[0] - p[1]) and c[3] + c_tie[3] > 0.9, (c, c_tie, p)


# ---- Ratio, Error, BA, DBA on the synthetic captioners ----------------------------------------------------------

def test_gender_word_metrics_cannot_see_context_amplification(planted):
    "The amplifier keeps the faithful caption's gender words: Ratio, Error and DBA_G are equal; BA and DBA_O rise."
    human, labels, p = planted
    fa = faithful_captioner(human, seed=2)
    am = amplifying_captioner(human, labels, min_count=20, seed=2)
    for f in (lambda c: gender_ratio(caption_gender(c[i]) for i in labels),
              lambda c: gender_error({i: caption_gender(c[i]) for i in labels}, labels)):
        assert f(fa) == f(am)
    objects = {i: {c} for i, c in zip(p.truth.image_id, p.truth.context)}
    assert caption_dba_g(human, fa, objects) == caption_dba_g(human, am, objects)
    caps = [c for cs in human.values() for c in cs]
    words = ba_vocabulary(caps, min_per_gender=20)
    ba_f, ba_a = caption_ba(caps, [fa[i] for i in human], words), caption_ba(caps, [am[i] for i in human], words)
    assert abs(ba_f) < 2 and ba_a > ba_f + 2
    syn = {"skateboard": ["skateboard", "skate board"], "kite": ["kite"], "laptop": ["laptop", "computer"],
           "sink": ["sink"], "tennis racket": ["racket", "racquet", "tennis racket"]}
    assert abs(caption_dba_o(human, fa, labels, list(syn))) < 1.0
    assert gender_error({i: caption_gender(fa[i]) for i in labels}, labels) == 0.0   # caption-derived labels: no errors


def test_amplifier_words_are_associated_with_the_right_gender(planted):
    human, labels, p = planted
    w = attribute_context_words(human, labels, top_k=5, min_count=20)
    male_share = {c.name: c.male_share for c in p.contexts}
    vocab = {c.name: {t for phrase in c.objects + c.actions + c.places for t in phrase.split()} for c in p.contexts}
    def ctx_share(word):
        shares = [male_share[n] for n, v in vocab.items() if word in v]
        return np.mean(shares) if shares else 0.5
    assert np.mean([ctx_share(x) for x in w["male"]]) > 0.6 > 0.45 > np.mean([ctx_share(x) for x in w["female"]])


def test_balanced_split_sizes_and_seed():
    labels = {i: ("female" if i % 3 == 0 else "male") for i in range(300)}   # 100 female
    tr, te = balanced_split(labels, 0.1, seed=4)
    assert (len(tr), len(te)) == (180, 20) and not set(tr) & set(te)
    assert sum(labels[i] == "female" for i in te) == 10
    assert balanced_split(labels, 0.1, seed=4) == (tr, te)
    with pytest.raises(ValueError, match="Too few labelled images"):
        balanced_split({1: "male", 2: "female"}, 0.1)


# ---------------------------------------------------------------- captioning accuracy (Tab. 1 accuracy columns)
from vlbias_nb.papers.lic.caption_accuracy import (
    caption_accuracy, simple_ptb_tokenize, ptb_tokenize, tokenize_for_eval, java_available)

needs_java = pytest.mark.skipif(not java_available(), reason="java not on the PATH (PTB tokenizer, METEOR)")


def test_bleu4_is_corpus_level_hand_worked():
    # caption 1: p_n = 4/5, 3/4, 2/3, 1/2; caption 2 identical (4 tokens): p_n = 1. Corpus: sums of matches / totals.
    acc = caption_accuracy({1: ["a b c d f"], 2: ["x y z w"]}, {1: "a b c d e", 2: "x y z w"}, ["BLEU-4"], tokenizer="simple")
    corpus = (8 / 9 * 6 / 7 * 4 / 5 * 2 / 3) ** 0.25
    assert acc["BLEU-4"] == pytest.approx(100 * corpus, rel=1e-6)
    sentence_mean = (0.2 ** 0.25 + 1) / 2
    assert abs(acc["BLEU-4"] - 100 * sentence_mean) > 1          # not an average of sentence BLEUs


def test_bleu_brevity_penalty_closest_reference():
    # candidate length 4; references of length 8 and 5: the closest (5) sets r; all precisions are 1
    acc = caption_accuracy({1: ["a b c d e f g h", "a b c d x"]}, {1: "a b c d"}, ["BLEU-4"], tokenizer="simple")
    assert acc["BLEU-4"] == pytest.approx(100 * np.exp(1 - 5 / 4), rel=1e-6)


def test_rouge_l_hand_worked_multi_reference():
    # refs "a b" (LCS 2: P 2/4, R 1) and "x c d y z" (LCS 2: P 2/4, R 2/5): best P 1/2, best R 1, beta = 1.2
    acc = caption_accuracy({1: ["a b", "x c d y z"]}, {1: "a b c d"}, ["ROUGE-L"], tokenizer="simple")
    b2 = 1.2 ** 2
    assert acc["ROUGE-L"] == pytest.approx(100 * (1 + b2) * 0.5 * 1 / (1 + b2 * 0.5), rel=1e-9)


def test_cider_hand_worked():
    # idf = log 2 for every reference n-gram; image 1 cosine 1 for n = 1, 2 -> 10 * 2/4; image 2 unigram cosine 1/2 -> 10 * 0.5/4
    acc = caption_accuracy({1: ["a b"], 2: ["c d"]}, {1: "a b", 2: "c e"}, ["CIDEr"], tokenizer="simple")
    assert acc["CIDEr"] == pytest.approx(100 * (5 + 1.25) / 2)
    # a caption whose length differs from its reference by 2 words pays the Gaussian penalty exp(-4 / 72)
    a2 = caption_accuracy({1: ["a b"], 2: ["c d"]}, {1: "a b", 2: "c d q r"}, ["CIDEr"], tokenizer="simple")
    # image 2 (all idf log 2): unigrams {c, d} vs {c, d, q, r} -> cosine 2/(sqrt2*2) = 1/sqrt2; bigrams {cd} vs {cd, dq, qr} -> 1/sqrt3
    img2 = 10 * np.exp(-4 / 72) * (1 / np.sqrt(2) + 1 / np.sqrt(3)) / 4
    assert a2["CIDEr"] == pytest.approx(100 * (5 + img2) / 2, rel=1e-9)


def test_tokenizers_and_punctuation():
    assert simple_ptb_tokenize("A man's dog, isn't it?") == "a man 's dog is n't it"
    assert tokenize_for_eval({3: ["Hi!", "Yo."]}, "simple") == {3: ["hi", "yo"]}
    with pytest.raises(ValueError, match="tokenizer"):
        tokenize_for_eval({3: ["x"]}, "nltk")
    # punctuation and case do not change the scores
    a = caption_accuracy({1: ["A man, riding a horse."]}, {1: "a man riding a horse"}, ["BLEU-4", "CIDEr", "ROUGE-L"], tokenizer="simple")
    assert a["BLEU-4"] == pytest.approx(100) and a["ROUGE-L"] == pytest.approx(100)


@needs_java
@requires_shared("coco/annotations/captions_val2017.json")
def test_simple_tokenizer_agrees_with_ptb_on_coco():
    from vlbias_nb.data.coco import load_coco_captions
    from vlbias_nb.paths import shared_path
    caps = list(load_coco_captions(shared_path("coco/annotations/captions_val2017.json")).captions.caption[:2000])
    agree = np.mean([a == b for a, b in zip(ptb_tokenize(caps), (simple_ptb_tokenize(c) for c in caps))])
    assert agree > 0.99, agree


@needs_java
def test_meteor_known_values():
    ref = {1: ["a man riding a horse on the beach"]}
    assert caption_accuracy(ref, {1: "a man riding a horse on the beach"}, ["METEOR"])["METEOR"] == pytest.approx(100)
    shuffled = caption_accuracy(ref, {1: "the beach on a horse riding a man"}, ["METEOR"])["METEOR"]
    assert 0 < shuffled < 100                       # same words, fragmented alignment: penalised
    assert caption_accuracy(ref, {1: "two cats sleep"}, ["METEOR"])["METEOR"] == pytest.approx(0)


def test_caption_accuracy_bad_input():
    with pytest.raises(ImageIdMismatchError, match="not in the reference captions"):
        caption_accuracy({1: ["a"]}, {2: "a"}, ["CIDEr"])
    with pytest.raises(ValueError, match="at least one reference"):
        caption_accuracy({1: []}, {1: "a"}, ["CIDEr"])
    with pytest.raises(ValueError, match="not a string"):
        caption_accuracy({1: ["a"]}, {1: ["a"]}, ["CIDEr"])
    with pytest.raises(ValueError, match="unknown caption metric"):
        caption_accuracy({1: ["a"]}, {1: "a"}, ["SPICE"])


def test_amplifier_is_less_accurate_than_faithful(planted):
    # leave-one-out references: the faithful caption scored against the image's other human captions
    human, labels, _ = planted
    fa = faithful_captioner(human, seed=1)
    am = amplifying_captioner(human, labels, seed=1)
    refs = {i: [c for j, c in enumerate(cs) if j != cs.index(fa[i])] for i, cs in human.items()}
    m = ["BLEU-4", "CIDEr", "ROUGE-L"]
    a_f = caption_accuracy(refs, fa, m, tokenizer="simple")
    a_a = caption_accuracy(refs, am, m, tokenizer="simple")
    for k in m:
        assert a_a[k] < a_f[k], (k, a_f, a_a)
    # the faithful caption scored against all captions (itself included) is perfect for BLEU and ROUGE-L
    a_self = caption_accuracy(human, fa, ["BLEU-4", "ROUGE-L"], tokenizer="simple")
    assert a_self["BLEU-4"] == pytest.approx(100) and a_self["ROUGE-L"] == pytest.approx(100)


def test_lic_intervals_belong_to_the_reported_numbers(planted_lic):
    "The bootstrap units (run, test image) average exactly to LIC_M, LIC_D and LIC; chance 25 / 25 / 0; intervals hold the means."
    from vlbias_nb.papers.lic.lic_runs import lic_sample_scores, lic_intervals
    a = planted_lic["amplifier"]
    m, d = lic_sample_scores(a)
    assert len(m) == len(d) == len(a.runs) * a.runs.n_test.iloc[0]
    assert np.isclose(m.mean(), a.summary["LIC_M"]) and np.isclose(d.mean(), a.summary["LIC_D"])
    t = lic_intervals(a, n_boot=300).set_index("metric")
    assert t.chance.tolist() == [25.0, 25.0, 0.0]
    assert ((t.ci_low <= t.ours) & (t.ours <= t.ci_high)).all()
    assert t.ci_low["LIC"] > 0                                  # the planted amplifier clears chance on test samples alone


# ---------------------------------------------------------------- fidelity (issue 22): App. B subset, intervals, Fig. 3, §5.4
def test_gender_word_subset_changes_the_gender_word_metrics():
    "App. B's colour-marked subset is lost: the subset is a parameter, and a smaller one sees fewer gendered captions."
    from vlbias_nb.papers.lic.captions import gender_word_subset
    from vlbias_nb.papers.lic.gender_metrics import gender_metric_intervals
    human = {1: ["a man with a dog", "a guy"], 2: ["a woman with a cat", "a lady"], 3: ["a man", "a dude"], 4: ["a woman", "a girl"]}
    labels = {1: "male", 2: "female", 3: "male", 4: "female"}
    gen = {1: "a guy with a dog", 2: "a woman with a cat", 3: "a man", 4: "a girl and a man"}
    full = gender_metric_intervals(human, gen, labels, ["dog", "cat"], n_boot=100).set_index("metric")
    few = gender_metric_intervals(human, gen, labels, ["dog", "cat"], gender_words=gender_word_subset(["man", "woman"]),
                                  n_boot=100).set_index("metric")
    assert full.ours["Ratio"] == 2.0 and full.ours["Error"] == 0.0           # all words: guy male, 'girl and man' neutral
    assert few.ours["Ratio"] == 2.0 and few.ours["Error"] == 25.0            # man/woman only: guy neutral, 'girl and man' male
    assert caption_gender("a guy", gender_word_subset(["man", "woman"])) == "undefined"
    assert (full.chance.tolist()[:3]) == [1.0, 50.0, 0.0]
    with pytest.raises(ValueError, match="not LIC App. B words"):
        gender_word_subset(["man", "dog"])


def test_gender_metric_intervals_match_the_point_estimates(planted):
    from vlbias_nb.papers.lic.gender_metrics import gender_metric_intervals
    human, labels, p = planted
    am = amplifying_captioner(human, labels, strength=1.0, n_insert=2, min_count=20, seed=1)
    words = ["kitchen", "skateboard", "beach", "street"]
    t = gender_metric_intervals(human, am, labels, words, n_boot=200).set_index("metric")
    assert np.isclose(t.ours["BA"], caption_ba([c for i in human for c in human[i]], [am[i] for i in human], words))
    assert np.isclose(t.ours["DBA_O"], caption_dba_o(human, am, labels))
    assert ((t.ci_low <= t.ours) & (t.ours <= t.ci_high)).all()


def test_fig3_trend_refitted_from_the_papers_table1():
    "R² of LIC ~ BLEU-4 over the paper's nine printed Tab. 1 rows: 0.166 by hand (numpy corrcoef), the paper prints 0.156."
    from vlbias_nb.papers.lic.lic_runs import linear_trend
    from vlbias_nb.report import paper_values
    t1 = paper_values("LIC", "Tab. 1").pivot(index="model", columns="metric", values="value")
    tr = linear_trend(t1["BLEU-4"], t1["LIC"])
    assert np.isclose(tr["r2"], np.corrcoef(t1["BLEU-4"], t1["LIC"])[0, 1] ** 2) and abs(tr["r2"] - 0.1659) < 1e-3
    assert abs(tr["r2"] - paper_values("LIC", "Fig. 3", metric="R2_LIC_vs_BLEU-4").value[0]) < 0.02


@requires_shared("coco-mini/annotations/instances_val2017.json")
def test_masked_versions_on_real_coco_mini():
    "§5.4 masks on real images: w/o both = the union of w/o object and w/o person; OSCAR drops the regions on the masked boxes."
    from PIL import Image
    from vlbias_nb.paths import shared_path
    from vlbias_nb.papers.lic.masked_images import (load_instance_annotations, masked_versions, keep_regions, object_gender_bias,
                                                    gender_correlated_object)
    recs, anns = load_instance_annotations(shared_path("coco-mini/annotations/instances_val2017.json"))
    i = next(i for i in sorted(anns) if {"person"} < {a["category"] for a in anns[i]})
    other = sorted({a["category"] for a in anns[i]} - {"person"})[0]
    im = np.asarray(Image.open(shared_path("coco-mini/val2017") / recs[i]["file_name"]).convert("RGB"))
    v = masked_versions(im, anns[i], other)
    black = {c: (x == 0).all(-1) & ~(im == 0).all(-1) for c, x in v.items()}
    assert black["original"].sum() == 0 and black["w/o object"].sum() > 0 and black["w/o person"].sum() > 0
    assert (black["w/o both"] == (black["w/o object"] | black["w/o person"])).all()
    boxes = np.array([[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3]]
                      for a in anns[i] if a["category"] == "person"])
    assert not keep_regions(boxes, boxes).any() and keep_regions(boxes + 10_000, boxes).all()
    objs = {j: {a["category"] for a in anns[j]} for j in anns}
    g = {j: ("male" if k % 2 else "female") for k, j in enumerate(sorted(objs))}
    b = object_gender_bias(objs, g)
    assert np.allclose(b.sum(axis=1), 1) and gender_correlated_object(objs[i], g[i], b) in objs[i] - {"person"}

def test_lic_m_over_runs_repeats_lic_over_runs_and_a_given_vocabulary_aligns_the_humans(planted):
    "lic_m_over_runs: the same splits and f_hat as lic_over_runs; lic_over_runs(vocabulary=) aligns f*'s captions to that V_pre."
    from vlbias_nb.papers.lic.lic_runs import lic_m_over_runs
    human, labels, _ = planted
    gen = faithful_captioner(human, 0)
    cfg = ClassifierConfig(kind="lstm", epochs=2, lr=1e-2, embedding_dim=16, hidden_dim=8, batch_size=32)
    full = lic_over_runs(human, gen, labels, cfg, n_runs=2, seed=3, human_captions_per_image=1, progress=False,
                         vocabulary={"a", "on", "the"}, keep_classifiers=True)
    only_m = lic_m_over_runs({"faithful": gen}, labels, cfg, n_runs=2, seed=3)["faithful"]
    assert np.allclose(only_m.runs.LIC_M, full.runs.LIC_M) and only_m.test_ids == full.test_ids
    assert set(full.human_classifier.vocab.itos) <= {"<pad>", "<unk>", "<gender>", "a", "on", "the"}   # nothing outside V_pre

@pytest.mark.skipif(not __import__("vlbias_nb.data.releases", fromlist=["has_release"]).has_release("lic"),
                    reason="the LIC release is not here (set VLBIAS_LIC_RELEASE or VLBIAS_DATA)")
def test_released_captions_give_the_paper_s_error():
    "Tab. 1's Error of the nine captioners from their released captions: within one unit of the paper's printed decimal (App. B words)."
    from vlbias_nb.data.lic_release import PAPER_CAPTIONERS, load_lic_captions, lic_labels
    from vlbias_nb.report import paper_values
    paper = paper_values("LIC", "Tab. 1", metric="Error").set_index("model").value
    for n in PAPER_CAPTIONERS:
        e = load_lic_captions(n)
        lab = lic_labels(e)
        pred = {i: caption_gender(c) for i, c in zip(e.image_id, e.caption)}
        assert abs(gender_error(pred, lab) - paper[n]) <= 0.1, n     # within one printed unit: NIC 14.249 against 14.3, the rest within ±0.05

"""Every analysis notebook, executed end to end in the smoke profile (the README's first command, one notebook a test),
with its planted known answers read back from the tables it wrote; and the COCO analyses on planted data alone."""
import json, pytest
import numpy as np, pandas as pd
from vlbias_nb.resources import known_answer
from vlbias_nb.run.parameters import analysis_notebooks
from vlbias_nb.run.execution import run_notebook

NOTEBOOKS = analysis_notebooks()

def _table(d, name): return pd.read_csv(d / "tables" / f"{name}.csv")

def check_coco_gender_labels(d):
    ka = known_answer("gensynth.gender_labels")                                     # the bounds the notebook asserts
    t = _table(d, "planted_label_recovery")
    assert (t.label_accuracy >= ka["label_accuracy_at_least"]).all()
    assert np.allclose(t.recovered_male_share, t.realised_male_share, atol=ka["male_share_within"])
    gendered = t.n_male + t.n_female                                                 # the shares are among gendered images
    assert ((t.realised_male_share - t.planted_male_share).abs() <= 0.5 / gendered + 1e-9).all()   # rounded to whole images
    assert np.allclose(t.realised_male_share, t.n_male / gendered, rtol=0, atol=1e-3)
    n = _table(d, "neutralised_examples")                                            # Tab. 5: text beside text, no `paper` column
    assert "paper" not in n.columns and n.tab5_as_printed.notna().sum() == 3
    assert (n.neutral == n.tab5_as_printed).sum() == 2                              # all but the paper's 'car' for 'cat'
    if (d / "tables" / "coco_val_gender_labels.csv").exists():                        # the real COCO val captions: images and percent rows
        c = _table(d, "coco_val_gender_labels")
        assert c.columns[:7].tolist() == ["label", "metric", "ours", "paper", "delta", "comparable", "reason"]
        im, pc = (c[c.metric == m].set_index("label") for m in ("images", "percent"))
        assert im.paper.to_dict() == {"male": 1275, "female": 539, "undefined": 3186} and im.ours.sum() == 5000
        assert pc.paper.to_dict() == {"male": 25.5, "female": 10.8, "undefined": 63.7}
        assert np.allclose(pc.ours, (100 * im.ours / 5000).round(1)) and np.allclose(pc.delta, (pc.ours - pc.paper).round(1))

def check_coco_spurious_clusters(d):
    ka = known_answer("gensynth.spurious_clusters")
    r = _table(d, "planted_cluster_recovery").iloc[0]
    assert r.purity >= ka["purity_at_least"] and r.ari >= ka["ari_at_least"]
    assert (_table(d, "planted_delta_m").error_vs_planted.abs() <= ka["delta_m_error_at_most"]).all()   # each context's ΔM
    a = _table(d, "planted_classifier_auc")
    text, masked = a[a.classifier.str.startswith("text")], a[a.classifier.str.contains("person-masked")].iloc[0]
    assert (text.auc > ka["text_auc_at_least"]).all() and (text.auc >= text.oracle_auc - ka["text_auc_below_oracle_at_most"]).all()
    assert ka["masked_auc_at_least"] < masked.auc <= masked.oracle_auc + ka["masked_auc_above_oracle_at_most"]
    p6 = _table(d, "paper_tab6").set_index("paper_name")                             # the paper's Tab. 6, no paper_* columns
    assert len(p6) == 20 and p6.delta_m["sports (skateboarding)"] == 27.9 and p6.delta_m["leisure (street)"] == -30.7
    if (d / "tables" / "coco_clusters_vs_paper_tab6.csv").exists():                  # real captions: word-matched clusters
        s = _table(d, "coco_clusters_vs_paper_tab6")
        assert s.columns[:7].tolist() == ["paper_name", "ours", "paper", "delta", "comparable", "reason", "chance"]
        assert (s.paper == s.paper_name.map(p6.delta_m)).all() and (s.n_shared >= 3).all()
        assert (s.ci_covers_paper == ((s.delta_m_low <= s.paper) & (s.paper <= s.delta_m_high))).all()

def check_tfidf_table1(d):
    ka = known_answer("gensynth.tfidf_table1")
    if (d / "tables" / "tfidf_vs_paper.csv").exists():                               # real captions: a std is its own row
        tf = _table(d, "tfidf_vs_paper")
        assert tf.columns[:8].tolist() == ["model", "setting", "metric", "ours", "paper", "delta", "comparable", "reason"]
        sd = tf[tf.metric.str.endswith(" std")]
        assert len(sd) == 8 and (sd.setting == "balanced").all() and (sd.paper == 0.0).all() and (sd.ours > 0).all()
        assert np.allclose(tf.delta, tf.ours - tf.paper)
        rf = _table(d, "random_feature_model")                                      # Tab. 1's random row: the authors' model, run to run
        assert len(rf) == 8 and (rf.runs >= 2).all() and (rf.interval_low < rf.ours).all() and (rf.ours < rf.interval_high).all()
        assert (rf.inside_interval == ((rf.interval_low <= rf.paper) & (rf.paper <= rf.interval_high))).all()
        lc = _table(d, "coco_val_label_counts").set_index("label")                  # the labels behind it, beside §3.2's
        assert lc.paper.to_dict() == {"male": 1275, "female": 539, "undefined": 3186} and lc.ours.sum() == lc.authors_script_tokenisation.sum() == 5000
    t = _table(d, "planted_known_answers")
    dev = (t.random_simulated - t.random_closed_form).abs()
    assert (dev <= ka["random_within_abs"]).all() and (dev <= np.maximum(ka["random_within_standard_errors"] * t.random_se, 1e-9)).all()
    sk, ct = (t[t.data == name].set_index("metric") for name in ("skewed contexts", "control: equal shares"))
    for m in ["maxskew@25", "maxskew@100"]:
        assert sk.tfidf[m] > ka["skewed_over_random_factor"] * sk.random_closed_form[m] + ka["skewed_over_random_margin"]
        assert abs(ct.tfidf[m] - ct.random_closed_form[m]) < ka["control_within_abs"]

def check_lic(d):
    t = _table(d, "known_answers").set_index("check")
    assert t.passed.all()
    faithful = t.loc[[c for c in t.index if c.startswith("faithful")][0]]
    amplifier = t.loc[[c for c in t.index if c.startswith("amplifier")][0]]
    ka = known_answer("lic.synthetic_captioners")                                   # the bounds the notebook asserts
    assert abs(faithful.LIC) <= ka["faithful_abs_lic_at_most"]                       # below the paper's least-amplifying model
    assert amplifier.ci_low - max(0.0, faithful.LIC) >= ka["amplifier_lower_above_faithful"]
    assert amplifier.LIC >= ka["amplifier_lic_at_least"]
    t2 = _table(d, "tab2_lic_lstm")                                                 # every LIC number with chance and interval
    ours = t2[t2.ours.notna()]
    assert set(ours.metric) == {"LIC_M", "LIC_D", "LIC"} and ours.chance.notna().all()
    assert ((ours.ci_low <= ours.ours) & (ours.ours <= ours.ci_high)).all()
    assert (ours.chance[ours.metric == "LIC"] == 0).all() and (ours.chance[ours.metric != "LIC"] == 25).all()
    assert not t2[t2.model.str.contains("synthetic")].comparable.any()
    t1 = _table(d, "tab1_gender_metrics")                                           # Ratio ... DBA_O with chance and interval too
    o = t1[t1.model.str.contains("synthetic") & t1.ours.notna() & t1.metric.isin(["LIC", "LIC_M", "Ratio", "Error", "BA", "DBA_O"])]
    assert len(o) == 12 and o.chance.notna().all() and ((o.ci_low <= o.ours + 1e-9) & (o.ours <= o.ci_high + 1e-9)).all()
    ledger = _table(d, "ledger").set_index("item")
    fig3 = ledger.loc[["Fig. 3"]]                                                   # R² refitted from the paper's Tab. 1
    assert np.isclose(fig3[fig3.status == "reproduced"].ours.iloc[0], 0.1659, atol=1e-3)
    assert (d / "figures" / "fig3_lic_vs_vocabulary_bleu.png").exists() and (d / "figures" / "fig2_ranked_captions.png").exists()
    assert set(_table(d, "supp_tab1_lic_race_encoders").group) == {"LSTM", "BERT-ft", "BERT-pre"}
    dc = _table(d, "data_counts")                                                   # counts beside the paper's §5 data, one layout
    assert list(dc.columns) == ["quantity", "ours", "paper", "delta", "comparable", "reason"]
    dc = dc.set_index("quantity")
    assert dc.paper["images labelled male or female"] == 10780 and dc.paper["balanced train images"] == 5966
    assert dc.ours["images labelled male or female"] == dc.ours["images labelled male"] + dc.ours["images labelled female"]
    assert np.allclose(dc.delta.dropna(), (dc.ours - dc.paper).dropna()) and not dc.comparable.any()   # captions' gender, not Zhao et al.'s
    led = _table(d, "ledger")
    assert not ((led.status == "reproduced") & led.departs.fillna("").ne("")).any()    # other data or protocol: at most partly
    lic_d = led[led.quantity.str.startswith("LIC_D with the LSTM: the human captions' side")]
    assert (lic_d.status != "reproduced").all() and lic_d.departs.fillna("").ne("").all()   # 30.8 vs 39.1 on other data (issue #31)
    assert led[led.quantity.str.contains("faithful \\(synthetic\\) captioner's LIC", regex=True)].status.isin(["validated", "needs full profile"]).all()
    if (d / "tables" / "released_counts.csv").exists():                             # the LIC authors' released captions (issue #30)
        c5 = _table(d, "released_counts").set_index(["attribute", "quantity"]).ours
        assert (c5["gender", "labelled images"], c5["gender", "male"], c5["gender", "female"], c5["skin", "labelled images"]) == (10780, 7466, 3314, 10969)
        assert (c5["gender", "balanced train images"], c5["gender", "balanced test images"]) == (5966, 662)
        re_ = _table(d, "released_tab1_ratio_error")
        assert len(re_) == 18 and re_.chance.notna().all() and not np.isclose(re_[re_.metric == "Ratio"].chance, 1.0).any()   # ground truth, not 1 / 50
        err = re_[re_.metric == "Error"]
        assert (abs(err.ours - err.paper) <= 0.1).all()                              # Error from the released captions: within one printed unit
        for name, n_models in (("released_tab2_lic_lstm", 9), ("released_tab3_lic_skin", 9)):
            t = _table(d, name)
            every = t[t.images == "all labelled"]
            assert len(every) == n_models and (every.metric == "LIC_M").all() and (every.chance == 25).all()
            assert ((t.ci_low <= t.ours + 1e-9) & (t.ours <= t.ci_high + 1e-9)).all() and t.protocol.str.contains("runs ×").all()
            assert t["differs from the paper"].notna().all()
        assert len(_table(d, "released_tab4_masked")) == 8
        rel = led[led.evidence == "released outputs"]
        assert {"§5 data", "Tab. 1", "Tab. 2", "Tab. 3", "Tab. 4", "Obs. 1.3 NIC+Equalizer", "Obs. 2.2 mean LIC_M"} <= set(rel.item)
        assert (rel[rel.quantity.str.startswith("gender labelled images")].status == "reproduced").all()
        assert not led[led.item.isin(["Tab. 3", "Tab. 4", "Obs. 2.2 mean LIC_M"])].status.eq("needs full profile").any()

def check_prompt_array(d):
    t = _table(d, "known_answer_before_after").set_index("model")
    before = t.loc["CLIP (planted fit)"]
    after = t.loc[[m for m in t.index if m.startswith("+ debias tokens")][0]]
    ka = known_answer("prompt_array.debias_itc")                                    # the bounds the notebook asserts
    for k in ["maxskew", "ndkl"]:
        assert before[k] > ka["before_over_chance_at_least"] * t.loc["random ranking", k]   # clearly above the random level
    for k, b in ka["after_over_before_at_most"].items():                             # cut by at least half
        assert after[k] <= b * before[k], (k, after[k], before[k])
    assert after["i2t_R@1"] >= ka["after_over_before_at_least"]["downstream"] * before["i2t_R@1"]   # held-out retrieval mostly kept
    t7 = _table(d, "tab7_adaptation_targets")                                      # Tab. 7 on the planted source: tokens only in the prompt row
    assert t7.n_tokens.tolist() == [0, 2, 0, 0, 0] and (t7.data == "FairFace-style (planted)").all()
    assert not t7.comparable.any() and t7.reason.str.contains("planted data").all()   # beside the paper's numbers, flagged
    t4 = _table(d, "tab4a_cross_dataset")                                         # the one comparison layout, paper's labels
    assert list(t4.columns[:8]) == ["group", "data", "metric", "ours", "paper", "delta", "comparable", "reason"]
    ff = t4[(t4.group == "(a) trained on FairFace") & (t4.data == "FairFace val gender") & (t4.metric == "maxskew_change_%")].iloc[0]
    assert ff.paper == -68.71 and not ff.comparable and ff.ci_low <= ff.ours <= ff.ci_high   # pure adversarial row, with its interval
    base = t4[(t4.group == "(a) PT baseline") & (t4.metric == "maxskew")]
    assert (base.chance > 0).all() and (base.ours > base.chance).all()          # the planted bias is above a random ranking's
    t5 = _table(d, "tab5_zero_pad_tokens_vs_paper")                              # 0-3 tokens, prepended and appended
    assert len(t5[t5.ours.notna()]) == 8 and t5.paper.notna().sum() == 16
    t2 = _table(d, "tab2_models_vs_paper")                                        # the loop over models: tiny = pipeline check
    assert t2.model.nunique() == 10 and not t2.comparable.any() and (t2[t2.ours.notna()].zoo_name == "tiny-clip").all()
    p6 = _table(d, "tab6_paper")                                                   # the paper's Tab. 6 in paper_values' long layout
    assert list(p6.columns) == ["item", "model", "data", "metric", "group", "value", "source", "printed"] and len(p6) == 42
    assert p6.set_index(["model", "metric", "group"]).value[("CLIP ViT-B/16 debiased", "crime-related %", "White")] == 14.9
    io = _table(d, "known_answer_itc_only").set_index("quantity")                  # Tab. 3's ITC-only row on the planted world
    kio = known_answer("prompt_array.itc_only")["after_over_before_at_least"]
    assert io.met.all() and all(io.loc[q, "after ÷ before"] >= kio[k] for q, k in [("maxskew", "maxskew"), ("ndkl", "ndkl"), ("i2t_R@1", "downstream")])
    assert np.allclose(io["after ÷ before"], io["ITC only"] / io.before)
    f4 = _table(d, "fig4_models_datasets")                                        # Fig. 4: models × data sets × templates
    assert len(f4) == f4.model.nunique() * f4.data.nunique() * 8 and f4.model.nunique() >= 2 and not f4.comparable.any()
    assert (f4.maxskew_ci_low <= f4.maxskew).all() and (f4.maxskew <= f4.maxskew_ci_high).all()
    sp = _table(d, "fig4_spread").set_index("measure")
    assert sp.loc["WEAT effect size", "combinations"] == f4.groupby(["model", "data"]).ngroups

def check_gensynth_editing(d):
    e = _table(d, "edits")
    assert len(e) > 0 and not e.path.str.startswith("/").any()                     # no run-folder paths published
    assert (d / "figures" / "gensynth_edit_grid.png").exists()
    ps = _table(d, "planted_max_skew").set_index("K")                             # planted: ln(0.8/0.5), ln(0.7/0.5)
    assert np.allclose(ps.MaxSkew, [np.log(0.8 / 0.5), np.log(0.7 / 0.5)], atol=1e-6) and ps.n_images.tolist() == [300, 300]
    t3 = _table(d, "table3_8_9_max_skew")
    row = t3[t3.dataset == "planted skew (known answer)"].iloc[0]
    assert abs(row["MaxSkew@25"] - np.log(1.6)) < 1e-3 and abs(row["MaxSkew@100"] - np.log(1.4)) < 1e-3
    real = t3[t3.dataset != "planted skew (known answer)"]
    assert (real.K25_used == np.minimum(25, real.n_images)).all()                 # the cap is reported with the value
    t7 = _table(d, "table7_edit_templates")                                       # 4 templates x 2 genders, as printed
    assert len(t7) == 8 and t7.identical.all() and (t7.instruction == t7.tab7_as_printed).all()
    k = _table(d, "knn_filter_summary").set_index(["filter", "metric"])           # the paper's K, tau and images kept
    assert k.paper[("CLIP (App. A.3)", "K_real")] == 50 and k.paper[("DINO (App. F)", "K_real")] == 5000
    assert k.paper[("CLIP (App. A.3)", "images_kept")] == 3973 and k.paper[("DINO (App. F)", "images_kept")] == 571
    assert not k.comparable.any() and np.allclose(k.delta, k.ours - k.paper)   # smoke: tiny random-weight models
    src = _table(d, "sources_summary").iloc[0]
    assert src.paper == 11541 and src.ours >= src.sources_used and src.male + src.female == src.sources_used

def check_gab(d):
    ka = known_answer("gab")                                                        # the bounds the notebook asserts
    b = _table(d, "planted_binding_recovery")
    atol = ka["planted_binding"]["drop_atol"]
    assert np.allclose(b.drop_presence, b.planted_presence, rtol=0, atol=atol) and np.allclose(b.drop_binding, b.planted_binding, rtol=0, atol=atol)
    for g in ("U1", "E2", "U2"):
        assert np.allclose(b[f"acc_{g}"], b[f"planted_acc_{g}"], rtol=0, atol=ka["planted_binding"]["accuracy_atol"]), g
    t = _table(d, "planted_tab1_recovery")
    assert np.allclose(t.share, t.planted_share, rtol=0, atol=ka["planted_tab1"]["share_atol"])
    av = _table(d, "paper_averages_vs_ours")                                        # tiny models beside the paper's averages
    assert not av.comparable.any() and av.reason.str.contains("random weights").all()
    assert {"chance", "ci_low", "ci_high"} <= set(av.columns) and set(av.chance) == {0.0, 0.5}
    ar = _table(d, "tab5_7_activity_recognition")                                   # Tab. 5, 6 and 7 all run in smoke
    assert set(ar.source) == {"phaze1", "phaze2", "phaze3"} and (ar.chance > 0).all() and not ar.comparable.any()
    assert ((ar.ci_low <= ar.ours + 1e-12) & (ar.ours <= ar.ci_high + 1e-12)).all()
    assert set(_table(d, "i2t_drops").source) == {"phaze1", "phaze2", "phaze3"}     # Fig. 5 and 6 panels
    dist = _table(d, "distractors_vs_paper").set_index("data")
    assert dist.loc["phaze3", "ours"] == 17.25 == dist.loc["phaze3", "paper"]
    assert (_table(d, "activity_key_typos").typo == "harbel").all()
    led = _table(d, "ledger")
    assert "the human-feedback filter (§4.3.3)" in set(led[led.status == "not reproducible"].quantity)
    lay = ["ours", "paper", "delta", "comparable", "reason"]                        # the one comparison layout (#21)
    ls = _table(d, "activity_lists_vs_paper").set_index(["table", "metric"])        # released lists beside Tab. 2–4
    assert set(lay) <= set(ls.columns) and ls.comparable.all()
    assert ls.xs("activities", level="metric").paper.to_dict() == {"Tab. 2": 12, "Tab. 3": 15, "Tab. 4": 10}
    for m in ("activities", "same_expected_gender"): assert (ls.xs(m, level="metric").delta == 0).all(), m
    assert ls.loc[("Tab. 2", "same_name"), "ours"] == 11 and ls.loc[("Tab. 2", "same_name"), "spelling_differs"] == 1
    assert ls.loc[("Tab. 2", "same_activity_and_expected_gender"), "ours"] == 12                 # 'harbel': the authors' key typo
    from vlbias_nb.data.releases import has_release
    if has_release("gab"):                                                          # the released outputs of 11 VLMs
        ag = _table(d, "released_agg_check")
        assert len(ag) == 18 and ag.exact.all() and (ag.max_abs_diff == 0).all() and ag.rows_authors.sum() == 2442
        t1r = _table(d, "tab1_released")
        assert len(t1r) == 36 and t1r.comparable.all() and ((t1r.ours - t1r.paper).abs() < 0.0085).all()   # 11 VLMs x 3 + NegCLIP (gab_early)
        assert t1r[t1r.release == "gab_early"].model.eq("NegCLIP-ViT-B-32").all() and (t1r.release == "gab_early").sum() == 3
        rel = led[led.evidence == "released outputs"]
        assert {"Tab. 1", "Fig. 4", "Fig. 7", "§5.2.3 text-to-image accuracy"} <= set(rel.item)
        r1 = rel[rel.item == "Tab. 1"]; miss = r1[r1.status != "reproduced"]               # within printed precision, or explained
        assert len(r1) == 36 and len(miss) == 4 and miss.status.eq("differs").all(), miss
        assert miss.note.str.contains("printing slip|is it truncated").all() and (miss.paper.isin([0.59, 0.66, 0.91])).all()
        assert rel[rel.item != "Tab. 1"].status.isin(["partly reproduced", "differs"]).all()   # 11 of the 12 models
    ba = _table(d, "activity_lists_by_activity")                                    # one row per activity: expected gender
    assert set(lay) <= set(ba.columns) and len(ba) == 37 and (ba.delta == 0).all() and ba.comparable.all()
    ic = _table(d, "gab_image_counts")                                              # the paper's counts; no GAB images in smoke
    assert set(lay) <= set(ic.columns) and ic.ours.isna().all() and not ic.comparable.any()
    assert ic.groupby("table").paper.sum().to_dict() == {"Tab. 2": 1878, "Tab. 3": 2414, "Tab. 4": 1465} and ic.paper.min() == 26
    t1 = _table(d, "tab1_text_encoder_bias")
    assert set(lay) <= set(t1.columns) and "model_in_paper" in t1 and not t1.comparable.any()
    assert (t1.ours.between(0, 1)).all() and t1.paper.isna().all()                  # tiny models: the paper did not evaluate them
    assert {"model_in_paper", "metric"} <= set(ar.columns) and set(ar.metric) == {"MRR", "R@1", "R@3"}
    import re
    bad = {p.stem: c for p in (d / "tables").glob("*.csv") if p.stem != "ledger"
           for c in pd.read_csv(p, nrows=0).columns if re.search(r"^(paper_(?!name$)|delta_(?!m$|m_))|_vs_paper$|^our_", c, re.I)}
    assert not bad, f"paper-vs-ours columns outside the one layout: {bad}"

def check_social_counterfactuals(d):
    ka = known_answer("social_counterfactuals")                                 # the bounds the notebook asserts
    t = _table(d, "planted_recovery")
    assert (t.planted_pair == t.recovered_pair).all()
    assert np.allclose(t.planted_max_skew, np.log(ka["planted_probe"]["favoured_sets"]))
    assert np.allclose(t.max_skew, t.planted_max_skew, atol=ka["planted_probe"]["max_skew_atol"])
    assert np.allclose(t.share, t.planted_share, atol=ka["planted_probe"]["share_atol"])
    c = _table(d, "attention_control_check")
    sharp = c[c.pipeline.str.contains("layout follows")]
    brooks = (c.variant == "brooks").all()                                    # the default: Brooks et al.'s self-attention control
    dev = c.drop(sharp.index)["self_attention_dev_with" if brooks else "shared_attention_dev_with"]
    assert (dev <= ka["attention_control"]["shared_attention_dev_with_at_most"]).all()   # controlled maps = the base's (p = 1)
    if brooks: assert (c.self_attention_dev_without > 0).all() and not len(sharp)
    else: assert len(sharp) and sharp.ratio.max() < ka["attention_control"]["sharpened_ratio_below"]   # control confines the differences
    fr = _table(d, "candidate_set_attention_fractions")                        # Brooks: self-attention for p, CFG ~ U(7.5, 15) per set
    if brooks: assert np.allclose(fr.p_self, fr.p) and (fr.p_cross == 0).all() and fr.guidance_scale.between(7.5, 15).all()
    th = _table(d, "detectability_thresholds")
    assert (th.fitted_threshold == th.planted_threshold).all() and len(th) == 6
    pl = _table(d, "tab2_planted_debiasing")
    assert np.allclose(pl.pretrained, ka["planted_debiasing"]["before"]) and (pl.debiased < pl.pretrained).all()
    ch = _table(d, "tab2_paper_vs_chance")                                   # the paper's Tab. 2 (paper_values layout) beside chance
    assert (ch["item"] == "Tab. 2").all() and len(ch) == 18 and np.allclose(ch.above_chance, ch.value - ch.chance)
    assert ch.set_index(["data", "model", "group"]).value[("race_gender", "CLIP", "pretrained")] == 1.02
    ch = ch.drop_duplicates("data").set_index("data")                        # chance at the released (uneven) kept sets
    assert abs(ch.chance_even["race_gender"] - 1.01) < 0.03 and abs(ch.chance_even["physical_gender"] - 0.96) < 0.03
    from vlbias_nb.data.releases import has_release
    if has_release("social_counterfactuals"):                                 # exact at the released counts: below the even spread's
        assert np.allclose(ch.chance[["race_gender", "physical_gender", "physical_race"]], [0.834, 0.822, 0.762], atol=0.005)
        assert (ch.share_low < ch.chance).all() and (ch.chance < ch.share_high).all()
        t1 = _table(d, "tab1_released")                                       # Tab. 1 from the released data set, exactly
        assert len(t1) == 9 and (t1.ours == t1.paper).all() and t1.comparable.all()
        led = _table(d, "ledger")
        rows = led[led.item.isin(["Tab. 1", "§3.4 dataset size"]) & (led.evidence == "released outputs")]
        assert len(rows) == 11 and (rows.status == "reproduced").all()
        dist = _table(d, "released_p2p_cfg")
        assert (dist.share_in_range == 1).all() and len(dist) == 6
        ko = _table(d, "released_kept_sets_by_occupation")
        assert ko.groupby("segment").sets.sum().to_dict() == {"race_gender": 7936, "physical_gender": 5052, "physical_race": 836}
    ms = _table(d, "max_skew_summary")                                        # every MaxSkew mean: interval and chance level
    assert ms[["ci_low", "ci_high", "chance"]].notna().all().all() and (ms.ci_low <= ms.mean_max_skew + 1e-12).all()
    assert (ms.mean_max_skew <= ms.ci_high + 1e-12).all() and (ms.chance > 0).all()
    t2 = _table(d, "tab2_debiasing").dropna(subset=["ours"])
    assert t2[["ci_low", "ci_high", "chance"]].notna().all().all() and not t2.comparable.any()
    k = _table(d, "filter_keep_rates")                                      # stage counts; the paper's numbers in filter_vs_paper
    c = _table(d, "filter_vs_paper")
    assert list(c.columns[:8]) == ["segment", "rule", "metric", "ours", "paper", "delta", "comparable", "reason"]
    kept = c[c.metric == "sets_kept"].set_index(["segment", "rule"])
    alls = k[k.stage == "all stages"].set_index(["segment", "rule"])
    assert (kept.ours == alls.sets_kept.reindex(kept.index)).all() and len(kept) == len(alls)
    assert kept.paper.xs("race_gender", level="segment").eq(7936).all() and (c.delta == c.ours - c.paper).all()
    assert (c[c.metric == "sets_in"].paper == 104_000).all() and not c.comparable.any() and (c.reason != "").all()
    ns = c[c.metric.str.startswith("nsfw")].set_index("metric")
    assert ns.paper.to_dict() == {"nsfw_image_removal_min": 0.009, "nsfw_image_removal_max": 0.027}
    assert ns.ours["nsfw_image_removal_min"] == k.nsfw_image_removal.min() and ns.ours["nsfw_image_removal_max"] == k.nsfw_image_removal.max()
    li = _table(d, "lists_paper_vs_released").set_index("quantity")            # released lists (ours) beside the paper's prose
    assert li.loc["occupation entries in the released caption lists", ["ours", "paper"]].tolist() == [261, 260]
    assert li.loc["physical characteristics in the released caption file", "ours"] == 14
    assert (li.delta == li.ours - li.paper).all()
    led = _table(d, "ledger").set_index("quantity")                           # re-classified: the caption file is not the data set
    assert led.status["physical characteristics in the released caption file"] == "differs"
    assert led.status["captions from the paper's own list sizes (260 × 4 × (6·2 + 5·2 + 5·6))"] == "reproduced"
    assert led.status["occupation entries in the released caption lists"] == "differs"
    both = li.index.intersection(led.index)                                   # the table never contradicts the ledger
    assert len(both) == 6 and (li.comparable[both].astype(bool) == led.comparable[both].astype(bool)).all()

CHECKS = {n: globals()[f"check_{n}"] for n in NOTEBOOKS}

def _check_smoke_run(name, d):
    "What every smoke run holds (its record, notebook, tables, figures in PNG and SVG), then the notebook's own checks."
    run = json.loads((d / "run.json").read_text())
    assert run["profile"] == "smoke" and (d / f"{name}.ipynb").exists()
    tables, figs = list((d / "tables").glob("*.csv")), list((d / "figures").glob("*.png"))
    assert tables and all(f.with_suffix(".svg").exists() for f in figs)
    CHECKS[name](d)

# Two analyses' smoke runs are the first run of a test of their own, so that no notebook runs twice for what one run
# shows: social_counterfactuals (with a generation folder: test_generation_folder_is_kept_and_a_rerun_resumes) and gab
# (with an ungendered candidate list: test_gab_with_an_ungendered_candidate_list; the empty list only skips §4.1.2).
SMOKE_RUN_ELSEWHERE = {"social_counterfactuals", "gab"}

@pytest.mark.parametrize("name", [n for n in NOTEBOOKS if n not in SMOKE_RUN_ELSEWHERE])
def test_analysis_runs_in_smoke_profile(name, tmp_path):
    _check_smoke_run(name, run_notebook(NOTEBOOKS[name], "smoke", out_root=tmp_path, progress=False, html=False))

@pytest.mark.parametrize("name", ["coco_spurious_clusters", "tfidf_table1"])
def test_coco_analyses_run_on_planted_data_alone(name, tmp_path, monkeypatch):
    "Without ../shared (VLBIAS_DATA pointing at an empty folder) the COCO analyses still run, on planted data."
    monkeypatch.setenv("VLBIAS_DATA", str(tmp_path / "no-shared-data"))
    d = run_notebook(NOTEBOOKS[name], "smoke", out_root=tmp_path / "out", progress=False, html=False)
    CHECKS[name](d)

def test_generation_folder_is_kept_and_a_rerun_resumes(tmp_path):
    """The social_counterfactuals smoke run (checked as every smoke run is), with generation_dir set: its generated images
    outlive the run and a rerun regenerates nothing (same files, same bytes). The manifest records how each image was
    made, so other generation parameters make it again (the manifest's rule: tests/test_generation.py)."""
    import sqlite3
    gen = tmp_path / "generated"
    ov = {"generation_dir": str(gen)}
    _check_smoke_run("social_counterfactuals", run_notebook(NOTEBOOKS["social_counterfactuals"], "smoke", ov, out_root=tmp_path / "a",
                                                            progress=False, html=False))
    first = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in gen.rglob("*.png")}
    assert first and (gen / "manifest.sqlite").exists()
    d = run_notebook(NOTEBOOKS["social_counterfactuals"], "smoke", ov, out_root=tmp_path / "b", progress=False, html=False)
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in gen.rglob("*.png")} == first
    check_social_counterfactuals(d)
    with sqlite3.connect(gen / "manifest.sqlite") as db: params = [json.loads(p) for (p,) in db.execute("select params from items")]
    assert len(params) == len(first) and all(p["num_inference_steps"] == 2 and p["image_size"] == 32 and
                                             p["diffusion_pipeline"] == "tiny-stable-diffusion" for p in params)

def test_gab_with_an_ungendered_candidate_list(tmp_path):
    "The GAB smoke run, on the §4.1.2 path: a plain activity list is scored with the MLM and both tails are selected."
    acts = ["cooking dinner", "fixing a car", "knitting a scarf", "playing football", "reading a book",
            "lifting weights", "doing yoga", "painting a wall", "washing dishes", "riding a motorcycle"]
    f = tmp_path / "candidates.txt"; f.write_text("\n".join(acts) + "\n")
    d = run_notebook(NOTEBOOKS["gab"], "smoke", {"candidate_activities_file": str(f)}, out_root=tmp_path / "out",
                     progress=False, html=False)
    scores, sel = _table(d, "candidate_mlm_scores"), _table(d, "candidate_selected")
    assert len(scores) == len(acts) and len(sel) == 2 * 3                # tail_n = 3 at each tail
    assert set(sel.activity) <= set(acts)
    _check_smoke_run("gab", d)                           # the GAB smoke run: checked as every smoke run is

def test_coco_gender_labels_train_counts_and_extended_list(tmp_path):
    "The §3.2 train-count path (the full profile's COCO train captions; here coco-mini's) and the extended word list."
    from vlbias_nb.paths import has_shared
    if not has_shared("coco-mini/annotations/captions_train2017.json"): pytest.skip("needs the shared coco-mini captions")
    d = run_notebook(NOTEBOOKS["coco_gender_labels"], "smoke", {"coco_train_captions": "shared:coco-mini/annotations/captions_train2017.json",
                     "word_list": "extended"}, out_root=tmp_path, progress=False, html=False)
    t = _table(d, "coco_train_gender_labels")
    assert t.columns[:7].tolist() == ["label", "metric", "ours", "paper", "delta", "comparable", "reason"]
    im, pc = (t[t.metric == m].set_index("label") for m in ("images", "percent"))
    assert im.paper.to_dict() == {"female": 11781, "male": 30541, "undefined": 75965} and im.ours.sum() == 80
    assert (im.ours - im.paper == im.delta).all()
    assert pc.paper.to_dict() == {"female": 9.9, "male": 25.8, "undefined": 64.2} and np.allclose(pc.ours, (100 * im.ours / 80).round(1))
    assert len(_table(d, "gendered_words_after_neutralisation")) == 0              # the extended list neutralises its own words
    led = _table(d, "ledger")
    train = led[led.item == "§3.2 train labels"]                                   # coco-mini's 80 images are not COCO train:
    assert len(train) and train.status.isin(["differs", "partly reproduced"]).all()   # measured against the paper, never reproduced
    check_coco_gender_labels(d)

def _smoke_set_keys(segment):
    "The set keys of the smoke run's candidate sets of `segment` (the notebook's default occupations, prefixes and 2 candidates)."
    from vlbias_nb.papers.social_counterfactuals.counterfactual_captions import caption_sets, counterfactual_sets
    from vlbias_nb.methods.attention_control import candidate_items
    occ = "doctor,nurse,pilot,chef,teacher,farmer,lawyer,dancer,baker,barber".split(",")
    sets = counterfactual_sets(caption_sets(segment, occupations=occ, prefixes=["a", "A photo of a"], attributes={"physical": ["young", "old"]}))
    return list(dict.fromkeys(it["set_key"] for it in candidate_items(sets, n_candidates=2)))

def test_social_counterfactuals_user_labels_and_cross_variant(tmp_path):
    """§3.4's two phases on labels the user provides: the 'paper' rule's τ is fitted to them; a bad file fails naming it.
    And the option `p2p_variant = "cross"` with a fixed CFG: cross-attention for each set's p, no self-attention."""
    keys = _smoke_set_keys("race_gender")
    f = tmp_path / "labels.csv"
    f.write_text("segment,attribute_type,set_key,human_keep\n" + "".join(
        f"race_gender,{t},{k},{int(i % 2 == 0)}\n" for t in ("race", "gender") for i, k in enumerate(keys)))
    d = run_notebook(NOTEBOOKS["social_counterfactuals"], "smoke", {"detectability_labels_file": str(f), "segments": ["race_gender"],
                     "p2p_variant": "cross", "cfg_range": ""}, out_root=tmp_path / "out", progress=False, html=False)
    fr = _table(d, "candidate_set_attention_fractions")                     # cross-attention for p, fixed guidance
    assert len(fr) == len(keys) and np.allclose(fr.p_cross, fr.p) and (fr.p_self == 0).all() and fr.p.between(0.1, 0.9).all()
    assert (fr.guidance_scale == 7.5).all()
    c = _table(d, "attention_control_check")
    assert (c.variant == "cross").all() and c.pipeline.str.contains("layout follows").any()
    k = _table(d, "filter_keep_rates")
    paper = k[k.rule == "paper"]
    assert len(paper) == 4 and paper.threshold.iloc[2].startswith("race ")
    c = _table(d, "filter_vs_paper")                                        # the 'paper' rule beside the paper's Tab. 1
    pc = c[c.rule == "paper"]
    assert len(pc) == 3 and not pc.comparable.any()
    assert not pc.reason.str.contains("planted labels").any() and pc.reason.str.contains("random-weight").all()
    lab = _table(d, "detectability_sets_to_label")
    assert set(lab.set_key) <= set(keys) and len(lab) == 2 * len(keys) and lab.human_keep.isna().all()
    bad = tmp_path / "bad.csv"; bad.write_text("segment,attribute_type,set_key,human_keep\nrace_gender,race,x,2\n")
    with pytest.raises(Exception, match="bad.csv"):
        run_notebook(NOTEBOOKS["social_counterfactuals"], "smoke", {"detectability_labels_file": str(bad)},
                     out_root=tmp_path / "out2", progress=False, html=False)

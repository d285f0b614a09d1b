"""Benchmark (not a test): our LIC classifier loop (vlbias_nb.papers.lic.lic_protocol) beside the LIC authors' own
training loop, on the same released captions, split, seeds and epochs.

The authors' side runs THEIR code: the `RNN` class and the `train` and `evaluate` functions of lstm_leakage.py
(rebnej/lick-caption-bias), read at run time from a local copy of that repository (`--authors-repo`, a git folder;
nothing of it is stored here) and executed unchanged. Their data path needs legacy torchtext (`torchtext.legacy`),
which no longer installs beside current torch, so ONLY the iterator is replaced: their CSV → spaCy tokenisation →
`TabularDataset` → `BucketIterator` becomes our replay of it (`bucket_batches`, same batches from the same random
state) wrapped in an object with their batch fields (`.prediction` = (text, lengths), `.label`, `.imid`).

Both sides: the captions of one captioner (default FC, skin tone: 1,972 training captions), the authors' seeds 0 and
12 (run-to-run spread), `--epochs` epochs (default 2: the protocol's 20 take minutes per run). Printed: seconds per
epoch of each, their ratio, each side's LIC_M per seed, and whether the two sides' mean LIC_M agree within twice the
run-to-run spread. Last line: `lic authors loop / ours: X.XX x per epoch`.

    python benchmarks/bench_lic_authors_loop.py --authors-repo /path/to/lick-caption-bias [--captioner FC --attribute skin --epochs 2]
"""
import argparse, ast, os, subprocess, time
from operator import itemgetter
from pathlib import Path
from types import SimpleNamespace
import numpy as np
import torch
from torch import nn
import torch.optim as optim
from sklearn.metrics import accuracy_score
from vlbias_nb.papers.lic import lic_protocol as lp

def authors_functions(repo: str) -> dict:
    "RNN, binary_accuracy, train and evaluate from the authors' lstm_leakage.py (a checkout or a bare git folder), executed as written."
    p = Path(repo) / "lstm_leakage.py"
    src = p.read_text() if p.is_file() else subprocess.run(["git", "--git-dir", repo, "show", "HEAD:lstm_leakage.py"],
                                                             capture_output=True, text=True, check=True).stdout
    keep = [n for n in ast.parse(src).body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in ("RNN", "binary_accuracy", "train", "evaluate")]
    ns = {"torch": torch, "nn": nn, "F": torch.nn.functional, "itemgetter": itemgetter, "accuracy_score": accuracy_score, "os": os}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(p), "exec"), ns)
    return ns

class ReplayedBucketIterator:
    "The replaced iterator: our replay of torchtext's BucketIterator, yielding batches with the fields of theirs."
    def __init__(self, enc, labels, ids, batch_size, state):
        self.enc, self.y, self.ids, self.bs, self.state = enc, labels, ids, batch_size, state
        self._n = len(lp.bucket_batches([len(e) for e in enc], batch_size)[0])
    def __len__(self): return self._n
    def __iter__(self):
        batches, st = lp.bucket_batches([len(e) for e in self.enc], self.bs, self.state)
        if self.state is not None: self.state = st
        for b in batches:
            text, lengths = lp._padded([self.enc[i] for i in b], "cpu")
            yield SimpleNamespace(prediction=(text, lengths), label=torch.tensor([self.y[i] for i in b]), imid=torch.tensor([self.ids[i] for i in b]))

def authors_run(ns, unit, epochs):
    "One run with the authors' RNN, train and evaluate: (LIC_M x100, seconds of training per epoch)."
    d = lp.unit_data(unit)
    train, test, state = lp.authors_split(d["entries"], unit.attribute, unit.seed)
    s = lp.attribute_setup(unit.attribute); label = dict(d["entries"])
    tok = {i: lp.authors_tokens(d["captions"][i], unit.attribute) for i in train + test}   # their CSV + spaCy step, once per run as theirs
    c, t = lp.AUTHORS_LSTM["classifier"], lp.AUTHORS_LSTM["training"]
    torch.manual_seed(unit.seed)
    vocab = lp.AuthorsVocab([tok[i] for i in train])
    y = lambda ids: [int(label[i] == s["positive"]) for i in ids]
    tr_it = ReplayedBucketIterator([vocab.encode(tok[i]) for i in train], y(train), train, t["batch_size"], state)
    te_it = ReplayedBucketIterator([vocab.encode(tok[i]) for i in test], y(test), test, t["batch_size"], None)
    model = ns["RNN"](len(vocab), c["embedding_dim"], c["hidden_dim"], c["output_dim"], c["n_layers"], c["bidirectional"], c["dropout"], 1)
    model.embedding.weight.data[0] = torch.zeros(c["embedding_dim"]); model.embedding.weight.data[1] = torch.zeros(c["embedding_dim"])
    opt, crit = optim.Adam(model.parameters(), lr=t["learning_rate"]), nn.BCEWithLogitsLoss()
    t0 = time.perf_counter(); proc = []
    for _ in range(epochs): _, _, proc = ns["train"](model, tr_it, opt, crit, proc)
    sec = (time.perf_counter() - t0) / epochs
    out = ns["evaluate"](model, te_it, crit, t["batch_size"], None, SimpleNamespace(save_preds=False))
    return 100 * out[2], sec

def our_run(unit, epochs):
    "One run of our loop (`run_unit`): (LIC_M x100, seconds of training per epoch)."
    r = lp.run_unit(unit, "cpu", epochs)
    return r["LIC"], r["train_seconds"] / epochs

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--authors-repo", default=os.environ.get("LIC_AUTHORS_REPO", "/work/.mirror/rebnej+lick-caption-bias/repo"))
    ap.add_argument("--captioner", default="FC"); ap.add_argument("--attribute", default="skin", choices=["gender", "skin"])
    ap.add_argument("--epochs", type=int, default=2); ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ns = authors_functions(a.authors_repo)
    print(f"torch {torch.__version__}, {a.threads} thread(s), load average {os.getloadavg()[0]:.1f}; {a.captioner} {a.attribute}, {a.epochs} epoch(s), seeds {lp.PAPER_SEEDS[:2]}")
    res = {"authors": [], "ours": []}
    for seed in lp.PAPER_SEEDS[:2]:
        u = lp.LICUnit(a.captioner, a.attribute, "model", seed)
        res["authors"].append(authors_run(ns, u, a.epochs)); res["ours"].append(our_run(u, a.epochs))
        print(f"seed {seed}: authors' loop LIC_M {res['authors'][-1][0]:.2f} ({res['authors'][-1][1]:.1f} s/epoch); ours {res['ours'][-1][0]:.2f} ({res['ours'][-1][1]:.1f} s/epoch)")
    ta, to = np.mean([x[1] for x in res["authors"]]), np.mean([x[1] for x in res["ours"]])
    la, lo = np.array([x[0] for x in res["authors"]]), np.array([x[0] for x in res["ours"]])
    spread = max(la.std(ddof=1), lo.std(ddof=1))
    print(f"mean LIC_M: authors' loop {la.mean():.2f}, ours {lo.mean():.2f}; difference {lo.mean() - la.mean():+.2f}, run-to-run sd {spread:.2f}: "
          f"{'agree' if abs(lo.mean() - la.mean()) <= 2 * spread else 'DO NOT agree'} within twice the spread")
    print(f"lic authors loop / ours: {ta / to:.2f} x per epoch (authors {ta:.1f} s, ours {to:.1f} s per epoch)")

if __name__ == "__main__":
    main()

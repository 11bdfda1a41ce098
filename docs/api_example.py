"""The Python API in one page: build or load a graph, rank, label, re-rank, simulate, read marginals.

Run it: `python docs/api_example.py` (tests/test_api_example.py runs it too).

README ("Python API"):

    fastlbp is a library first. `fastlbp.load` reads a derivation.json
    file, a Bingo directory or a libDAI causal factor graph into a `Model`
    (a factor graph plus variable names, alarms, known labels and, for
    derivation graphs, the derivation itself); `datalog.bayesnet.to_model`
    converts a `DerivationGraph` you built in memory. A `Session` keeps the
    evidence and the messages between rounds, so each `run()` after a label
    is warm-started and never recompiles; every option of a run is one
    `fastlbp.Settings` (or keywords of `Session`). `fastlbp.inference.ranking.rank_alarms`
    orders alarms, `fastlbp.inference.explain` says why an alarm is likely,
    and `fastlbp.inference.simulate.simulate` replays Bingo's oracle experiment and
    returns its metrics (Rank-100%-T, Rank-90%-T, Inversions, AUC,
    TotalTime, AverageTime).
"""

import numpy as np

import fastlbp
from datalog import synthetic
from datalog.bayesnet import to_model
from datalog.derivation import DerivationGraph, Rule
from fastlbp import triage
from fastlbp.inference import methods, ranking, simulate

# 1. A derivation graph by hand: two facts, two rules, two alarms.
#    race(1) :- shared(x), unlocked(x)   (rule R0, probability 0.9)
#    race(2) :- shared(x)                 (rule R1, probability 0.5)
dg = DerivationGraph(
    tuples=["shared(x)", "unlocked(x)", "race(1)", "race(2)"],
    rules=[Rule("R0", 0.9, "race(1) :- shared(x), unlocked(x)"), Rule("R1", 0.5, "race(2) :- shared(x)")],
    clause_rule=np.array([0, 1], np.int32),
    clause_head=np.array([2, 3], np.int32),
    body_offsets=np.array([0, 2, 3]),
    body=np.array([0, 1, 0], np.int32),
    priors={0: 0.8, 1: 0.7},  # input facts that may not hold
    alarms=np.array([2, 3], np.int32),
)
model = to_model(dg)  # or: fastlbp.load("race.json") / fastlbp.load("bingo_dir/")

# 2. Rank: one session, warm-started rounds.
session = fastlbp.Session(model)  # or Session(model, fastlbp.Settings(...)), Session(model, method="lbp")
rnd = session.run()
print(methods.describe(rnd))  # method="auto" picked exact inference here: the graph is tiny
ranked = ranking.rank_alarms(model, rnd.marginals, session.labels)
for a in ranked.alarms:
    print(f"{a.rank}. {a.alarm}  P = {a.probability:.3f}")
top = ranked.alarms[0]
print(triage.format_explanation(triage.explain(model, rnd.marginals, top.var)))

# 3. Label the top alarm false and re-rank: the shared fact becomes less likely.
session.label(top.alarm, False)
rnd2 = session.run()  # warm start from the previous messages
p = session.marginals()
print(f"after {top.alarm} = false: P(shared(x)) {rnd.marginals[0]:.3f} -> {p['shared(x)']:.3f}")
assert p["shared(x)"] < rnd.marginals[0]
session.unlabel(top.alarm)  # and back
session.run()

# 4. Simulate Bingo's experiment on a generated graph with a known ground truth.
big = synthetic.layered(num_inputs=30, layers=2, width=25, seed=4)
big_model = to_model(big)
truth = synthetic.sample_truth(big, seed=4)
true_alarms = [int(a) for a in big.alarms if truth[a]]
# LBP: about 10 ms a round here. "auto" would sample (the graph is too wide for exact inference):
# about 1 s a round on a laptop CPU, with standard errors.
result = simulate.simulate(big_model, true_alarms, settings=fastlbp.Settings(method="lbp", max_iters=300))
m = result.metrics
print(f"Rank-100%-T {m.rank_100_t}, Rank-90%-T {m.rank_90_t}, Inversions {m.inversions}, "
      f"AUC {m.auc:.3f}, AverageTime {m.average_time_s * 1e3:.1f} ms")
assert m.rank_100_t == len(result.steps) and m.num_true == len(true_alarms)

"""`headswap auto`: the classifier to ship within a time budget.

The flow is headswap.auto.main.auto(), one step a function; what it reads and writes is spread as it runs:

- data: the splits a run reads, and what makes picking on them weak;
- budget: the one clock and every time rule (Budget; the arms' Share of it): what is left, the room to ship, an arm's
  cap, what a rung or a probe may take; no other module counts seconds left;
- records: every row of the ladder (Entry) and the vocabulary shared with the policy (Status, Stop, Decision, Slice);
- ladder: the candidates ("rungs") from cheapest to dearest and their estimated costs; climb runs the cheap ones;
- prior: which rungs won before on data of this shape (a table rebuilt from the project's runs);
- arms: the fine-tuning rungs as arms (probed, their learning-rate variants, what they need of the budget);
- policy: successive halving of the fine-tuning arms at equal training progress (ask, and tell's Decision);
- compete: the arms' glue between the policy and a runner (runners: in this process, or on a Ray cluster);
- ship: the winner, or a blend of the best candidates and TF-IDF where validation prefers it, saved and exported;
- results: results.json, results.md, report.html and the test rows;
- estimator: AutoClassifier, auto() as a scikit-learn estimator.
- what it shares with bench lives below both: its data, probes and rows in headswap.trials; results.md and
  report.html in headswap.reports.
"""

from headswap.auto.main import DEFAULT_MODELS, OPTIONAL_MODELS, auto, default_models

__all__ = ["auto", "default_models", "DEFAULT_MODELS", "OPTIONAL_MODELS"]

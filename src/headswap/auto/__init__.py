"""`headswap auto`: the classifier to ship within a time budget.

The flow is headswap.auto.main.auto(); what it reads and writes is spread as it runs:

- budget: the one clock and what is left of it (Budget), the reserves kept to the end;
- ladder: the candidates ("rungs") from cheapest to dearest and their estimated costs; climb runs the cheap ones;
- prior: which rungs won before on data of this shape (a table rebuilt from the project's runs);
- policy: successive halving of the fine-tuning arms at equal training progress (ask/tell);
- compete: the arms' glue between the policy and a runner (runners: in this process, or on a Ray cluster);
- ship: the winner, or a blend of the best candidates and TF-IDF where validation prefers it, saved and exported;
- estimator: AutoClassifier, auto() as a scikit-learn estimator.
- what it shares with bench lives below both: its data, probes and rows in headswap.trials; results.md and
  report.html in headswap.reports.
"""

from headswap.auto.main import DEFAULT_MODELS, OPTIONAL_MODELS, auto, default_models

__all__ = ["auto", "default_models", "DEFAULT_MODELS", "OPTIONAL_MODELS"]

"""What bench and auto share: each runs trials, a classifier (a model, a strategy, a regime) trained and scored on
one run's data; bench runs every one that fits, auto those its budget allows.

  plan     the data (stratified, seeded subsets of a folder's splits, one file's held-out splits, or splits held in
           memory) and the rows to run: which strategy fits which model, in which regime
  measure  peak memory, forward passes per text, parameter counts, time estimates from a probe, the machine
  rows     what a row records in results.json: its metrics or its error, the TF-IDF baseline's out-of-scope block;
           results.json itself
"""

# The models bench and auto try when none are named (auto adds the optional ones that are installed:
# headswap.auto.default_models). Here, not in plan: the CLI's parser names them without importing numpy.
DEFAULT_MODELS = ("minilm", "smollm2-135m")

"""headswap bench: every strategy on every model, on one split, against a TF-IDF + LinearSVC baseline.

    from headswap.bench.run import run_bench

    results = run_bench("/data/sms_spam", models=["minilm", "smollm2-135m"], strategies="all",
                        epochs=1, train_limit=1000, test_limit=500, out="bench-out")

For each (model, strategy) that fits (causal-only strategies run on causal LMs, encoder-only ones on
encoders, similarity on both) it trains one row (``epochs`` epochs in the strategy's regime) and, for
zero-shot strategies, adds an untrained row. Every row sees the same stratified, seeded subsets of the
train/validation/test files. A row that fails is recorded with its error; the run goes on.

Writes OUT/results.json (rows + run metadata, rewritten after every row so an interrupted run keeps what
it has), OUT/results.md (tables), OUT/confusion-<model>-<strategy>-<regime>.png per row,
OUT/learning_curves.png, OUT/quality_vs_speed.png, and OUT/report.html: all of it on one self-contained
page to open in a browser (headswap.reports.html_report).

Modules (only perf imports torch, transformers or scikit-learn at import time; the rest import them inside
the functions that need them); the data subsets, the rows to run and what a row measures are auto's too
(headswap.trials):
  baseline  the TF-IDF + LinearSVC row
  report    results.json, results.md, charts and log lines (writes report.html through headswap.reports)
  run       run_bench: one row after another, each recorded as it finishes
  perf      achieved GFLOP/s against the matmul peak, for benchmarks/ (imports torch)
"""

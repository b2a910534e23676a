"""auto's data step: the splits a run reads (train, validation held out of it when there is none, test or none) and
what makes picking the winner on them weak, said plainly."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Data:
    """The splits of one run (headswap.data's LabelledData each; test None without a test split) and `sizes`, where
    each came from and how many texts it holds (results.json's meta.data)."""
    train: object
    validation: object
    test: object | None
    sizes: dict

    @property
    def n_test(self) -> int:
        return len(self.test) if self.test is not None else 0

    @property
    def n_classes(self) -> int:
        return len(set(self.train.labels))


def read_data(data_dir, seed: int, out_of_scope: str | None = None, test_fraction: float | None = None,
              text_column: str = "text", label_column: str = "label") -> Data:
    """validation.csv, or a stratified tenth of train held out; test.csv, test_fraction of train held out first, or
    none. With out_of_scope, that label's rows are allowed in validation and test (each candidate rejects them; the
    test row reports it). `data_dir` may be splits in memory (headswap.trials.plan.memory_data)."""
    from collections import Counter

    from headswap.trials.plan import BenchData, EVAL_FRACTION, held_out_source, load_bench_data, train_source

    data = data_dir if isinstance(data_dir, BenchData) else load_bench_data(
        data_dir, seed=seed, out_of_scope=out_of_scope, test_fraction=test_fraction, text_column=text_column,
        label_column=label_column, needs_test=False, who="auto")
    train, validation, sizes = data.train, data.validation, dict(data.sizes)
    if validation is None:
        from headswap.data.sampling import stratified_split
        train, validation = stratified_split(train, EVAL_FRACTION, seed)
        file = sizes["train"]["file"] or sizes["train"]["source"]
        held = ["test"] if sizes["test"]["used"] and not sizes["test"]["file"] else []
        sizes["validation"] = {"file": None, "rows": len(validation), "used": len(validation),
                               "classes": dict(sorted(Counter(validation.labels).items())),
                               "source": held_out_source(EVAL_FRACTION, f"the rest of {file}" if held else file, seed),
                               "note": f"no validation.csv: {EVAL_FRACTION:.0%} of the training texts held out "
                                       "(stratified, seeded) for best-epoch selection and for picking the winner"}
        sizes["train"] = {**sizes["train"], "used": len(train), "source": train_source(file, held + ["validation"])}
    return Data(train, validation, data.test, sizes)


def data_warnings(data: Data, settings: dict) -> list[str]:
    """What makes the winner's choice weak, said plainly: an out-of-scope label no text has, too few out-of-scope
    validation texts for a recall target (each rung's fit would say these two again), one class in validation."""
    from headswap.data.once import said
    from headswap.classifier.reject_option import few_out_of_scope_note, unseen_label_note

    oos, labels = settings.get("out_of_scope"), list(data.validation.labels)
    lines = [unseen_label_note(oos, list(data.train.labels) + labels)]
    if settings.get("reject_metric") == "oos_recall" and labels.count(oos):
        lines.append(few_out_of_scope_note(oos, labels.count(oos), settings["reject_target"]))
    for key in (("unseen out of scope", oos), ("few out of scope", oos, labels.count(oos))):
        said(key)
    lines, classes = [line for line in lines if line], sorted(set(labels) - {oos})
    if len(classes) != 1:
        return lines
    return lines + [f"validation holds {len(labels)} text{'s' if len(labels) != 1 else ''}, all of one class "
                    f"({classes[0]!r}" + (f" besides out-of-scope {oos!r}" if oos in labels else "")
                    + "): macro F1 on it cannot tell a model that tells the classes apart from one that does not, "
                      "so the winner is picked on little; give a validation.csv with texts of every class"]

"""A short README.md written next to a saved model: what it is, how it was trained, how it scored."""

from __future__ import annotations

from pathlib import Path


def write_model_card(path: Path, config: dict, summary: dict) -> None:
    params = config["params"]
    lines = [
        f"# headswap classifier: {params['strategy']} on {params['model']}",
        "",
        f"- strategy: `{params['strategy']}`; regime: `{config['regime']}`; base model: `{params['model']}`",
        f"- classes ({len(config['labels'])}): " + ", ".join(f"`{c}`" for c in config["labels"]),
        f"- trainable parameters: {summary['trainable_params']:,} of {summary['total_params']:,}",
        f"- epochs: {params['epochs']}; training time: {config.get('train_seconds') or 0:.1f} s",
        *([f"- trained on from `{config['parent'].get('path') or 'a fitted classifier'}` (fingerprint "
           f"`{config['parent'].get('fingerprint')}`), adding classes: "
           + (", ".join(f"`{c}`" for c in config["parent"].get("new_labels") or []) or "none")]
          if isinstance(config.get("parent"), dict) else []),
        *([f"- base model license: {config['base_model']['notice']} (see NOTICE)"]
          if (config.get("base_model") or {}).get("notice") else []),
        "",
        "Load it with:",
        "",
        "```python",
        "from headswap import TextClassifier",
        "clf = TextClassifier.load('.')",
        "clf.predict(['some text'])",
        "```",
    ]
    ev = config.get("evaluation")
    if ev:
        lines += ["", f"## Evaluation on `{ev.get('source', 'held-out data')}`", "",
                  f"- accuracy {ev['accuracy']:.4f}; macro F1 {ev['macro']['f1']:.4f}; "
                  f"weighted F1 {ev['weighted']['f1']:.4f} (n = {ev['n']})"]
        if "binary" in ev:
            b = ev["binary"]
            lines.append(f"- `{b['positive_label']}`: precision {b['precision']:.4f}, recall {b['recall']:.4f}, "
                         f"F1 {b['f1']:.4f}")
    hist = config.get("history") or []
    if any(h.get("score") is not None for h in hist):
        # a logistic head's entries are its C values, cross-validated on the training texts; only the kept one is
        # validated (headswap.train.logistic)
        cv = any(h.get("cv_score") is not None for h in hist)
        lines += ["", "## Validation during training", "",
                  "| epoch | train loss | validation score |" + (" cross-validated |" if cv else ""),
                  "|---|---|---|" + ("---|" if cv else "")]
        lines += [f"| {h['epoch']} | {h['train_loss']:.4f} | {_cell(h.get('score'))} |"
                  + (f" {_cell(h.get('cv_score'))} |" if cv else "") for h in hist]
    path.write_text("\n".join(lines) + "\n")


def _cell(value) -> str:
    return "–" if value is None else f"{value:.4f}"

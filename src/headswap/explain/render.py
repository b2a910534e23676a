"""Explanations for people: the top words as lines of text, and an HTML page with each word shaded, red where it
pushes the text towards the label and blue where it pushes away, the deeper the stronger (scaled per text and
label by its largest score)."""

from __future__ import annotations

import html

from headswap.saved.outputs import HTML_MARK     # a rerun of explain --html may replace the page, and nothing else

METHOD_NAMES = {"integrated-gradients": "Integrated Gradients", "occlusion": "occlusion",
                "coefficients": "TF-IDF coefficients"}


def as_lines(explanations, top: int = 10) -> str:
    """Per text and explained label: a heading line, then its top words with signed scores."""
    out = []
    for n, ex in enumerate(explanations, start=1):
        for label in ex.labels:
            out.append(f"text {n}: {label} (probability {ex.probabilities[label]:.3f}; "
                       f"{METHOD_NAMES.get(ex.method, ex.method)})")
            out.extend(f"  {score:+9.4f}  {word}" for word, score in ex.top(top, label))
    return "\n".join(out) + "\n"


def _shade(score: float, scale: float) -> str:
    alpha = min(abs(score) / scale, 1.0) if scale > 0 else 0.0
    rgb = "220, 38, 38" if score > 0 else "37, 99, 235"
    return f"background: rgba({rgb}, {alpha:.3f})"


def as_html(explanations, title: str = "headswap explain") -> str:
    """A standalone HTML page: one block per text and label, its words shaded by score (hover: the score)."""
    blocks = []
    for n, ex in enumerate(explanations, start=1):
        for label in ex.labels:
            scores = ex.scores[label]
            scale = float(max(abs(scores).max(), 0)) if len(scores) else 0.0
            parts, at = [], 0
            for (s, e), score in zip(ex.spans, scores):
                parts.append(html.escape(ex.text[at:s]))
                parts.append(f'<span style="{_shade(float(score), scale)}" title="{float(score):+.4f}">'
                             f"{html.escape(ex.text[s:e])}</span>")
                at = e
            parts.append(html.escape(ex.text[at:]))
            blocks.append(f'<div class="ex"><div class="head">text {n}: <b>{html.escape(label)}</b> '
                          f"(probability {ex.probabilities[label]:.3f}; "
                          f"{html.escape(METHOD_NAMES.get(ex.method, ex.method))})</div>"
                          f'<p class="text">{"".join(parts)}</p></div>')
    return (f"<!doctype html><html><head><meta charset=\"utf-8\">{HTML_MARK}<title>{html.escape(title)}</title><style>"
            "body{font-family:system-ui,sans-serif;max-width:52em;margin:2em auto;color:#111}"
            ".ex{margin:0 0 1.2em}.head{color:#444;font-size:.9em}.text{line-height:1.9;font-size:1.1em;margin:.3em 0}"
            ".text span{border-radius:3px;padding:1px 2px}.key span{padding:1px 6px;border-radius:3px}"
            "</style></head><body>"
            f"<h1 style=\"font-size:1.3em\">{html.escape(title)}</h1>"
            '<p class="key"><span style="background:rgba(220,38,38,.7)">towards the label</span> '
            '<span style="background:rgba(37,99,235,.7)">away from it</span> (hover a word for its score)</p>'
            + "".join(blocks) + "</body></html>\n")

"""After the logits: what a label is (targets), the post-processing steps (postprocess), temperature
(calibration), decisions leaned toward rare classes for macro F1 (balance), the out-of-scope scores (oos_scores) and
the reject threshold (reject)."""

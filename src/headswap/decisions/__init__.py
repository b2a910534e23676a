"""After the logits: what a label is (targets), the post-processing steps (postprocess), temperature
(calibration), the out-of-scope scores (oos_scores) and the reject threshold (reject)."""

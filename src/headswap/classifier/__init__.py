"""TextClassifier: the estimator (estimator), the module it builds (build), what fit learns besides its weights
(fitted), saving and loading (persist), the reject option (reject_option), where the forward pass runs (runtime),
training on from a saved model (init_from) and which texts to label next (suggest)."""

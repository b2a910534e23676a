"""A saved model on disk: its directory (model_dir), atomic writes (atomic) and its README (model_card)."""

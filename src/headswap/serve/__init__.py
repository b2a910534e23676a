"""A saved classifier behind an HTTP API (headswap.serve.app); `headswap serve` is its command."""

# The app's limits, read by create_app and by the command's flags; this module imports nothing heavy.
DEFAULTS = {"max_batch_size": 32, "max_wait_ms": 5.0, "max_texts_per_request": 256, "max_text_chars": 10_000,
            "max_body_bytes": 1_000_000, "max_concurrent_per_client": 0, "max_json_depth": 32,
            "read_timeout_s": 20.0,
            # /explain's own, lower limits: one explanation costs `steps` forward and backward passes per text
            "max_explain_texts": 16, "max_explain_text_chars": 2_000, "max_explain_steps": 64}
API_KEY_ENV = "HEADSWAP_API_KEY"   # the bearer token when --api-key is not given

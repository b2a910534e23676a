"""Batch prediction on a distributed engine (Ray Data): a picklable predictor that loads its model once per
worker, and `headswap predict --engine ray`, which reads a CSV/TSV/JSONL/Parquet file, predicts it with an
actor pool (one model per actor) and writes the rows back in input order.

Nothing here imports Ray, pyarrow or torch at module level: `headswap --help` stays light.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path

from headswap.errors import DataError, HeadswapError

logger = logging.getLogger(__name__)

ROW_ID = "row_id"           # the input position (0-based) added before prediction and sorted on at the end
PROBA_PREFIX = "proba_"     # one probability column per class: proba_<label>
TABLE_FORMATS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
                 ".parquet": "parquet", ".pq": "parquet"}
RAY_MISSING = "--engine ray needs Ray Data, which is not installed: pip install 'headswap[ray]'"


class Predictor:
    """predictor(model_dir)(batch) -> the batch plus `label` (`labels`, a list, for a multi-label model), one
    `proba_<label>` column per class and `model` (the fingerprint `headswap predict` records).

    A batch is a pandas DataFrame, a pyarrow Table or a dict of columns (lists or numpy arrays), with a text
    column (`text_column`, default "text"); the answer has the same type. The model is loaded on the first call,
    once per process: a pickled Predictor (what Ray ships to each worker or actor) carries only the options,
    never the loaded model. Use it as `ds.map_batches(Predictor, fn_constructor_kwargs={...}, concurrency=N)`
    (one model per actor), or call an instance directly.
    """

    def __init__(self, model_dir, text_column: str = "text", runtime: str = "auto", model: str | None = None):
        self.model_dir = os.fspath(model_dir)
        self.text_column = text_column
        self.runtime = runtime
        self.model = model          # the fingerprint; computed on load when not given
        self._clf = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_clf"] = None        # each worker loads its own
        return state

    def __repr__(self) -> str:
        return (f"Predictor({self.model_dir!r}, text_column={self.text_column!r}, runtime={self.runtime!r}, "
                f"loaded={self._clf is not None})")

    def load(self):
        """The classifier, loaded on first use."""
        if self._clf is None:
            from headswap.saved.model_dir import fingerprint, read_config
            from headswap.baseline.tfidf import KIND, TfidfClassifier
            if self.runtime == "auto" and read_config(Path(self.model_dir)).get("kind") == KIND:
                clf = TfidfClassifier.load(self.model_dir)      # without importing torch (seconds per worker)
            else:
                from headswap.classifier.estimator import load_model
                clf = load_model(self.model_dir, progress=False, runtime=self.runtime)
            encoder = getattr(clf, "encoder_", None)
            if encoder is not None:
                encoder.quiet = True     # no truncation note per batch
            if self.model is None:
                self.model = fingerprint(Path(self.model_dir))
            self._clf = clf
        return self._clf

    def columns(self, texts: list[str]) -> dict:
        """The columns this predictor adds, for `texts`: label(s), proba_<label> per class, model."""
        import numpy as np

        from headswap.jobs.predictions import decisions
        clf = self.load()
        labels = [str(v) for v in clf.labels_]
        from headswap.classifier.reject_option import scored_proba, split_scored
        probs, score = split_scored(clf, scored_proba(clf)(texts)) if texts else (np.zeros((0, len(labels))), None)
        probs = np.asarray(probs, dtype=np.float64)
        key, answers = decisions(clf, probs, score)
        out = {key: answers}
        for j, lab in enumerate(labels):
            out[PROBA_PREFIX + lab] = probs[:, j]
        out["model"] = [self.model] * len(texts)
        return out

    def __call__(self, batch):
        texts = _texts_of(batch, self.text_column)
        added = self.columns(texts)
        clash = [c for c in added if c in _names_of(batch)]
        if clash:
            raise DataError(f"the input already has column(s) {', '.join(map(repr, clash))}, which prediction "
                            f"adds; rename them")
        return _with_columns(batch, added)


def predictor(model_dir, **opts) -> Predictor:
    """A picklable callable for batch prediction on Ray Data, Spark (mapInPandas) or a process pool; see
    Predictor. `opts`: text_column, runtime, model (fingerprint)."""
    return Predictor(model_dir, **opts)


def _is_arrow(batch) -> bool:
    return type(batch).__module__.startswith("pyarrow")


def _is_pandas(batch) -> bool:
    return type(batch).__module__.startswith("pandas")


def _names_of(batch) -> list[str]:
    if _is_arrow(batch):
        return list(batch.column_names)
    return list(batch.columns) if _is_pandas(batch) else list(batch)


def _texts_of(batch, column: str) -> list[str]:
    names = _names_of(batch)
    if column not in names:
        from headswap.data.readers import missing_column
        raise missing_column("the batch", column, names)
    col = batch[column]
    texts = col.to_pylist() if _is_arrow(batch) else (col.tolist() if hasattr(col, "tolist") else list(col))
    for i, t in enumerate(texts):
        if not isinstance(t, str) or not t.strip():
            raise DataError(f"batch row {i}: column {column!r} must be a non-empty string, got {t!r:.60}")
    return texts


def _with_columns(batch, added: dict):
    if _is_arrow(batch):
        import pyarrow as pa
        for name, values in added.items():
            batch = batch.append_column(name, pa.array(values))
        return batch
    import numpy as np
    out = batch.copy() if _is_pandas(batch) else dict(batch)
    for name, values in added.items():
        out[name] = values if isinstance(values, np.ndarray) else _object_array(values)
    return out


def _object_array(values: list):
    import numpy as np
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


# --- the engine --------------------------------------------------------------------------------------------------

def table_format(path, flag: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in TABLE_FORMATS:
        raise DataError(f"{flag} {path}: cannot tell the format from the suffix {suffix or '(none)'!r}; "
                        f"--engine ray reads and writes {', '.join(TABLE_FORMATS)}")
    return TABLE_FORMATS[suffix]


def read_table(path, text_column: str = "text"):
    """The whole input as a pyarrow Table with the text column as strings, checked (present, no empty text)."""
    import pyarrow as pa
    fmt = table_format(path, "--data")
    source = os.fspath(path)
    if not Path(source).is_file():
        raise DataError(f"{source}: file not found")
    try:
        if fmt in ("csv", "tsv"):
            import pyarrow.csv as pacsv
            table = pacsv.read_csv(source, parse_options=pacsv.ParseOptions(
                delimiter="\t" if fmt == "tsv" else ",", newlines_in_values=True),
                convert_options=pacsv.ConvertOptions(column_types={text_column: pa.string()},
                                                     strings_can_be_null=False, quoted_strings_can_be_null=False))
        elif fmt == "jsonl":
            import pyarrow.json as pajson
            table = pajson.read_json(source)
        else:
            import pyarrow.parquet as pq
            table = pq.read_table(source)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as e:
        if isinstance(e, OSError) and not isinstance(e, pa.ArrowException):
            raise
        raise DataError(f"{source}: cannot be read as {fmt}: {str(e).splitlines()[0]}") from None
    if text_column not in table.column_names:
        from headswap.data.readers import missing_column
        raise missing_column(source, text_column, table.column_names)
    if ROW_ID in table.column_names:
        raise DataError(f"{source} already has a column {ROW_ID!r}, which --engine ray adds; rename it")
    col = table[text_column]
    if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
        raise DataError(f"{source}: column {text_column!r} must hold strings, not {col.type}")
    for i, t in enumerate(col.to_pylist()):
        if t is None or not t.strip():
            raise DataError(f"{source}, record {i + 1}: column {text_column!r} is empty")
    if table.num_rows == 0:
        raise DataError(f"{source} holds no texts to predict")
    return table


def write_table(table, path) -> None:
    """Write `table` to `path` in the format its suffix names, atomically (the old file or the new one)."""
    import pyarrow as pa
    from headswap.saved.atomic import atomic_path
    fmt = table_format(path, "--out")
    with atomic_path(path) as tmp:
        if fmt == "parquet":
            import pyarrow.parquet as pq
            pq.write_table(table, tmp)
        elif fmt == "jsonl":
            with open(tmp, "w", encoding="utf-8") as f:
                for batch in table.to_batches(max_chunksize=4096):
                    for record in batch.to_pylist():
                        f.write(json.dumps(record, ensure_ascii=False) + "\n")
        else:
            import pyarrow.csv as pacsv
            for i, field in enumerate(table.schema):   # CSV has no lists: a multi-label answer is a JSON array
                if pa.types.is_list(field.type) or pa.types.is_large_list(field.type):
                    table = table.set_column(i, field.name, pa.array(
                        [None if v is None else json.dumps(v, ensure_ascii=False) for v in table[i].to_pylist()],
                        pa.string()))
            pacsv.write_csv(table, tmp, write_options=pacsv.WriteOptions(
                delimiter="\t" if fmt == "tsv" else ","))


# Read by Ray when it is imported. At 0 a node's IP address is 127.0.0.1, never looked up; otherwise Ray 2.60 asks
# the routing table for this machine's outward address with a UDP connect to 8.8.8.8:53
# (ray._raylet.node_ip_address_from_perspective) to start a local cluster, and to turn a loopback address
# (127.0.0.1, localhost) into a "reachable" one. ray.init's _node_ip_address goes through the same lookup.
LOOPBACK_NODE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def import_ray(address: str | None = None):
    """`import ray` for a cluster at `address`. For one on this machine (a loopback address, "local", "auto", or
    none), LOOPBACK_NODE=0 is set first, for this process and the cluster processes it starts, so that Ray looks
    nothing up outside the machine. A remote head's address is looked up by no one (Ray takes the address its
    node registered under). Ray imported earlier in this process keeps what it read then. ImportError where Ray
    is not installed."""
    if on_this_machine(address):
        os.environ.setdefault(LOOPBACK_NODE, "0")
    import ray
    return ray


def on_this_machine(address: str | None) -> bool:
    """Whether a Ray address names a cluster on this machine: none, "local", "auto", or a loopback host."""
    import ipaddress

    if address in (None, "", "local", "auto"):
        return True
    host = address.split("://", 1)[-1].rpartition(":")[0].strip("[]") or address.split("://", 1)[-1]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ensure_ray(num_cpus: int | None, quiet: bool = True) -> bool:
    """Ray for this process: the one already initialised here, the cluster RAY_ADDRESS names, or a new local
    one (num_cpus CPUs, no dashboard). Returns True when this call started it (the caller shuts it down).
    A cluster someone else left running on this machine is not joined unless RAY_ADDRESS says so."""
    try:
        ray = import_ray(os.environ.get("RAY_ADDRESS"))
    except ImportError:
        raise HeadswapError(RAY_MISSING) from None
    if ray.is_initialized():
        return False
    level = logging.ERROR if quiet else logging.WARNING
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], logging_level=level, log_to_driver=not quiet)
        return True
    with _http_kept_local():
        ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False,
                 logging_level=level, log_to_driver=not quiet)
    return True


# A closed port on this machine (9: discard), as the HTTP proxy of the local cluster's processes.
LOCAL_DEAD_END = "http://127.0.0.1:9"
LOOPBACK = "127.0.0.1,localhost,::1"


@contextmanager
def _http_kept_local():
    """For the processes a local cluster starts: their HTTP goes to a closed port on this machine, loopback
    excepted. Ray 2.60's dashboard asks the cloud metadata services whatever the settings
    (usage_lib.get_cloud_from_metadata_requests: 169.254.169.254, metadata.google.internal, with requests, which
    honours these variables), even with usage stats and the dashboard off; each request then fails at once, here.
    Restored in this process once the cluster has started."""
    names = {"http_proxy": LOCAL_DEAD_END, "HTTP_PROXY": LOCAL_DEAD_END, "no_proxy": LOOPBACK, "NO_PROXY": LOOPBACK}
    before = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def predict_ray(data, out, model_dir, text_column: str = "text", runtime: str = "auto", batch_size: int = 256,
                concurrency: int | None = None, quiet: bool = False, predictor_cls=Predictor,
                ray_remote_args: dict | None = None) -> int:
    """Predict the file `data` on Ray Data with `concurrency` actors (one model each) and write `out`
    (format from its suffix) in input order; returns the number of rows. `predictor_cls`: a Predictor
    subclass (tests use one that fails once); `ray_remote_args`: e.g. max_restarts, max_task_retries (Ray Data's
    defaults for an actor pool retry without limit)."""
    try:
        import_ray(os.environ.get("RAY_ADDRESS"))
        import ray.data  # noqa: F401
    except ImportError:
        raise HeadswapError(RAY_MISSING) from None
    from headswap.saved.model_dir import fingerprint, read_config

    table_format(out, "--out")
    read_config(Path(model_dir))
    if text_column in ("label", "labels", "model") or text_column.startswith(PROBA_PREFIX):
        raise DataError(f"--text-column {text_column!r} is a name prediction writes; rename the column")
    # Like `headswap predict`, only the text goes through (a gold `label` column would clash with the answer).
    table = read_table(data, text_column).select([text_column])
    import pyarrow as pa
    n = table.num_rows
    table = table.add_column(0, ROW_ID, pa.array(range(n), pa.int64()))
    started = ensure_ray(concurrency, quiet=quiet)
    try:
        import ray
        from ray.data import DataContext
        ctx = DataContext.get_current()
        ctx.enable_progress_bars = not quiet
        if quiet:
            logging.getLogger("ray.data").setLevel(logging.ERROR)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if concurrency is None:
            concurrency = max(1, cpus)
        elif concurrency > cpus:    # each actor takes a CPU: the pool would wait for ever
            raise HeadswapError(f"--concurrency {concurrency} needs {concurrency} CPUs, and the Ray cluster has "
                                f"{cpus}; give at most {cpus}")
        # One block per batch: an actor pool spreads blocks, so one big block would go to one actor.
        blocks = [table.slice(i, batch_size) for i in range(0, n, batch_size)]
        ds = ray.data.from_arrow(blocks)
        kwargs = dict(model_dir=os.fspath(model_dir), text_column=text_column, runtime=runtime,
                      model=fingerprint(Path(model_dir)))
        ds = ds.map_batches(predictor_cls, fn_constructor_kwargs=kwargs, batch_size=batch_size,
                            batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=concurrency),
                            num_cpus=1, **(ray_remote_args or {}))
        parts = [ray.get(ref) for ref in ds.to_arrow_refs()]
    finally:
        if started:
            import ray
            ray.shutdown()
    result = pa.concat_tables(parts, promote_options="default").sort_by(ROW_ID) if parts else table.slice(0, 0)
    import numpy as np
    ids = result[ROW_ID].to_numpy()
    if len(ids) != n or not np.array_equal(ids, np.arange(n)):
        raise HeadswapError(f"Ray returned {len(ids)} rows for {n} input rows (lost or duplicated); nothing written")
    write_table(result, out)
    _warn_ties(result)
    return n


def _warn_ties(result) -> None:
    """A table has one set of columns for every batch, so a tie is not marked per row as `headswap predict`'s JSON
    lines mark it: it is counted here, once, from the probability columns."""
    import numpy as np

    from headswap.jobs.predictions import tied_classes, warn_ties
    if "label" not in result.column_names:      # multi-label: each label has its own threshold, no top to tie
        return
    names = [c for c in result.column_names if c.startswith(PROBA_PREFIX)]
    probs = np.column_stack([result[c].to_numpy() for c in names]) if names and result.num_rows else np.zeros((0, 0))
    labels = [c[len(PROBA_PREFIX):] for c in names]
    warn_ties(sum(t is not None for t in tied_classes(probs, labels, result["label"].to_pylist())), result.num_rows,
              f"their {PROBA_PREFIX}<label> columns show which")

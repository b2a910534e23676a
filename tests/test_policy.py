"""auto's successive-halving policy (headswap.auto.policy) on a fake clock: admission from the estimates, the worse
half stopping, the leader getting the remainder until its validation stops improving, a stopped arm staying a
candidate (and taking over), the 1/3 rule, and parallel slots. No training: arms' scores are given."""

from __future__ import annotations

import pytest

from headswap.auto.budget import CAP, Budget
from headswap.auto.policy import GRACE_EPOCHS, Arm, Halving, admit
from headswap.auto.records import Action, Decision, Phase, Stop


class Clock:
    def __init__(self):
        self.now = 500.0

    def __call__(self):
        return self.now


def halving(arms, seconds: float, clock, parallel: int = 1, cap_seconds: float | None = None) -> Halving:
    """A policy given `seconds` from now of a budget of `cap_seconds` (the cap's third is of it; None: `seconds`)."""
    budget = Budget(seconds if cap_seconds is None else cap_seconds, clock, clock())
    return Halving(arms, budget.share(seconds, parallel))


def play(policy: Halving, clock: Clock, score, log=None, busy=None):
    """Run the policy to the end: each slice takes its planned seconds (or `busy(arm, slice)`) and validates
    twice, at its middle and end, with score(arm name, seconds the arm has trained so far)."""
    trained = {}
    while True:
        slices = policy.ask()
        if not slices:
            return trained
        for s in slices:       # one at a time: the fake clock moves by each slice in turn
            took = busy(s) if busy else s.seconds
            points = []
            for frac in (0.5, 1.0):
                t = trained.get(s.arm, 0.0) + took * frac
                points.append((clock.now + took * frac, score(s.arm, t)))
            clock.now += took
            trained[s.arm] = trained.get(s.arm, 0.0) + took
            if log is not None:
                log.append((s.arm, s.label, round(s.seconds, 3)))
            policy.tell(s.arm, points)


def arms(n, epoch=100.0, overhead=5.0):
    return [Arm(f"arm{i}", epoch, overhead) for i in range(n)]


def test_the_worse_half_stops_each_round_and_the_leader_gets_the_remainder():
    clock = Clock()
    quality = {"arm0": 0.60, "arm1": 0.80, "arm2": 0.70, "arm3": 0.50}
    policy = halving(arms(4, epoch=30.0), 1200.0, clock)
    log = []
    # Each arm improves with training, at its own level; it never plateaus within this budget.
    play(policy, clock, lambda a, t: quality[a] + 0.1 * t / 1200, log)
    by = policy.arms
    rounds = {}
    for name, rnd, _ in log:
        rounds.setdefault(rnd, []).append(name)
    assert sorted(rounds[0]) == ["arm0", "arm1", "arm2", "arm3"]       # everyone got a first slice
    assert sorted(rounds[1]) == ["arm1", "arm2"]                        # the better half went on
    assert set(rounds["lead"]) == {"arm1"}                              # the best one trained on
    assert by["arm0"].kind == by["arm3"].kind == "halved" and "ranked" in by["arm3"].why
    assert by["arm2"].kind == "halved"
    # slices double as the field halves; the leader gets the remainder, and the budget is used
    first, second = log[0][2], [s for n, r, s in log if r == 1][0]
    assert second == pytest.approx(2 * first, rel=0.05)
    assert by["arm1"].seconds > sum(by[a].seconds for a in ("arm0", "arm2", "arm3"))
    assert clock.now - 500.0 == pytest.approx(1200.0, rel=0.01)
    assert by["arm1"].seconds > CAP * 1200      # the leader may hold more than a third
    policy.finish()
    assert by["arm1"].kind == "budget"


def test_a_leader_that_stops_improving_stops_and_a_halved_arm_takes_over_with_its_best_kept():
    clock = Clock()
    policy = halving(arms(2, epoch=50.0), 1200.0, clock)

    def score(a, t):       # arm0 leads at once but flattens after 100 s; arm1 climbs slowly
        return min(0.9, 0.7 + t / 500) if a == "arm0" else 0.5 + t / 4000

    play(policy, clock, score)
    a0, a1 = policy.arms["arm0"], policy.arms["arm1"]
    assert a0.kind == "plateau" and "stopped improving" in a0.why
    assert a0.best == pytest.approx(0.9) and policy.best() is a0     # stopped, its best kept: still the winner
    assert a1.slices[0].round == 0 and a1.slices[0].phase is Phase.HALVING and [s for s in a1.slices[1:]] and \
        all(s.phase is Phase.LEAD for s in a1.slices[1:])               # halved first, then it took over
    # and, not leading, it held at most a third of the budget
    assert a1.seconds <= CAP * 1200 + 1e-6 and a1.kind == "cap"


def test_no_arm_holds_more_than_a_third_unless_it_leads():
    clock = Clock()
    # One arm alone would get everything; two arms where the dear one never leads: it is cut at a third.
    policy = halving([Arm("cheap", 40.0, 2.0), Arm("dear", 40.0, 2.0)], 900.0, clock, cap_seconds=900.0)
    play(policy, clock, lambda a, t: (0.9 if a == "cheap" else 0.5) + (0.0 if a == "cheap" and t > 200 else t / 1e4))
    cheap, dear = policy.arms["cheap"], policy.arms["dear"]
    assert dear.seconds <= 300.0 + 1e-6
    assert cheap.kind == "plateau" and dear.kind in ("cap", "plateau", "budget")
    # an arm whose least slice is over a third of the budget cannot run, and says so
    clock2 = Clock()
    p2 = halving([Arm("ok", 100.0, 5.0), Arm("huge", 5000.0, 5.0)], 1200.0, clock2)
    assert p2.arms["huge"].status == "not run" and "over a third of the budget" in p2.arms["huge"].why
    assert [s.arm for s in p2.ask()] == ["ok"]


def test_slices_follow_the_estimates_for_short_and_long_budgets():
    # 5 minutes: one epoch costs 160 s; of 6 arms only those whose first slices fit a round's share run.
    short = halving(arms(6, epoch=160.0, overhead=8.0), 300.0, Clock())
    admitted = [a for a in short.arms.values() if a.status == "waiting"]
    skipped = [a for a in short.arms.values() if a.status == "not run"]
    assert 1 <= len(admitted) < 6 and all(a.kind == "not admitted" for a in skipped)
    assert "epoch each before judging them" in skipped[0].why
    assert short.slice_s >= 8.0 + 0.25 * 160.0
    # 2 hours: all six run, each for more than an epoch in round 1
    long = halving(arms(6, epoch=160.0, overhead=8.0), 7200.0, Clock())
    assert all(a.status == "waiting" for a in long.arms.values()) and long.slice_s > 168.0


def test_parallel_slots_run_a_round_at_once_and_failures_stop_an_arm():
    clock = Clock()
    policy = halving(arms(4), 1200.0, clock, parallel=4)
    first = policy.ask()
    assert len(first) == 4 and policy.ask() == []          # all four at once; none more until they report
    assert first[0].seconds == pytest.approx(1200.0 / 3)    # rounds: 2 halving + the lead, each a third
    clock.now += first[0].seconds
    decided = [policy.tell(s.arm, error="RuntimeError: out of memory") if i == 3 else
               policy.tell(s.arm, [(clock.now, 0.5 + i / 10)]) for i, s in enumerate(first)]
    assert policy.arms["arm3"].status == "failed" and "out of memory" in policy.arms["arm3"].why
    # each waits for the round's end, where the worse half stops; the failed arm stops now, saying why
    assert decided[:3] == [Decision(Action.HALVE)] * 3
    assert decided[3] == Decision(Action.STOP, Stop.FAILED, policy.arms["arm3"].why)
    second = policy.ask()
    assert sorted(s.arm for s in second) == ["arm1", "arm2"]      # the better half of the three that ran


def test_an_arm_refused_a_first_slice_is_not_replaced_by_a_later_one_that_costs_about_the_same():
    """Two rungs of one cost are probed a few percent apart: the ladder's order decides between them, not the noise
    (emotion's 15-minute run admitted similarity in place of encoder-mlp full, 2.3 against 2.5 min). A later arm
    that is clearly cheaper (a learning-rate variant of a cheap arm) still gets in."""
    arms = [Arm("cached", 50.0, 40.0), Arm("full", 400.0, 30.0), Arm("similarity", 380.0, 25.0),
            Arm("cached lr", 50.0, 40.0)]
    policy = halving(arms, 400.0, Clock())     # with full, a round of 200 s trains neither arm an epoch
    assert policy.queue == ["cached", "cached lr"]
    assert policy.arms["full"].kind == policy.arms["similarity"].kind == "not admitted"
    assert "costs about as much" in policy.arms["similarity"].why
    assert "costs about as much" not in policy.arms["full"].why


def test_an_arm_whose_slice_overran_its_plan_plans_its_later_slices_for_the_overrun():
    """Each slice costs 3 s more than the estimate (a checkpoint saved and resumed): after its first slice an arm
    counts them in its overhead, its later slices leave room for them, and the run ends within its budget."""
    clock = Clock()
    policy = halving(arms(4), 600.0, clock)
    true_overhead = 8.0
    busy = lambda s: s.seconds + max(true_overhead - policy.arms[s.arm].overhead_seconds, 0.0)   # noqa: E731
    play(policy, clock, lambda a, t: 0.5 + 0.1 * int(a[-1]) + t / 6000, busy=busy)
    assert all(a.overhead_seconds == pytest.approx(true_overhead) for a in policy.arms.values() if a.slices)
    assert clock.now - 500.0 <= 600.0 + 1e-6


def test_a_leader_whose_score_saturates_trains_on_while_its_validation_loss_falls():
    """SMS spam: every slice of the leader scores 1.0 on validation. A slice that ties it at a lower validation loss
    (improved) keeps it training; one that does not is a plateau."""
    for improves, kind in ((True, "budget"), (False, "plateau")):
        clock = Clock()
        policy = halving(arms(1), 600.0, clock)
        while (slices := policy.ask()):
            s = slices[0]
            clock.now += s.seconds
            policy.tell(s.arm, [(clock.now, 1.0)], improved=improves)
        policy.finish()
        arm = policy.arms["arm0"]
        assert arm.kind == kind, arm.why
        assert (clock.now - 500.0 > 550.0) == improves         # trained on to the budget's end, or stopped early


def test_arms_of_a_round_train_to_the_same_progress_and_are_judged_there():
    """Full fine-tuning's epoch costs 400 s, the cached partial's 60 s: a round gives both the same share of an epoch,
    so full gets its seconds in proportion; judged at equal progress the arm that learns more per epoch survives,
    though per second it is slower (which halving by seconds would have cut after 46 s)."""
    clock = Clock()
    arms = [Arm("cached", 60.0, 20.0), Arm("full", 400.0, 30.0), Arm("cached lr", 60.0, 20.0)]
    policy = halving(arms, 1200.0, clock, cap_seconds=3600.0)     # the arms' 20 minutes of an hour's budget
    assert policy.queue == ["cached", "full"] and policy.arms["cached lr"].kind == "not admitted"
    target = (600.0 - 50.0) / 460.0       # a round's share (1200 s over a round and the leader phase) buys this
    first = {}
    for name in ("cached", "full"):
        [s] = policy.ask()
        assert s.target == pytest.approx(target)
        first[s.arm] = s.seconds
        clock.now += s.seconds
        policy.tell(s.arm, [(clock.now, {"cached": 0.90, "full": 0.93}[s.arm])], progress=target,
                    train_seconds=s.seconds - arms[0 if name == "cached" else 1].overhead_seconds)
    assert first == pytest.approx({"cached": 20.0 + 60.0 * target, "full": 30.0 + 400.0 * target})
    assert policy.ask()[0].arm == "full" and policy.leader == "full"
    assert policy.arms["cached"].kind == "halved" and "1.20 epochs" in policy.arms["cached"].why


def test_a_slice_measured_slower_than_its_estimate_plans_the_next_for_the_rate_it_measured():
    clock = Clock()
    policy = halving([Arm("a", 100.0, 5.0), Arm("b", 100.0, 5.0)], 2000.0, clock)
    s = policy.ask()[0]
    clock.now += s.seconds
    # it trained only half the progress planned in its training seconds: an epoch costs twice the estimate
    policy.tell(s.arm, [(clock.now, 0.8)], progress=s.target / 2, train_seconds=s.seconds - 5.0)
    assert policy.arms[s.arm].epoch_seconds == pytest.approx(200.0)
    assert policy.arms[s.arm].progress == pytest.approx(s.target / 2)


def test_a_leader_stops_on_a_plateau_only_after_its_patience_in_epochs_without_gain():
    """Patience is in epochs: a leader whose half-epoch slices fail to improve stops after PATIENCE_EPOCHS of them
    (four slices), not after one."""
    from headswap.auto.policy import PATIENCE_EPOCHS

    clock = Clock()
    policy = halving([Arm("only", 100.0, 5.0)], 10000.0, clock)
    n = int(PATIENCE_EPOCHS / 0.5)      # the slices without gain that patience allows
    scores = iter([0.80, 0.85] + [0.85] * (n + 2))
    progress = 0.0
    stopped_at, decided = None, []
    for i in range(n + 4):
        [s] = policy.ask() or [None]
        if s is None:
            stopped_at = i
            break
        clock.now += 55.0
        progress += 0.5
        decided.append(policy.tell("only", [(clock.now, next(scores))], progress=progress, train_seconds=50.0))
    arm = policy.arms["only"]
    # the leader trains on, slice after slice, until its patience runs out
    assert [d.action for d in decided] == [Action.CONTINUE] * (n + 1) + [Action.STOP]
    assert decided[-1].stop is Stop.PLATEAU and decided[-1].why == arm.why
    assert arm.kind == "plateau" and arm.progress == pytest.approx(1.0 + PATIENCE_EPOCHS) and stopped_at == n + 2
    assert f"{PATIENCE_EPOCHS:.1f} epochs without beating 0.8500" in arm.why and PATIENCE_EPOCHS >= 2


def test_a_one_off_pass_counts_in_the_first_slice_of_its_group_only():
    """A cached partial's lower-block pass (once_seconds) is made in the first slice of the arm or its learning-rate
    variants (one group) and reused after: it counts in their least slice until then, and not after."""
    def three(once):
        return [Arm("cached", 60.0, 10.0, once_seconds=once, group="g"),
                Arm("cached lr", 60.0, 10.0, once_seconds=once, group="g"), Arm("full", 200.0, 10.0)]
    # 1100 s over 2 rounds and the leader: a first round of 367 s trains all three an epoch without the one-off
    # pass (30 s of overheads and 320 s of epochs), not with it (60 s and 320 s)
    assert halving(three(0.0), 1100.0, Clock()).queue == ["cached", "cached lr", "full"]
    assert halving(three(30.0), 1100.0, Clock()).queue == ["cached", "cached lr"]
    # the pass is counted once for the group: 350 s over one round and the leader trains both an epoch (20 s of
    # overheads, 30 s of pass, 120 s of epochs in 175 s), where counting it for each (200 s) would not
    assert halving(three(30.0)[:2], 350.0, Clock()).queue == ["cached", "cached lr"]
    # a learning-rate variant whose rung does not run plans the pass in its own first slice
    alone = halving([Arm("cached lr", 60.0, 10.0, once_seconds=30.0, group="g")], 200.0, Clock())
    assert alone.ask()[0].seconds >= 10.0 + 30.0 + GRACE_EPOCHS * 60.0
    clock = Clock()
    group = three(30.0)
    policy = halving(group, 1000.0, clock)
    assert [a.least_slice for a in group] == pytest.approx([55.0, 55.0, 60.0])
    s = policy.ask()[0]
    assert s.arm == "cached" and s.seconds >= 55.0
    clock.now += s.seconds
    policy.tell(s.arm, [(clock.now, 0.8)])
    assert [a.least_slice for a in group] == pytest.approx([25.0, 25.0, 60.0])     # paid for the group


def test_where_no_arm_is_under_the_cap_the_cheapest_runs_alone_if_the_budget_holds_it():
    """Emotion at 5 minutes: the cached partial's least slice (119 s, its lower-block pass included) is over a third
    of the budget (100 s). Alone it leads, so the 1/3 rule cannot stop it: it runs, and trains to the end."""
    clock = Clock()
    dear = [Arm("cached", 300.0, 16.0, once_seconds=30.0), Arm("full", 600.0, 20.0)]   # least 121 and 170 s
    policy = halving(dear, 150.0, clock, cap_seconds=300.0)
    assert policy.queue == ["cached"] and policy.arms["full"].kind == "too dear"
    play(policy, clock, lambda a, t: 0.7 + t / 1000)
    policy.finish()
    cached = policy.arms["cached"]
    assert cached.kind == "budget" and cached.seconds == pytest.approx(150.0)
    # a budget that cannot hold even the cheapest: nothing runs
    none = halving([Arm("cached", 300.0, 16.0, once_seconds=30.0)], 110.0, Clock(), cap_seconds=300.0)
    assert none.queue == [] and none.arms["cached"].kind == "too dear"


def test_what_a_finished_leader_leaves_goes_to_an_arm_that_was_not_admitted():
    """One arm admitted finishes its planned epochs early; no arm was halved, so the first arm that was not admitted
    and whose first slice fits what is left trains on it, rather than the minutes going unused."""
    clock = Clock()
    policy = halving([Arm("cached", 50.0, 10.0), Arm("full", 80.0, 20.0)], 100.0, clock, cap_seconds=900.0)
    assert policy.queue == ["cached"] and policy.arms["full"].kind == "not admitted"
    s = policy.ask()[0]
    clock.now += 55.0
    policy.tell(s.arm, [(clock.now, 0.9)], finished=True)
    nxt = policy.ask()
    assert [x.arm for x in nxt] == ["full"] and nxt[0].seconds == pytest.approx(45.0)
    clock.now += 45.0
    policy.tell("full", [(clock.now, 0.85)])
    assert policy.ask() == [] and policy.arms["cached"].kind == "finished"


def test_admission_is_decided_before_the_policy_is_built_and_changes_no_arm():
    """compete chooses the arms' room by asking which arms each room would admit (admit), then builds the policy
    once: asking changes nothing, and the policy admits what admit said."""
    clock = Clock()
    group = [Arm("cached", 50.0, 40.0), Arm("full", 400.0, 30.0), Arm("similarity", 380.0, 25.0),
             Arm("cached lr", 50.0, 40.0)]
    budget = Budget(400.0, clock, clock())
    small, large = admit(group, budget.share(400.0)), admit(group, budget.share(4000.0))
    assert small.queue == ["cached", "cached lr"] and small.refused["full"][0] is Stop.NOT_ADMITTED
    assert large.queue == ["cached", "full", "similarity", "cached lr"] and large.refused == {}
    assert all(a.status == "waiting" and a.kind is None for a in group)
    policy = Halving(group, budget.share(400.0))
    assert policy.queue == small.queue and policy.target == pytest.approx(small.target)
    assert policy.arms["full"].kind == "not admitted" and policy.arms["full"].why == small.refused["full"][1]


def test_an_arm_whose_first_judged_epoch_exceeds_the_arms_share_does_not_block_a_cheaper_one():
    """A German set at 15 minutes: the prior put multilingual-e5-small's similarity arm first (one epoch 10.3 min,
    where the arms had 4.4); admitted alone it took all of them for half an epoch, and the cached partial (89 s to
    its first judged epoch) never ran. The cheaper arm runs first, and what it leaves goes to the dear one."""
    clock = Clock()
    german = [Arm("e5 similarity", 600.0, 18.0), Arm("e5 cached", 60.0, 20.0, once_seconds=9.0)]
    assert [a.seconds_to(1.0) for a in german] == [618.0, 89.0]
    policy = halving(german, 264.0, clock, cap_seconds=900.0)
    assert policy.queue == ["e5 cached"] and policy.arms["e5 similarity"].kind == "not admitted"
    first = policy.ask()
    assert [s.arm for s in first] == ["e5 cached"]
    clock.now += 90.0
    policy.tell("e5 cached", [(clock.now, 0.74)], finished=True, progress=1.0, train_seconds=61.0)
    # 174 s are left: the similarity arm's least slice (168 s) fits, so it gets them rather than their going unused
    nxt = policy.ask()
    assert [s.arm for s in nxt] == ["e5 similarity"] and nxt[0].seconds == pytest.approx(174.0)
    clock.now += nxt[0].seconds
    policy.tell("e5 similarity", [(clock.now, 0.70)])
    assert policy.ask() == [] and policy.best().name == "e5 cached"
    assert sum(a.seconds for a in policy.arms.values()) == pytest.approx(264.0)


def test_where_no_arm_reaches_a_judged_epoch_the_order_given_stands():
    """Judged-first reorders only where a cheaper arm can be judged: two arms neither of which reaches an epoch in
    the share keep the prior's order."""
    both = [Arm("dear", 600.0, 18.0), Arm("less dear", 400.0, 20.0)]
    assert halving(both, 264.0, Clock(), cap_seconds=900.0).queue == ["dear"]


def test_what_a_plateaued_leader_leaves_goes_to_an_arm_too_dear_for_the_cap_where_it_fits_alone():
    """An arm whose least slice is over a third of the budget is not admitted beside another; once the leader has
    plateaued and it is the only arm left, it runs alone on what is left where that holds its least slice."""
    clock = Clock()
    policy = halving([Arm("cheap", 20.0, 5.0), Arm("dear", 600.0, 200.0)], 900.0, clock, cap_seconds=900.0)
    assert policy.queue == ["cheap"] and policy.arms["dear"].kind == "too dear"
    play(policy, clock, lambda a, t: 0.8 if a == "cheap" else 0.6 + t / 1e4)
    cheap, dear = policy.arms["cheap"], policy.arms["dear"]
    assert cheap.kind == "plateau" and dear.slices and dear.slices[0].phase is Phase.LEAD
    assert clock.now - 500.0 == pytest.approx(900.0, rel=0.01)

"""Stops held back while native code runs (headswap.interrupts.held)."""

import signal
import threading

import pytest

from headswap.interrupts import held


@pytest.fixture
def sigterm_raises():
    """A SIGTERM handler that raises, as the CLI's does; the signals it was sent, in order."""
    got = []

    def stop(signum, frame):
        got.append(signum)
        raise RuntimeError("stopped")
    before = signal.signal(signal.SIGTERM, stop)
    yield stop, got
    signal.signal(signal.SIGTERM, before)


def test_a_sigterm_inside_the_block_reaches_its_handler_as_the_block_ends(sigterm_raises):
    stop, got = sigterm_raises
    steps = []
    with pytest.raises(RuntimeError, match="stopped"):
        with held():
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)      # twice: delivered once
            steps += [sum(range(100_000)) > 0 for _ in range(50)]     # bytecodes enough for a handler to run
            steps.append("end of block")
    assert steps[-1] == "end of block" and len(steps) == 51
    assert got == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is stop and signal.getsignal(signal.SIGINT) is not stop


def test_without_a_signal_the_block_runs_and_the_handlers_are_put_back(sigterm_raises):
    stop, got = sigterm_raises
    int_before = signal.getsignal(signal.SIGINT)
    with held():
        assert signal.getsignal(signal.SIGTERM) is not stop
        value = 42
    assert value == 42 and got == []
    assert signal.getsignal(signal.SIGTERM) is stop and signal.getsignal(signal.SIGINT) is int_before


def test_outside_the_main_thread_the_block_runs_as_it_is(sigterm_raises):
    stop, _ = sigterm_raises
    seen = []

    def run():
        with held():
            seen.append(signal.getsignal(signal.SIGTERM))
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [stop]


def test_a_sigterm_that_came_as_the_block_failed_still_reaches_its_handler(sigterm_raises):
    _, got = sigterm_raises
    with pytest.raises(RuntimeError, match="stopped"):
        with held():
            signal.raise_signal(signal.SIGTERM)
            raise ValueError("the block failed")
    assert got == [signal.SIGTERM]

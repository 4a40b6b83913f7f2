"""Unit tests of harness.rank.faults: the spec's validation and the ``slow`` fault inside the real loop."""
from __future__ import annotations

import time

import pytest
import torch

from harness.rank.faults import Fault, SlowSteps, with_fault, with_fault_batches
from harness.rank.frameworks.base import Trainer
from harness.rank.trainloop import train


class SleepingAdapter(Trainer):
    """Stands in for a framework: each step's work is a sleep of ``seconds``."""

    name = "sleeping"

    def __init__(self, seconds: float):
        self.seconds = seconds

    def setup(self, rank, device) -> None:
        pass

    def wrap(self, model, optimizer, loss_fn) -> None:
        pass

    def forward_backward(self, images, labels):
        time.sleep(self.seconds)
        return torch.zeros(())

    def optimizer_step(self) -> None:
        pass

    def average(self, tensor):
        return tensor

    def barrier(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


def batches():
    while True:
        yield torch.zeros(2, 3, 4, 4), torch.zeros(2, dtype=torch.long)


def run_loop(progress, work_s=0.02, warmup=2, steps=10):
    return train(SleepingAdapter(work_s), with_fault_batches(batches(), progress), warmup_steps=warmup, steps=steps,
                 device=torch.device("cpu"), progress=progress)


def test_spec_validation():
    assert Fault(kind="slow", fraction=0.2).rank is None
    with pytest.raises(ValueError, match="needs the rank"):
        Fault(kind="crash")
    with pytest.raises(ValueError, match="positive fraction"):
        Fault(kind="slow")
    with pytest.raises(ValueError, match="'slow' faults only"):
        Fault(kind="hang", rank=0, fraction=0.1)
    with pytest.raises(ValueError, match="unknown fault kind 'slowly'; valid kinds: crash, exit, hang, stuck, slow"):
        Fault(kind="slowly", fraction=0.1)


def test_slow_strikes_every_rank_unless_one_is_named():
    progress = lambda phase, step, of: None  # noqa: E731
    everyone = Fault(kind="slow", fraction=0.2)
    assert all(isinstance(with_fault(progress, everyone, rank), SlowSteps) for rank in range(4))
    one = Fault(kind="slow", fraction=0.2, rank=1)
    assert isinstance(with_fault(progress, one, 1), SlowSteps)
    assert with_fault(progress, one, 0) is progress
    assert with_fault_batches([1, 2], progress) == [1, 2]


def test_slow_sleeps_inside_the_timed_steps_in_proportion_to_the_previous_step():
    calls = []
    slowed = SlowSteps(lambda *args: calls.append(args), fraction=0.5)
    samples = run_loop(slowed, work_s=0.05)
    assert calls[-1] == ("timed", 10, 10)  # the wrapped progress still sees every step
    # 12 steps; the first has no previous step to go by
    assert len(slowed.injected) == 11
    timed_sleeps = slowed.injected[-10:]
    for wait, sleep in zip(samples["data_wait"], timed_sleeps):
        assert wait >= sleep  # the sleep is part of the step's measured data wait
    own = [step - sleep for step, sleep in zip(samples["step_times"], timed_sleeps)]
    # The fault times a step up to its progress call: past the loop's clock by the loop's reads of
    # the CPU's wait and of outside work, a few milliseconds a step on a busy machine (18% of a 50 ms
    # step beside three busy loops on two cores; a 15% band on one 10 ms sleep failed in CI,
    # 2026-11-29). So its sleeps are at least the fraction of the loop's steps, and not much more.
    slept, half_of_steps = sum(timed_sleeps[1:]), 0.5 * sum(own[:-1])
    assert 0.95 * half_of_steps <= slept <= 1.35 * half_of_steps
    assert all(0.4 * previous <= sleep for previous, sleep in zip(own, timed_sleeps[1:]))


def test_slowed_loop_is_slower_by_about_the_fraction():
    plain = run_loop(lambda *args: None, work_s=0.03)
    slowed = run_loop(SlowSteps(lambda *args: None, fraction=0.5), work_s=0.03)
    ratio = sum(slowed["step_times"]) / sum(plain["step_times"])
    assert 1.3 < ratio < 1.8  # 1.5 nominal; loose for a loaded machine's timer


def test_no_warmup_leaves_only_the_first_step_alone():
    slowed = SlowSteps(lambda *args: None, fraction=0.2)
    run_loop(slowed, warmup=0, steps=5)
    assert len(slowed.injected) == 4

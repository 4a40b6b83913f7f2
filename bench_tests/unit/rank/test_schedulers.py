"""The learning-rate schedules against hand-computed values of the study's formulas."""
from __future__ import annotations

import math

import pytest
import torch

from harness.rank.schedulers import (SCHEDULE_NAMES, LRSchedule, learning_rate, linear_scaling, scaled_lr,
                                     set_learning_rate, step_milestones, study_gamma)

STUDY = dict(total_epochs=90, warmup_epochs=5)
NO_WARMUP = dict(total_epochs=90, warmup_epochs=0)


def test_the_three_schedules_are_registered():
    assert SCHEDULE_NAMES == ("step", "cosine", "exponential")


def test_an_unknown_schedule_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown learning-rate schedule 'linear'.*step, cosine, exponential"):
        learning_rate("linear", 0.0, lr_max=1.0, **STUDY)


def test_linear_scaling_rule():
    assert linear_scaling(0.025, 1) == pytest.approx(0.025)
    assert linear_scaling(0.025, 1024) == pytest.approx(25.6)
    # by batch: 65,536 images at 64 per GPU is 1024 GPUs
    assert scaled_lr(0.025, 65536, 64) == pytest.approx(linear_scaling(0.025, 1024))
    assert scaled_lr(0.1, 512, 32) == pytest.approx(1.6)
    with pytest.raises(ValueError):
        linear_scaling(0.025, 0)


def test_step_milestones_are_30_60_80_of_90_and_the_same_fractions_of_shorter_runs():
    assert step_milestones(90) == (30, 60, 80)
    assert step_milestones(18) == pytest.approx((6, 12, 16))
    assert step_milestones(10) == pytest.approx((10 / 3, 20 / 3, 80 / 9))


@pytest.mark.parametrize("epoch, expected", [
    (5, 1.0), (29.999, 1.0), (30, 0.1), (59.9, 0.1), (60, 0.01), (79.99, 0.01), (80, 0.001), (89.5, 0.001),
])
def test_step_decays_tenfold_at_each_milestone(epoch, expected):
    assert learning_rate("step", epoch, lr_max=1.0, **STUDY) == pytest.approx(expected)


def test_cosine_at_start_middle_and_end_without_warmup():
    lr = lambda t: learning_rate("cosine", t, lr_max=0.8, lr_min=0.0, **NO_WARMUP)  # noqa: E731
    assert lr(0) == pytest.approx(0.8)
    assert lr(45) == pytest.approx(0.4)
    assert lr(90) == pytest.approx(0.0, abs=1e-12)
    assert lr(30) == pytest.approx(0.8 * (1 + math.cos(math.pi / 3)) / 2)  # = 0.6


def test_cosine_with_a_floor_and_beyond_the_end():
    lr = lambda t: learning_rate("cosine", t, lr_max=1.0, lr_min=0.2, **NO_WARMUP)  # noqa: E731
    assert lr(45) == pytest.approx(0.6)  # 0.2 + 0.8 * (1 + 0) / 2
    assert lr(90) == pytest.approx(0.2)
    assert lr(95) == pytest.approx(0.2)  # held at the floor, never climbing back


def test_cosine_decay_counts_t_from_the_end_of_warmup():
    # t_max = 90 - 5 = 85: halfway through the decay is epoch 5 + 42.5
    assert learning_rate("cosine", 5, lr_max=1.0, **STUDY) == pytest.approx(1.0)
    assert learning_rate("cosine", 47.5, lr_max=1.0, **STUDY) == pytest.approx(0.5)
    assert learning_rate("cosine", 90, lr_max=1.0, **STUDY) == pytest.approx(0.0, abs=1e-12)


def test_exponential_is_gamma_to_the_t():
    assert learning_rate("exponential", 0, lr_max=2.0, **NO_WARMUP) == pytest.approx(2.0)
    assert learning_rate("exponential", 10, lr_max=1.0, **NO_WARMUP) == pytest.approx(0.95 ** 10)
    assert learning_rate("exponential", 10, lr_max=1.0, **NO_WARMUP) == pytest.approx(0.5987369392)
    assert learning_rate("exponential", 10, lr_max=1.0, gamma=0.9, **NO_WARMUP) == pytest.approx(0.9 ** 10)
    # with warm-up, t counts from its end
    assert learning_rate("exponential", 15, lr_max=1.0, **STUDY) == pytest.approx(0.95 ** 10)
    # fractional epochs (per-step updates) follow the same curve
    assert learning_rate("exponential", 2.5, lr_max=1.0, **NO_WARMUP) == pytest.approx(0.95 ** 2.5)


@pytest.mark.parametrize("schedule", SCHEDULE_NAMES)
def test_warmup_is_a_linear_ramp_to_lr_max(schedule):
    lr = lambda e: learning_rate(schedule, e, lr_max=1.6, warmup_start_lr=0.1, **STUDY)  # noqa: E731
    assert lr(0) == pytest.approx(0.1)
    assert lr(1) == pytest.approx(0.1 + 1.5 / 5)
    assert lr(2.5) == pytest.approx(0.85)
    assert lr(4.999) == pytest.approx(1.6, rel=1e-3)
    assert lr(5) == pytest.approx(1.6)  # hands over at LR_max, no jump
    ramp = [lr(e / 10) for e in range(51)]
    steps = [b - a for a, b in zip(ramp, ramp[1:])]
    assert steps == pytest.approx([0.03] * 50)


def test_warmup_from_zero_by_default():
    assert learning_rate("cosine", 0, lr_max=1.0, **STUDY) == 0.0


@pytest.mark.parametrize("schedule", SCHEDULE_NAMES)
def test_schedules_never_rise_after_warmup(schedule):
    values = [learning_rate(schedule, 5 + e / 4, lr_max=1.0, **STUDY) for e in range(341)]
    assert all(b <= a + 1e-15 for a, b in zip(values, values[1:]))


def test_study_gamma_keeps_the_90_epoch_shape():
    assert study_gamma(90) == pytest.approx(0.95)
    assert study_gamma(18) ** 18 == pytest.approx(0.95 ** 90)
    assert study_gamma(45) == pytest.approx(0.95 ** 2)


@pytest.mark.parametrize("bad", [
    dict(lr_max=0.0),
    dict(lr_min=2.0),
    dict(gamma=1.5),
    dict(warmup_epochs=90),
    dict(warmup_start_lr=-0.1),
])
def test_invalid_settings_raise_value_error(bad):
    settings = dict(lr_max=1.0, **STUDY) | bad
    with pytest.raises(ValueError):
        learning_rate("step", 10, **settings)


def test_negative_epoch_raises():
    with pytest.raises(ValueError, match="negative"):
        learning_rate("step", -1, lr_max=1.0, **STUDY)


def test_lr_schedule_object_matches_the_function_and_validates_on_creation():
    schedule = LRSchedule(schedule="cosine", lr_max=0.4, total_epochs=20, warmup_epochs=1, warmup_start_lr=0.025)
    for epoch in (0, 0.5, 1, 7.3, 20):
        assert schedule(epoch) == learning_rate("cosine", epoch, lr_max=0.4, total_epochs=20, warmup_epochs=1,
                                                warmup_start_lr=0.025)
    with pytest.raises(ValueError, match="valid names"):
        LRSchedule(schedule="poly", lr_max=0.4, total_epochs=20)


def test_set_learning_rate_changes_every_param_group():
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1, momentum=0.9)
    set_learning_rate(optimizer, 0.0123)
    assert [group["lr"] for group in optimizer.param_groups] == [0.0123, 0.0123]

"""The session's end from Slurm's answers (fake ones) and from a user's --deadline or $DLSCALE_DEADLINE."""
import datetime
import subprocess

import pytest

from harness.machine import time_left

NOW = 1_800_000_000.0


@pytest.mark.parametrize("text, seconds", [("45", 45), ("05:30", 330), ("1:05:30", 3930), ("12:00:00", 43200),
                                           ("2-01:05:30", 2 * 86400 + 3930), ("2-01", 2 * 86400 + 3600),
                                           ("0-00:01", 60), (" 1:00\n", 60)])
def test_slurm_durations_are_read(text, seconds):
    assert time_left.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1:2:3:4", "-5", "1h", "1.5", "a-01:00:00"])
def test_anything_else_is_no_duration(text):
    with pytest.raises(ValueError, match="not a duration"):
        time_left.parse_duration(text)


@pytest.mark.parametrize("text", ["UNLIMITED", "NOT_SET", "INVALID\n"])
def test_a_job_without_a_limit_has_no_time_left(text):
    assert time_left.parse_time_left(text) is None


def test_squeue_says_the_time_left():
    asked = []

    def run(command):
        asked.append(command)
        return "9:30\n"

    assert time_left.slurm_end("42", NOW, run) == NOW + 570
    assert asked == [["squeue", "-h", "-j", "42", "-o", "%L"]]


def test_scontrol_answers_where_squeue_cannot():
    end = datetime.datetime(2026, 12, 4, 23, 10, 5)

    def run(command):
        if command[0] == "squeue":
            raise subprocess.CalledProcessError(1, command)
        return f"JobId=42 JobName=x TimeLimit=00:10:00 StartTime=2026-12-04T23:00:05 EndTime={end.isoformat()} x=y\n"

    assert time_left.slurm_end("42", NOW, run) == end.timestamp()


def test_a_job_whose_end_neither_command_knows_has_none():
    def run(command):
        if command[0] == "squeue":
            return ""  # a job squeue no longer lists
        return "JobId=42 EndTime=Unknown"

    assert time_left.slurm_end("42", NOW, run) is None
    assert time_left.slurm_end("42", NOW, lambda command: "UNLIMITED") is None


def test_an_explicit_deadline_is_a_unix_time_or_a_duration_from_now():
    assert time_left.explicit_end("@1800003300", NOW) == 1_800_003_300
    assert time_left.explicit_end("55:00", NOW) == NOW + 3300
    assert time_left.explicit_end("600", NOW) == NOW + 600
    assert time_left.explicit_end("none", NOW) is None
    with pytest.raises(ValueError, match="not a deadline: 'soon'.*@EPOCH"):
        time_left.explicit_end("soon", NOW)


def never(command):
    raise AssertionError(f"asked {command}")


def test_the_option_wins_over_the_variable_and_the_variable_over_slurm():
    env = {"DLSCALE_DEADLINE": "10:00", "SLURM_JOB_ID": "42"}
    assert time_left.session_end("60", env, NOW, never) == (NOW + 60, "--deadline")
    assert time_left.session_end(None, env, NOW, never) == (NOW + 600, "$DLSCALE_DEADLINE")
    assert time_left.session_end("auto", {"SLURM_JOB_ID": "42"}, NOW, lambda command: "1:00:00") == (
        NOW + 3600, "the time limit of the Slurm job 42")
    assert time_left.session_end("none", env, NOW, never) == (None, "--deadline")


def test_outside_slurm_with_nothing_said_there_is_no_deadline():
    assert time_left.session_end(None, {"PATH": "/bin"}, NOW, never) == (None, "no Slurm job")

"""The options renamed so that dlscale's plugin lives beside other pytest plugins (issue 67): each
old name, its new one and why. An old name that no other plugin adds stays a deprecated alias for
one release (``pytest --workload-profile`` is ``--profile``'s successor, ``--data`` still works and
warns); one that another plugin adds is gone, since pytest cannot start with two plugins adding
one name (:mod:`harness.config.other_plugins` says which)."""
from __future__ import annotations

import dataclasses

from harness.config.other_plugins import plugins_adding


@dataclasses.dataclass(frozen=True, slots=True)
class Renamed:
    setting: str
    """The setting it sets (a :class:`~harness.config.options.SuiteOptions` field, ``dlscale_<setting>``
    on pytest's config)."""
    old: str
    new: str
    why: str

    @property
    def clashes_with(self) -> tuple[str, ...]:
        """The other plugins that add the old name too."""
        return plugins_adding(self.old)

    @property
    def kept_as_alias(self) -> bool:
        """The old name still works, warning, for one release: where no other plugin adds it."""
        return not self.clashes_with

    def note(self) -> str:
        """What the new option's help says of its old name."""
        if self.kept_as_alias:
            return f"formerly {self.old}, still accepted with a deprecation warning until the next release"
        return f"formerly {self.old}, which {' and '.join(self.clashes_with)} also adds"

    def warning(self) -> str:
        """What a session given the old name is told."""
        return f"dlscale: {self.old} is deprecated and will be removed in the next release: use {self.new} ({self.why})"


RENAMED = (
    Renamed("profile", "--profile", "--workload-profile", "pytest-profiling adds --profile"),
    Renamed("device", "--device", "--rank-device", "pytest-playwright adds --device"),
    Renamed("data", "--data", "--dlscale-data", "--data is too generic a name beside other plugins"),
    Renamed("data_tfrecord", "--data-tfrecord", "--dlscale-data-tfrecord", "it follows --data"),
    Renamed("repeat", "--repeat", "--cell-repeats", "--repeat is too generic a name beside other plugins"),
    Renamed("report", "--report", "--dlscale-report", "--report is too generic a name beside other plugins"),
    Renamed("compile", "--compile", "--torch-compile", "--compile is too generic a name beside other plugins"),
)
"""Every renamed option, new name and old."""

_BY_SETTING = {renamed.setting: renamed for renamed in RENAMED}


def renamed(setting: str) -> Renamed | None:
    """The renaming of the option that sets ``setting``, or None."""
    return _BY_SETTING.get(setting)


def flag_of(setting: str) -> str:
    """The option that sets ``setting``, as a message names it: ``--cell-repeats`` for ``repeat``,
    ``--measure-budget`` for ``measure_budget``."""
    entry = renamed(setting)
    return entry.new if entry else "--" + setting.replace("_", "-")


class DeprecatedOption(DeprecationWarning):
    """A session was given an option's old name (pytest shows it in its warnings summary; ``-W
    error::DeprecationWarning`` makes it an error)."""

"""A site's settings where it keeps them: an option a site gives every night (its system's name,
its dataset, its rank counts) may be set once in the project's pytest configuration
(``[tool.pytest.ini_options]`` in pyproject.toml, or pytest.ini) as ``dlscale_<setting>``, or in
the environment as ``DLSCALE_<SETTING>``. The command line wins over the ini file, the ini file
over the environment, the environment over the default."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Mapping

INI_PREFIX = "dlscale_"
ENVIRONMENT_PREFIX = "DLSCALE_"
LEVELS = ("command line", "ini", "environment", "default")
"""Where a setting's value may come from, the first given winning."""


def ini_key(setting: str) -> str:
    """The setting's key in the ini file: ``dlscale_history_dir``."""
    return INI_PREFIX + setting


def environment_variable(setting: str) -> str:
    """The setting's environment variable: ``DLSCALE_HISTORY_DIR``."""
    return ENVIRONMENT_PREFIX + setting.upper()


@dataclasses.dataclass(frozen=True, slots=True)
class Given:
    """A setting's value and where it was given, as a message names it."""
    value: object
    source: str


def parse(text: str, kind: Callable, source: str, relative_to: Path | None = None) -> object:
    """``text`` read as ``kind`` (str, int, float or Path); a relative path from an ini file is its
    directory's (``relative_to``). ValueError naming ``source`` where it cannot be read."""
    text = text.strip()
    if kind is Path:
        path = Path(text).expanduser()
        return relative_to / path if relative_to is not None and not path.is_absolute() else path
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{source}: {text!r} is not a valid {kind.__name__}") from None


def resolve(setting: str, kind: Callable, command_line: object, ini: str | None, environment: Mapping[str, str],
            ini_dir: Path | None = None, variable: str | None = None) -> Given | None:
    """The value of ``setting`` from the first place that gives it: the command line (already
    parsed), the ini file's ``dlscale_<setting>`` (a relative path: ``ini_dir``'s), the environment's
    ``variable`` (default ``DLSCALE_<SETTING>``); None where none does (the default then holds).
    An empty value gives nothing."""
    if command_line is not None:
        return Given(command_line, "command line")
    if ini is not None and str(ini).strip():
        source = f"ini {ini_key(setting)}"
        return Given(parse(str(ini), kind, source, ini_dir), source)
    variable = variable or environment_variable(setting)
    if environment.get(variable, "").strip():
        source = f"${variable}"
        return Given(parse(environment[variable], kind, source), source)
    return None

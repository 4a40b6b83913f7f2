"""A bisect's state: what it has measured and what is left to search, a typed object over the
state file's version-5 schema (the persistent contract: a file written by an earlier dlscale-bisect
of version 5 loads, the fields added since taking their defaults), written atomically after every
round and every verification pair, and refused where it is another bisect's or was written under
other launch settings (:mod:`harness.tasks.bisect_settings`)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable

from harness.common.jsonio import write_json_atomic
from harness.tasks.bisect_points import BisectError
from harness.tasks.bisect_settings import setting_differences

STATE_VERSION = 5
"""2: the state is bound to its launch settings (``binding``), keeps a verification's pairs as they
come (``verifying``) and the fixes found (``fixes``); 3: whether it places its midpoints by their
counted work or by their speed (``by``), each point's work (``work``) and the ranges whose ends
count the same work (``same_work``); 4: or by their host instructions (``by`` ``instructions``,
each point's count under ``instructions``); 5: a step's rounds are the A/B core's (its failed
launches as records, the rounds left out for outside work, every launch's log entry), and the binding
holds the harness code's version. Added within version 5, each with a default an older file loads
with: the work changes whose speed stayed the same (``work_changes``), the range's ends' own A/B
(``range_speed``), the counted launches' log and failures (``counted_log``, ``counted_errors``),
the search by time after the work's (``time_after_work``, ``slowdown_unknown``, ``same_speed``,
``not_searched``)."""


@dataclasses.dataclass(kw_only=True)
class BisectState:
    """One bisect's state, as its file holds it; points by their keys in the records, by their
    index in ``pending`` and ``current``."""
    cell: str
    repo: str
    points: list[str]
    binding: dict
    version: int = STATE_VERSION
    pending: list[list[int]] = dataclasses.field(default_factory=list)
    """Ranges still to search, as [low, high] indices; the last is searched next."""
    current: dict | None = None
    """The step under way: its range, its candidates, those skipped and its rounds."""
    verifying: dict | None = None
    """An A/B under way (a culprit against its parent, or the range's ends): its pairs as they came."""
    steps: list[dict] = dataclasses.field(default_factory=list)
    culprits: list[dict] = dataclasses.field(default_factory=list)
    fixes: list[dict] = dataclasses.field(default_factory=list)
    unresolved: list[dict] = dataclasses.field(default_factory=list)
    accounting: dict | None = None
    launches: int = 0
    spent_s: float = 0.0
    done: bool = False
    by: str | None = None
    """What the midpoints are placed by, once chosen: ``work``, ``instructions`` or ``time``."""
    work: dict = dataclasses.field(default_factory=dict)
    instructions: dict = dataclasses.field(default_factory=dict)
    """Each point's counted work, or host instructions, by its key (None: its launch counted none)."""
    same_work: list[list[str]] = dataclasses.field(default_factory=list)
    """Ranges whose ends count the same work, by their keys: no change of work in them; by ``auto``,
    where a slowdown may still lie."""
    work_changes: list[dict] = dataclasses.field(default_factory=list)
    """Changes of work whose verification did not show them slower or faster: not culprits."""
    range_speed: dict | None = None
    """The range's ends' own A/B, where the midpoints were placed by work (``auto``): its slowdown."""
    counted_log: list[dict] = dataclasses.field(default_factory=list)
    """Every launch that counted a point's work or instructions, as the A/B core logs a round's."""
    counted_errors: dict = dataclasses.field(default_factory=dict)
    """Why a point's counting launch failed, by its key."""
    time_after_work: bool = False
    """``auto``: the work's search is over and the same-work ranges are searched by time."""
    slowdown_unknown: list[list[str]] = dataclasses.field(default_factory=list)
    """Ranges searched by time whose slowdown is not yet shown: their first step confirms it."""
    same_speed: list[dict] = dataclasses.field(default_factory=list)
    """Such ranges measured without a slowdown, with the evidence."""
    not_searched: list[dict] = dataclasses.field(default_factory=list)
    """Such ranges left, the culprits found accounting for the range's slowdown."""

    @classmethod
    def from_json(cls, data: dict) -> BisectState:
        known = {field.name for field in dataclasses.fields(cls)}
        return cls(**{name: value for name, value in data.items() if name in known})

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


class StateFile:
    """Where a bisect's state lives: loaded once (refused where it is not this bisect's), then
    written after every change."""

    def __init__(self, path: Path, say: Callable[[str], None]):
        self.path, self.say = path, say

    def load(self, cell_id: str, keys: list[str], bound: dict) -> BisectState | None:
        if not self.path.is_file():
            return None
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as error:
            raise BisectError(f"the state file {self.path} cannot be read ({error}): remove it to start "
                              f"afresh") from None
        if data.get("cell") != cell_id or data.get("points") != keys:
            raise BisectError(f"the state file {self.path} is another bisect's ({data.get('cell')}, "
                              f"{len(data.get('points') or [])} points): name another --state")
        if data.get("version") != STATE_VERSION:
            raise BisectError(f"the state file {self.path} was written by another version of dlscale-bisect "
                              f"(state version {data.get('version')}, this one's {STATE_VERSION}), without the "
                              f"settings it ran under: remove it to start afresh")
        if data["binding"]["digest"] != bound["digest"]:
            differ = setting_differences(data["binding"]["settings"], bound["settings"]) or \
                [f"digest {data['binding']['digest']} -> {bound['digest']}"]
            more = f"; and {len(differ) - 8} more" if len(differ) > 8 else ""
            raise BisectError(f"the state file {self.path} was written under other settings ("
                              f"{'; '.join(differ[:8])}{more}): its rounds cannot be mixed with these; run with "
                              f"its settings to go on, or name another --state to start afresh")
        self.say(f"dlscale-bisect: going on from {self.path} ({len(data['steps'])} step(s), "
                 f"{data['launches']} launch(es) done)")
        return BisectState.from_json(data)

    def save(self, state: BisectState) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, state.to_json())

"""What a cell is: one measured configuration, framework x loader x model x rank count.

Here, in the rank layer, because a rank is handed its cell (the spec's fields) and builds it; the
matrix of cells the suite measures, and what a cell's id may name, is :mod:`harness.config.cells`."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Cell:
    """One measured configuration: framework x loader x model x rank (GPU) count."""

    framework: str
    loader: str
    model: str
    ranks: int

    @property
    def id(self) -> str:
        return f"{self.framework}-{self.loader}-{self.model}-g{self.ranks}"

    @property
    def series(self) -> tuple[str, str, str]:
        """Cells of one series differ only in rank count; E_G compares within a series."""
        return (self.framework, self.loader, self.model)

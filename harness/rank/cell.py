"""What a cell is: one measured configuration, framework x loader x model x rank count, in the
arithmetic and layout it trains in (:mod:`harness.rank.numerics`).

Here, in the rank layer, because a rank is handed its cell (the spec's fields) and builds it; the
matrix of cells the suite measures, and what a cell's id may name, is :mod:`harness.config.cells`."""
from __future__ import annotations

import dataclasses
from typing import Any

from harness.rank.numerics import DEFAULT_DTYPE, Numerics


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Cell:
    """One measured configuration: framework x loader x model x rank (GPU) count, and its numerics
    where they are not the defaults (fp32, contiguous tensors, an eager model)."""

    framework: str
    loader: str
    model: str
    ranks: int
    dtype: str = DEFAULT_DTYPE
    channels_last: bool = False
    compiled: bool = False

    @property
    def numerics(self) -> Numerics:
        return Numerics(dtype=self.dtype, channels_last=self.channels_last, compiled=self.compiled)

    @property
    def id(self) -> str:
        """``<framework>-<loader>-<model>[-<dtype>][-channels_last][-compiled]-g<ranks>``: a cell at
        the default numerics keeps the id it had before they existed."""
        return "-".join((self.framework, self.loader, self.model, *self.numerics.words)) + f"-g{self.ranks}"

    def to_spec(self) -> dict[str, Any]:
        """Its fields for a rank's spec, those at their defaults left out: a worker of an older
        commit (an A/B's reference) reads a default cell's spec as before."""
        fields = dataclasses.asdict(self)
        for field in dataclasses.fields(self):
            if field.default is not dataclasses.MISSING and fields[field.name] == field.default:
                del fields[field.name]
        return fields

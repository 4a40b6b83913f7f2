"""The arithmetic and memory layout a cell trains in: its precision (``fp32``, ``tf32``, ``bf16``,
``fp16``), channels-last tensors, a compiled model. Names only, importable without torch; what
they do to a torch rank is :mod:`harness.rank.torch_numerics`.

- ``fp32``: float32 throughout, TF32 off (strict; torch leaves cuDNN's TF32 on by default).
- ``tf32``: float32 tensors, matrix products and convolutions in TF32 on Ampere and later GPUs
  (the study's A100s ran TF32 unless told otherwise). GPU only.
- ``bf16``: forward and loss under ``torch.autocast`` in bfloat16, weights and gradients float32
  (a CPU with AVX-512 BF16 or AMX runs it natively). DeepSpeed's cells use DeepSpeed's own bf16.
- ``fp16``: autocast in float16 with a gradient scaler; DeepSpeed's cells use DeepSpeed's own
  fp16 with its dynamic loss scale. GPU only.
"""
from __future__ import annotations

import dataclasses

DTYPES = ("fp32", "tf32", "bf16", "fp16")
DEFAULT_DTYPE = "fp32"
GPU_ONLY = ("tf32", "fp16")
CHANNELS_LAST, COMPILED = "channels_last", "compiled"
"""How a cell's id names channels-last tensors and a compiled model."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Numerics:
    dtype: str = DEFAULT_DTYPE
    channels_last: bool = False
    compiled: bool = False

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; valid names: {', '.join(DTYPES)}")

    @property
    def words(self) -> tuple[str, ...]:
        """What a cell's id says of them: nothing at the defaults (fp32, contiguous, eager)."""
        return ((self.dtype,) if self.dtype != DEFAULT_DTYPE else ()) + \
            ((CHANNELS_LAST,) if self.channels_last else ()) + ((COMPILED,) if self.compiled else ())

    @classmethod
    def from_words(cls, words: list[str]) -> tuple[Numerics, list[str]]:
        """The numerics a cell id's trailing words name, and the words before them."""
        words = list(words)
        compiled = bool(words) and words[-1] == COMPILED
        words = words[:-1] if compiled else words
        channels_last = bool(words) and words[-1] == CHANNELS_LAST
        words = words[:-1] if channels_last else words
        dtype = words.pop() if words and words[-1] in DTYPES and words[-1] != DEFAULT_DTYPE else DEFAULT_DTYPE
        return cls(dtype=dtype, channels_last=channels_last, compiled=compiled), words

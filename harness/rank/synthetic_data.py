"""The synthetic batch every runtime's synthetic loader trains on: the same numbers for the same seed
and rank whatever the framework, so that cells of different frameworks see the same data."""
from __future__ import annotations

import numpy as np


def synthetic_batch(*, batch_size: int, image_size: int, num_classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Standard normal images (NCHW, float32) and uniform labels (int64) from ``seed``."""
    generator = np.random.default_rng(seed)
    images = generator.standard_normal((batch_size, 3, image_size, image_size), dtype=np.float32)
    return images, generator.integers(0, num_classes, batch_size, dtype=np.int64)

"""A realistic ImageFolder dataset made from real photographs, and checks of a user's dataset.

    python -m harness.data.dataset --ensure DIR [--classes 100] [--per-class 24] [--size 96]

Each class is one region of one of the photographs scikit-learn ships; its images are JPEG files
of random crops around that region (jittered position, scale and aspect, random flips and
brightness), so the native loader decodes real JPEGs and the classes are learnable.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from harness.common.staging import staged_directory

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
MARKER = ".dlscale-dataset.json"
FORMAT_VERSION = 1


class DatasetError(ValueError):
    pass


def validate_image_folder(path: str | Path) -> dict:
    """Raise :class:`DatasetError` unless ``path`` is an ImageFolder tree: class folders of images."""
    root = Path(path)
    if not root.exists():
        raise DatasetError(f"dataset {root} does not exist")
    if not root.is_dir():
        raise DatasetError(f"dataset {root} is a file, not an ImageFolder tree (expected ROOT/<class>/<image>.jpg)")
    classes = sorted(entry for entry in root.iterdir() if entry.is_dir() and not entry.name.startswith("."))
    if not classes:
        raise DatasetError(f"dataset {root} is not an ImageFolder tree: it has no class subdirectories "
                           "(expected ROOT/<class>/<image>.jpg)")
    images = 0
    for folder in classes:
        images += sum(1 for f in folder.iterdir() if f.suffix.lower() in IMAGE_EXTENSIONS)
    if images == 0:
        raise DatasetError(f"dataset {root} has {len(classes)} class folders but no image files "
                           f"({', '.join(IMAGE_EXTENSIONS)})")
    return {"classes": len(classes), "images": images}


def _regions(height: int, width: int, count: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    return [(int(rng.integers(height // 8, height - height // 8)), int(rng.integers(width // 8, width - width // 8)))
            for _ in range(count)]


def generate(root: Path, *, classes: int, per_class: int, size: int, seed: int = 0) -> None:
    from PIL import Image, ImageEnhance
    from sklearn.datasets import load_sample_images

    photos = [Image.fromarray(array) for array in load_sample_images().images]
    rng = np.random.default_rng(seed)
    for index in range(classes):
        photo = photos[index % len(photos)]
        (cy, cx), = _regions(photo.height, photo.width, 1, rng)
        folder = root / f"class{index:04d}"
        folder.mkdir(parents=True)
        for number in range(per_class):
            side = int(min(photo.height, photo.width) * rng.uniform(0.15, 0.35))
            aspect = rng.uniform(0.75, 1.33)
            half_h, half_w = int(side / 2), int(side * aspect / 2)
            y = int(np.clip(cy + rng.normal(0, side * 0.15), half_h, photo.height - half_h))
            x = int(np.clip(cx + rng.normal(0, side * 0.15), half_w, photo.width - half_w))
            crop = photo.crop((x - half_w, y - half_h, x + half_w, y + half_h)).resize((size, size))
            if rng.random() < 0.5:
                crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            crop = ImageEnhance.Brightness(crop).enhance(rng.uniform(0.8, 1.2))
            crop.save(folder / f"img{number:05d}.jpg", quality=int(rng.integers(80, 95)))


def ensure(root: Path, *, classes: int, per_class: int, size: int) -> Path:
    """Generate the dataset at ``root`` unless one with the same parameters is already there.

    It is built in a temporary sibling and renamed into place, so an interrupted run leaves
    nothing half-written at ``root``.
    """
    wanted = {"format": FORMAT_VERSION, "classes": classes, "per_class": per_class, "size": size}
    marker = root / MARKER
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        return root
    with staged_directory(root) as staging:
        generate(staging, classes=classes, per_class=per_class, size=size)
        (staging / MARKER).write_text(json.dumps(wanted))
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ensure", type=Path, required=True, metavar="DIR")
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--per-class", type=int, default=24)
    parser.add_argument("--size", type=int, default=96, help="side of each JPEG in pixels")
    args = parser.parse_args(argv)
    root = ensure(args.ensure, classes=args.classes, per_class=args.per_class, size=args.size)
    print(f"dataset {root}: {validate_image_folder(root)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

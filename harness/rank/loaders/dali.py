"""NVIDIA DALI pipelines: "dali-cpu" decodes and augments on CPU threads, "dali-gpu" decodes on the
GPU (nvJPEG through DALI's "mixed" decoder) and augments there.

reader -> decoders.image -> random_resized_crop -> crop_mirror_normalize (random flip, ImageNet
mean/std, CHW float32) -> DALIGenericIterator. The reader is ``readers.file`` for an ImageFolder
tree or ``readers.tfrecord`` for indexed TFRecord shards in ImageNet's layout (see
harness.data.tfrecord), chosen from what ``data_dir`` holds unless ``Workload.data_format`` names one.

Rank ``r`` of ``n`` reads DALI shard ``r`` of ``n``: a slice of the sample list (the file reader
permutes its list once with a fixed seed, the same on every rank; TFRecords keep their stored order,
which the converter shuffled), shuffled within a buffer, and the next shard in the next epoch; within
an epoch the ranks' samples are disjoint. Partial batches at the end of an epoch are dropped. The
seeds are ``seed + rank``, so that ranks draw different orders, crops and flips.

Each sample's encoded size (the shape of what the reader read) travels with its batch, so a
batch says what it read however DALI shuffled and read ahead: the folder reader's files, whole; the
TFRecord reader's encoded images (``image/encoded``, without the records' other features and framing).

A sample DALI cannot read or decode stops the run with :class:`DaliDataError` naming the file: DALI
names it for truncated JPEGs and unreadable files (for TFRecords, the shard and byte offset, which
is mapped back to the record's ``image/filename``). For data it cannot even identify (a text file
called .jpg, an empty record) DALI says only "nvImageCodec failure", so the loader then checks the
dataset's image headers itself, for at most ``SCAN_BUDGET_S`` seconds, and names what it finds.
DALI cannot skip a bad sample (the pipeline is unusable after an error), so there is no skip mode:
fix or remove the file (``python -m harness.data.tfrecord`` decodes every image while converting).
"""
from __future__ import annotations

import io
import re
import time
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import torch

from harness.rank.loaders.base import Loader
from harness.rank.rankenv import RankInfo
from harness.rank.workload import Workload

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
INSTALL_HINT = "bash ci/install_dali.sh .venv"
DATA_FORMATS = ("auto", "folder", "tfrecord")
READER = "reader"
SCAN_BUDGET_S = 60.0
"""How long a failed run may spend looking for an image DALI failed on without naming it."""

T = TypeVar("T")


class DaliDataError(RuntimeError):
    """DALI failed on a sample; the message names the file whenever it could be found."""


def import_dali():
    """``nvidia.dali``, or an ImportError that says how to install it."""
    try:
        import nvidia.dali as dali
        import nvidia.dali.plugin.pytorch  # noqa: F401 - DALIGenericIterator lives here
    except ImportError as error:
        raise ImportError(f"the DALI loaders need NVIDIA DALI, which does not import here ({error}); "
                          f"install it with: {INSTALL_HINT}") from error
    return dali


def pick_format(root: Path, requested: str) -> str:
    """"folder" or "tfrecord" for ``root``; "auto" decides from what the directory holds."""
    from harness.data.tfrecord import INDEX_DIR, find_shards

    if requested not in DATA_FORMATS:
        raise ValueError(f"data_format must be one of {', '.join(DATA_FORMATS)}; got {requested!r}")
    if not root.is_dir():
        raise ValueError(f"dataset {root} does not exist or is not a directory")
    if requested != "auto":
        return requested
    folders = any(e.is_dir() and not e.name.startswith(".") and e.name != INDEX_DIR for e in root.iterdir())
    shards = bool(find_shards(root))
    if folders and shards:
        raise ValueError(f"dataset {root} holds both class folders and TFRecord shards; set data_format "
                         "to 'folder' or 'tfrecord'")
    if not (folders or shards):
        raise ValueError(f"dataset {root} holds neither class folders (ROOT/<class>/<image>.jpg) nor "
                         "TFRecord shards (train-* or *.tfrecord, with index files in idx/)")
    return "tfrecord" if shards else "folder"


def shard_range(total: int, shard: int, shards: int) -> tuple[int, int]:
    """The slice of the sample list DALI gives shard ``shard`` of ``shards`` in the first epoch."""
    return total * shard // shards, total * (shard + 1) // shards


# --- naming the sample behind a DALI failure -------------------------------------------------

_NAMED = (  # DALI's words when it does name the sample (the TFRecord reader's name is "SHARD at index OFFSET")
    re.compile(r"Failed to decode sample #\d+ : (?P<path>.+?)(?: at index (?P<offset>\d+))?\s*$", re.M),
    re.compile(r"File mapping failed: (?P<path>.+?)\s*$", re.M),
    re.compile(r"(?:Could not|Failed to) open file:? (?P<path>.+?)\s*$", re.M),
)


def dali_detail(message: str) -> str:
    """The part of a DALI error after "encountered:", without its boilerplate lines."""
    tail = message.split("encountered:", 1)[-1]
    lines = [line.strip() for line in tail.splitlines()
             if line.strip() and "pipeline object is no longer valid" not in line
             and not line.startswith("C++ context")]
    return "; ".join(lines) or message.strip()


def _record_filename(shard: Path, offset: int) -> str | None:
    from harness.data.tfrecord import TFRecordError, decode_example, read_record_at

    try:
        names = decode_example(read_record_at(shard, offset)).get("image/filename")
    except (OSError, TFRecordError):
        return None
    return names[0].decode(errors="replace") if names else None


def named_source(message: str, root: Path) -> str | None:
    """The file (or TFRecord shard and offset, mapped to its image/filename) a DALI error names."""
    for pattern in _NAMED:
        match = pattern.search(message)
        if not match:
            continue
        path = Path(match["path"])
        path = path if path.is_absolute() else root / path  # the file reader names files relative to its root
        if match.groupdict().get("offset") is not None:
            offset = int(match["offset"])
            original = _record_filename(path, offset)
            return f"record at byte {offset} of {path}" + (f" (image/filename {original})" if original else "")
        return str(path)
    return None


def _unreadable(data: bytes) -> str | None:
    from PIL import Image, UnidentifiedImageError

    if not data:
        return "empty"
    try:
        with Image.open(io.BytesIO(data)):  # parses the header only: about as fast as a magic-number check
            return None
    except UnidentifiedImageError:
        return "not an image format DALI or PIL recognises"
    except Exception as error:  # noqa: BLE001 - any failure means DALI cannot read it either
        return f"{type(error).__name__}: {error}"


def scan_images(root: Path, data_format: str, budget_s: float = SCAN_BUDGET_S,
                limit: int = 5) -> tuple[list[str], bool]:
    """Images under ``root`` whose header does not parse; the flag says the whole dataset was checked."""
    from harness.data.tfrecord import decode_example, find_shards, list_image_folder, read_records

    def samples() -> Iterator[tuple[str, bytes]]:
        if data_format == "tfrecord":
            for shard in find_shards(root):
                offset = 0
                for record in read_records(shard, check_crc=False):
                    example = decode_example(record)
                    names = example.get("image/filename") or [b"?"]
                    yield (f"record at byte {offset} of {shard} (image/filename {names[0].decode(errors='replace')})",
                           (example.get("image/encoded") or [b""])[0])
                    offset += len(record) + 16
        else:
            for path, _ in list_image_folder(root)[1]:
                yield str(path), path.read_bytes()

    deadline = time.monotonic() + budget_s
    bad: list[str] = []
    for name, data in samples():
        if time.monotonic() > deadline:
            return bad, False
        problem = _unreadable(data)
        if problem:
            bad.append(f"{name} ({problem})")
            if len(bad) >= limit:
                return bad, False
    return bad, True


def explain_failure(error: Exception, root: Path, data_format: str) -> str:
    detail = dali_detail(str(error))
    source = named_source(str(error), root)
    if source:
        return f"DALI cannot read or decode {source} ({detail}); fix or remove it"
    bad, complete = scan_images(root, data_format)
    if bad:
        return (f"DALI failed on a sample ({detail}); these images of {root} do not parse: {'; '.join(bad)}; "
                "fix or remove them")
    checked = "all image headers parse" if complete else f"no bad header found within {SCAN_BUDGET_S:.0f} s"
    return f"DALI failed on a sample of {root} ({detail}); it did not name the file, and {checked}"


# --- the loader ------------------------------------------------------------------------------

class DaliLoader(Loader):
    def __init__(self, *, workload: Workload, rank: RankInfo, device: torch.device, decode_device: str = "cpu",
                 reader: str | None = None):
        if decode_device not in ("cpu", "mixed"):
            raise ValueError(f"decode_device must be 'cpu' or 'mixed'; got {decode_device!r}")
        if reader == "tfrecord":  # the "-tfrecord" loader variants read the shards, whatever data_dir holds
            workload = workload.replace(data_dir=workload.tfrecord_dir, data_format="tfrecord")
        if workload.data_dir is None:
            raise ValueError("the DALI loaders need a dataset directory (--data, or --data-tfrecord for the "
                             "-tfrecord variants)")
        if decode_device == "mixed" and device.type != "cuda":
            raise RuntimeError(f"dali-gpu decodes JPEGs on a GPU but this rank trains on {device.type}: "
                               "run it where each rank has a GPU, or use dali-cpu")
        if workload.dali_threads < 1 or workload.prefetch < 1:
            raise ValueError(f"dali_threads and prefetch must be at least 1; got {workload.dali_threads} "
                             f"and {workload.prefetch}")
        dali = import_dali()
        from nvidia.dali.plugin.base_iterator import LastBatchPolicy
        from nvidia.dali.plugin.pytorch import DALIGenericIterator

        self.device = device
        self.num_classes = workload.num_classes
        self.root = Path(workload.data_dir)
        self.data_format = pick_format(self.root, workload.data_format)
        self.label_base = 0
        extra: dict = {}
        shards = None
        if self.data_format == "tfrecord":
            from harness.data.tfrecord import open_tfrecord_set

            shards = open_tfrecord_set(self.root)  # every shard has an index that matches it
            self.label_base = shards.label_base
            extra = {"shards": len(shards.shards), "label_base": shards.label_base}
        self.pipeline = self._build_pipeline(dali, workload, rank, decode_device, shards)
        try:
            self.pipeline.build()  # lists the files or reads the indexes; no sample is read yet
        except RuntimeError as error:
            raise ValueError(f"DALI cannot open dataset {self.root} as {self.data_format}: "
                             f"{dali_detail(str(error))}") from error
        total = int(self.pipeline.reader_meta(READER)["epoch_size"])
        first, last = shard_range(total, rank.rank, rank.world_size)
        if (last - first) // workload.batch_size == 0:
            raise ValueError(f"dataset {self.root} has {total} images: too few for one batch of "
                             f"{workload.batch_size} per rank on {rank.world_size} ranks")
        self.iterator = self._guard(  # it runs the first batch, so a bad sample may show up here already
            lambda: DALIGenericIterator([self.pipeline], ["images", "labels", "read"], reader_name=READER,
                                        auto_reset=True, last_batch_policy=LastBatchPolicy.DROP))
        self._settings = {"decode_device": decode_device, "reader": self.data_format,
                          "threads": workload.dali_threads, "prefetch": workload.prefetch,
                          "images": total, "dali": dali.__version__, **extra}

    def _build_pipeline(self, dali, workload: Workload, rank: RankInfo, decode_device: str, shards):
        from nvidia.dali import fn, types

        gpu = self.device.type == "cuda"
        device_id = None  # None: DALI runs on CPU only and needs no GPU at all
        if gpu:
            device_id = torch.cuda.current_device() if self.device.index is None else self.device.index
        reader_args = dict(name=READER, shard_id=rank.rank, num_shards=rank.world_size, random_shuffle=True,
                           seed=workload.seed + rank.rank)

        @dali.pipeline_def(batch_size=workload.batch_size, num_threads=workload.dali_threads,
                           device_id=device_id, seed=workload.seed + rank.rank,
                           prefetch_queue_depth=workload.prefetch)
        def pipeline():
            if shards is not None:
                import nvidia.dali.tfrecord as tfrec

                sample = fn.readers.tfrecord(
                    path=[str(p) for p in shards.shards], index_path=[str(p) for p in shards.indexes],
                    features={"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                              "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1)},
                    **reader_args)
                jpegs, labels = sample["image/encoded"], sample["image/class/label"]
            else:
                jpegs, labels = fn.readers.file(file_root=str(self.root), **reader_args)
            read = jpegs.shape()  # the encoded sample's length in bytes, on the host
            images = fn.decoders.image(jpegs, device=decode_device, output_type=types.RGB)
            images = fn.random_resized_crop(images, size=[workload.image_size, workload.image_size])
            images = fn.crop_mirror_normalize(
                images, dtype=types.FLOAT, output_layout="CHW",
                mean=[255 * m for m in IMAGENET_MEAN], std=[255 * s for s in IMAGENET_STD],
                mirror=fn.random.coin_flip(probability=0.5))
            if gpu and decode_device == "cpu":
                images = images.gpu()  # DALI's copy to the GPU overlaps the next batch's CPU work
            return images, labels, read  # labels stay on the host: checked there, then copied

        return pipeline()

    def _guard(self, call: Callable[..., T], *args) -> T:
        """``call(*args)``, with a DALI failure turned into a :class:`DaliDataError` naming the sample."""
        try:
            return call(*args)
        except RuntimeError as error:
            raise DaliDataError(explain_failure(error, self.root, self.data_format)) from error

    def _labels(self, raw: torch.Tensor) -> torch.Tensor:
        labels = raw.reshape(-1).to(torch.int64) - self.label_base
        low, high = int(labels.min()), int(labels.max())
        if low < 0 or high >= self.num_classes:
            bad = low if low < 0 else high
            raise ValueError(
                f"dataset {self.root} has label {bad + self.label_base} (class {bad} with label base "
                f"{self.label_base}), outside 0..{self.num_classes - 1}: num_classes is too small for it, or "
                "its records lack image/class/label, or its TFRecords number classes from 0 (then write "
                '{"label_base": 0} into its dlscale-tfrecord.json)')
        return labels

    def __iter__(self):
        while True:  # one epoch per pass; auto_reset restarts the iterator after its StopIteration
            epoch = iter(self.iterator)
            while (batch := self._guard(next, epoch, None)) is not None:
                images, labels = batch[0]["images"], batch[0]["labels"]
                self._last_read = batch[0]["read"]
                yield (images.to(self.device, non_blocking=True),
                       self._labels(labels).to(self.device, non_blocking=True))

    _last_read: torch.Tensor | None = None

    def batch_data(self) -> dict:
        if self._last_read is None:
            return {"not_counted": {"data": "no batch was taken"}}
        read = int(self._last_read.sum())
        key = "bytes_read" if self.data_format == "folder" else "encoded_bytes_read"
        return {"data": {"images_decoded": int(self._last_read.shape[0]), key: read}}

    def settings(self) -> dict:
        return dict(self._settings)

    def close(self) -> None:
        # DALI's worker threads go with the pipeline object; drop every reference to it.
        self.iterator = None
        self.pipeline = None

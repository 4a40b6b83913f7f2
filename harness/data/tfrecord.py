"""TFRecord shards of an ImageFolder tree, written without TensorFlow, and how DALI finds them.

    python -m harness.data.tfrecord --from IMAGEFOLDER --to OUTDIR [--shards 4] [--no-verify]
    python -m harness.data.tfrecord --index OUTDIR      (index files for shards that lack them)

Each record is a ``tf.train.Example`` in the layout of the ImageNet TFRecords made by TensorFlow's
``build_imagenet_data.py``: ``image/encoded`` (the file's bytes), ``image/class/label`` (int64,
**1-based**: class ``k`` of the sorted class folders is label ``k + 1``, 0 being the background
class of that convention), ``image/class/text`` (the class folder's name), ``image/filename`` and
``image/format``. The loader subtracts the base again, so TFRecord and folder runs see the same
0-based labels. ``dlscale-tfrecord.json`` in OUTDIR records the base, the class names and the
source's fingerprint; a second run with an unchanged source does nothing.

Files are ``train-SSSSS-of-NNNNN.tfrecord`` with DALI index files ``idx/<shard name>.idx`` (one
``offset size`` line per record, as DALI's ``tfrecord2idx`` writes). Images are shuffled with a
fixed seed before they are dealt to shards, because a TFRecord reader reads records in stored order.
Every image is decoded once while converting (unless ``--no-verify``), so a corrupt file is
reported by name here rather than deep inside a training run.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import struct
import sys
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import google_crc32c

from harness.common.staging import staged_directory
from harness.data.dataset import IMAGE_EXTENSIONS, validate_image_folder

MARKER = "dlscale-tfrecord.json"
FORMAT_VERSION = 1
LABEL_BASE = 1
"""``image/class/label`` of the first class in TFRecords this converter writes (ImageNet's convention)."""
SHARD_SUFFIXES = (".tfrecord", ".tfrec", ".tfrecords")
INDEX_DIR = "idx"


class TFRecordError(ValueError):
    pass


# --- CRC-32C (Castagnoli), masked as TFRecord framing wants it --------------------------------

def crc32c(data: bytes) -> int:
    """CRC-32C of ``data`` by google-crc32c's C implementation (hardware-accelerated where the CPU
    has it; a pure-Python loop ran 7.3 MB/s, hours for ImageNet)."""
    return google_crc32c.value(bytes(data))


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# --- tf.train.Example protobuf encoding ------------------------------------------------------
# Example{1: Features}; Features{1: repeated map entry {1: key, 2: Feature}};
# Feature{1: BytesList{1: repeated bytes}, 3: Int64List{1: packed repeated int64}}.

def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 values take ten bytes, two's complement
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _feature(value: bytes | int | Sequence[bytes] | Sequence[int]) -> bytes:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if all(isinstance(v, (bytes, bytearray)) for v in values):
        return _field(1, b"".join(_field(1, bytes(v)) for v in values))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return _field(3, _field(1, b"".join(_varint(v) for v in values)))
    raise TypeError(f"feature values must be all bytes or all int, got {values!r}")


def encode_example(features: Mapping[str, bytes | int | Sequence[bytes] | Sequence[int]]) -> bytes:
    entries = b"".join(_field(1, _field(1, name.encode()) + _field(2, _feature(value)))
                       for name, value in features.items())
    return _field(1, entries)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise TFRecordError(f"unsupported protobuf wire type {wire}")
        yield number, value


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def decode_example(data: bytes) -> dict[str, list]:
    """``tf.train.Example`` -> {name: list of bytes, ints or raw floats}; enough for tests and checks."""
    features: dict[str, list] = {}
    for number, payload in _fields(data):
        if number != 1:
            continue
        for _, entry in _fields(payload):
            name, values = "", []
            for key, part in _fields(entry):
                if key == 1:
                    name = part.decode()
                elif key == 2:
                    for kind, inner in _fields(part):
                        for _, item in _fields(inner):
                            if kind == 1:
                                values.append(bytes(item))
                            elif kind == 3 and isinstance(item, int):  # unpacked int64
                                values.append(_int64(item))
                            elif kind == 3:  # packed int64
                                pos = 0
                                while pos < len(item):
                                    raw, pos = _read_varint(item, pos)
                                    values.append(_int64(raw))
                            else:
                                values.append(item)
            features[name] = values
    return features


# --- TFRecord framing and DALI index files ---------------------------------------------------

def frame_record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def read_records(path: str | Path, *, check_crc: bool = True) -> Iterator[bytes]:
    """Every record of a TFRecord file; a short or corrupt file raises :class:`TFRecordError`."""
    with open(path, "rb") as stream:
        offset = 0
        while header := stream.read(12):
            if len(header) < 12:
                raise TFRecordError(f"{path}: truncated record header at byte {offset}")
            length, length_crc = struct.unpack("<QI", header)
            if check_crc and masked_crc32c(header[:8]) != length_crc:
                raise TFRecordError(f"{path}: bad length checksum at byte {offset}")
            body = stream.read(length + 4)
            if len(body) < length + 4:
                raise TFRecordError(f"{path}: truncated record at byte {offset}")
            data, (data_crc,) = body[:length], struct.unpack("<I", body[length:])
            if check_crc and masked_crc32c(data) != data_crc:
                raise TFRecordError(f"{path}: bad data checksum in the record at byte {offset}")
            offset += 12 + length + 4
            yield data


def read_record_at(path: str | Path, offset: int) -> bytes:
    """The record starting at byte ``offset`` of a TFRecord file (checksums not checked)."""
    with open(path, "rb") as stream:
        stream.seek(offset)
        header = stream.read(12)
        if len(header) < 12:
            raise TFRecordError(f"{path}: no record at byte {offset}")
        (length,) = struct.unpack("<Q", header[:8])
        data = stream.read(length)
        if len(data) < length:
            raise TFRecordError(f"{path}: truncated record at byte {offset}")
        return data


def index_lines(path: str | Path) -> list[tuple[int, int]]:
    """(offset, size) of each record, read from the framing alone, as ``tfrecord2idx`` does."""
    entries = []
    with open(path, "rb") as stream:
        offset = 0
        while header := stream.read(8):
            if len(header) < 8:
                raise TFRecordError(f"{path}: truncated record header at byte {offset}")
            (length,) = struct.unpack("<Q", header)
            size = 8 + 4 + length + 4
            stream.seek(offset + size)
            if stream.tell() > os.fstat(stream.fileno()).st_size:
                raise TFRecordError(f"{path}: truncated record at byte {offset}")
            entries.append((offset, size))
            offset += size
    return entries


def write_index(shard: str | Path, index: str | Path) -> int:
    """Write the DALI index of ``shard`` to ``index`` atomically; return the record count."""
    entries = index_lines(shard)
    index = Path(index)
    index.parent.mkdir(parents=True, exist_ok=True)
    temporary = index.with_name(f".{index.name}.tmp")
    temporary.write_text("".join(f"{offset} {size}\n" for offset, size in entries))
    os.replace(temporary, index)
    return len(entries)


# --- finding shards and their indexes in a directory -----------------------------------------

@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TFRecordSet:
    root: Path
    shards: tuple[Path, ...]
    indexes: tuple[Path, ...]
    label_base: int
    """``image/class/label`` of class 0: 1 for ImageNet-style records (and ours), else from the marker."""
    records: int
    classes: tuple[str, ...] | None


def is_shard(path: Path) -> bool:
    return path.is_file() and (path.suffix in SHARD_SUFFIXES or path.name.startswith(("train-", "train.")))


def find_shards(root: str | Path) -> list[Path]:
    """``train-*`` shards when there are any (ImageNet also has ``validation-*``), else ``*.tfrecord``."""
    root = Path(root)
    if not root.is_dir():
        return []
    files = sorted(p for p in root.iterdir() if is_shard(p) and p.suffix != ".idx" and not p.name.startswith("."))
    train = [p for p in files if p.name.startswith(("train-", "train."))]
    return train or files


def index_candidates(shard: Path) -> list[Path]:
    stem = shard.name[: -len(shard.suffix)] if shard.suffix in SHARD_SUFFIXES else shard.name
    names = dict.fromkeys([f"{shard.name}.idx", f"{stem}.idx"])
    return ([shard.parent / INDEX_DIR / n for n in names] + [shard.parent / INDEX_DIR / shard.name]
            + [shard.parent / n for n in names])


def index_command(shard: Path) -> str:
    return (f"python -m harness.data.tfrecord --index {shard.parent}   "
            f"(or: tfrecord2idx {shard} {index_candidates(shard)[0]})")


def open_tfrecord_set(root: str | Path) -> TFRecordSet:
    """The shards under ``root`` with their index files, checked; errors name the shard and the fix."""
    root = Path(root)
    shards = find_shards(root)
    if not shards:
        raise TFRecordError(f"{root} holds no TFRecord shards (train-* or *.tfrecord files)")
    indexes, records = [], 0
    for shard in shards:
        index = next((c for c in index_candidates(shard) if c.is_file()), None)
        if index is None:
            raise TFRecordError(f"TFRecord shard {shard} has no index file; DALI needs one. Make the missing "
                                f"indexes with: {index_command(shard)}")
        lines = index.read_text().split()
        if len(lines) % 2 or not lines:
            raise TFRecordError(f"index {index} of shard {shard} is empty or malformed; remake it with: "
                                f"{index_command(shard)}")
        last_offset, last_size = int(lines[-2]), int(lines[-1])
        if last_offset + last_size != shard.stat().st_size:
            raise TFRecordError(f"index {index} does not match shard {shard} ({last_offset + last_size} bytes "
                                f"indexed, {shard.stat().st_size} in the file): stale index? Remake it with: "
                                f"{index_command(shard)}")
        indexes.append(index)
        records += len(lines) // 2
    marker = root / MARKER
    meta = json.loads(marker.read_text()) if marker.is_file() else {}
    classes = meta.get("classes")
    return TFRecordSet(root=root, shards=tuple(shards), indexes=tuple(indexes),
                       label_base=int(meta.get("label_base", LABEL_BASE)), records=records,
                       classes=tuple(classes) if classes else None)


def ensure_indexes(root: str | Path) -> list[Path]:
    """Write ``idx/<shard>.idx`` for each shard under ``root`` that has no index yet."""
    written = []
    for shard in find_shards(root):
        if not any(c.is_file() for c in index_candidates(shard)):
            index = index_candidates(shard)[0]
            write_index(shard, index)
            written.append(index)
    return written


# --- the converter ---------------------------------------------------------------------------

def list_image_folder(root: Path) -> tuple[list[str], list[tuple[Path, int]]]:
    """Classes in sorted order (as torchvision's ImageFolder and DALI's file reader number them)."""
    classes = sorted(e.name for e in root.iterdir() if e.is_dir() and not e.name.startswith("."))
    samples = [(path, label) for label, name in enumerate(classes)
               for path in sorted((root / name).iterdir())
               if path.is_file() and path.suffix.lower() in IMAGE_EXTENSIONS]
    return classes, samples


def conversion_fingerprint(root: Path, samples: list[tuple[Path, int]], shards: int, seed: int) -> str:
    digest = hashlib.sha256(json.dumps([FORMAT_VERSION, LABEL_BASE, shards, seed]).encode())
    for path, label in samples:
        stat = path.stat()
        digest.update(f"{path.relative_to(root)}\0{label}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:32]


def verify_image(path: Path) -> None:
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.load()
    except Exception as error:
        raise TFRecordError(f"cannot decode image {path}: {error}; fix or remove it before converting") from error


def _write_shards(staging: Path, root: Path, classes: list[str], samples: list[tuple[Path, int]],
                  shards: int, verify: bool) -> list[dict]:
    written = []
    for number in range(shards):
        name = f"train-{number:05d}-of-{shards:05d}.tfrecord"
        offsets = []
        with open(staging / name, "wb") as stream:
            for path, label in samples[number::shards]:
                if verify:
                    verify_image(path)
                record = frame_record(encode_example({
                    "image/encoded": path.read_bytes(),
                    "image/class/label": label + LABEL_BASE,
                    "image/class/text": classes[label].encode(),
                    "image/filename": str(path.relative_to(root)).encode(),
                    "image/format": path.suffix.lstrip(".").upper().replace("JPG", "JPEG").encode(),
                }))
                offsets.append(f"{stream.tell()} {len(record)}\n")
                stream.write(record)
        (staging / INDEX_DIR).mkdir(exist_ok=True)
        (staging / INDEX_DIR / f"{name}.idx").write_text("".join(offsets))
        written.append({"file": name, "records": len(offsets)})
    return written


def convert(source: str | Path, target: str | Path, *, shards: int = 4, seed: int = 0,
            verify: bool = True) -> Path:
    """Write ``source`` (an ImageFolder tree) as TFRecord shards with indexes into ``target``.

    Does nothing when ``target`` already holds the conversion of the same source files. The
    shards are built in a temporary sibling directory and renamed into place.
    """
    source, target = Path(source), Path(target)
    validate_image_folder(source)
    if shards < 1:
        raise ValueError(f"--shards must be at least 1, got {shards}")
    classes, samples = list_image_folder(source)
    shards = min(shards, len(samples))
    wanted = conversion_fingerprint(source, samples, shards, seed)
    marker = target / MARKER
    if marker.is_file() and json.loads(marker.read_text()).get("fingerprint") == wanted:
        return target
    if target.exists() and not marker.is_file() and any(target.iterdir()):
        raise TFRecordError(f"{target} exists and is not a conversion made by this tool; choose an empty "
                            "or new directory")
    random.Random(seed).shuffle(samples)
    with staged_directory(target) as staging:
        files = _write_shards(staging, source, classes, samples, shards, verify)
        (staging / MARKER).write_text(json.dumps({
            "format": FORMAT_VERSION, "fingerprint": wanted, "source": str(source.resolve()),
            "label_base": LABEL_BASE, "records": len(samples), "shards": files, "classes": classes,
        }, indent=1) + "\n")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--from", dest="source", type=Path, metavar="IMAGEFOLDER")
    mode.add_argument("--index", type=Path, metavar="DIR", help="write index files for shards in DIR lacking one")
    parser.add_argument("--to", dest="target", type=Path, metavar="OUTDIR")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0, help="seed of the shuffle before sharding")
    parser.add_argument("--no-verify", dest="verify", action="store_false",
                        help="skip decoding each image while converting")
    args = parser.parse_args(argv)
    try:
        if args.index:
            for index in ensure_indexes(args.index):
                print(f"wrote {index}", file=sys.stderr)
            found = open_tfrecord_set(args.index)
            print(f"{args.index}: {len(found.shards)} shards, {found.records} records, all indexed", file=sys.stderr)
            return 0
        if args.target is None:
            parser.error("--from needs --to OUTDIR")
        target = convert(args.source, args.target, shards=args.shards, seed=args.seed, verify=args.verify)
        found = open_tfrecord_set(target)
        print(f"{target}: {len(found.shards)} shards, {found.records} records", file=sys.stderr)
        return 0
    except (TFRecordError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

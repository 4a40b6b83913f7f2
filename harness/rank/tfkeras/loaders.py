"""tf.data loaders, as TensorFlow users feed Keras: the ImageFolder tree's JPEGs and the TFRecord
shards, each decoded and augmented as the torch loaders do (a random crop of 8-100% of
the area at 3/4 to 4/3 aspect, resized, a random flip, ImageNet mean and standard deviation), NHWC.

Rank ``r`` of ``n`` reads every ``n``-th file (or record) from the ``r``-th, reshuffled every epoch
with the seed ``seed + rank``; ``num_workers`` is the map's parallelism and its private thread
pool, as the DataLoader's worker count is the native loader's. Partial batches are dropped.

Each sample carries the bytes read to make it (a file's, or a record's with TFRecord's 16 bytes of
framing) through the pipeline, so the batch the step took says what it read (:class:`ReadBatches`),
however the pipeline shuffled and read ahead.
"""
from __future__ import annotations

from pathlib import Path

import tensorflow as tf

from harness.data.tfrecord import open_tfrecord_set
from harness.rank.batches import Batches

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
PREFETCH = 2
JPEG_EXTENSIONS = (".jpg", ".jpeg")


def training_transform(encoded: tf.Tensor, image_size: int) -> tf.Tensor:
    shape = tf.image.extract_jpeg_shape(encoded)
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        shape, tf.zeros((1, 0, 4)), min_object_covered=0.0, aspect_ratio_range=(3 / 4, 4 / 3),
        area_range=(0.08, 1.0), max_attempts=10, use_image_if_no_bounding_boxes=True)
    window = tf.stack([begin[0], begin[1], size[0], size[1]])
    image = tf.io.decode_and_crop_jpeg(encoded, window, channels=3)
    image = tf.image.resize(image, (image_size, image_size)) / 255.0
    image = tf.image.random_flip_left_right(image)
    return (image - IMAGENET_MEAN) / IMAGENET_STD


TFRECORD_FRAMING = 16
"""Bytes a TFRecord file holds around each record: its length (8) and two masked CRC32s (4 each)."""


class ReadBatches(Batches):
    """Batches of ``(images, labels, bytes read per image)``, yielded as ``(images, labels)``; the
    last one's reading is :meth:`batch_data`'s."""

    _last_read = None

    def __iter__(self):
        for images, labels, read in self._batches:
            self._last_read = read
            yield images, labels

    @property
    def source(self):
        return self._batches.map(lambda images, labels, read: (images, labels))

    def batch_data(self) -> dict:
        if self._last_read is None:
            return {"not_counted": {"data": "no batch was taken"}}
        return {"data": {"images_decoded": int(self._last_read.shape[0]),
                         "bytes_read": int(tf.reduce_sum(self._last_read))}}


def _pipeline(samples: tf.data.Dataset, count: int, workload, rank, decode) -> tf.data.Dataset:
    if count // rank.world_size < workload.batch_size:
        raise ValueError(f"{count} images are too few for one batch of {workload.batch_size} per rank on "
                         f"{rank.world_size} ranks")
    options = tf.data.Options()
    options.threading.private_threadpool_size = max(1, workload.num_workers)
    options.deterministic = False
    return (samples.shard(rank.world_size, rank.rank)
            .shuffle(count // rank.world_size, seed=workload.seed + rank.rank, reshuffle_each_iteration=True)
            .repeat()
            .map(decode, num_parallel_calls=max(1, workload.num_workers))
            .batch(workload.batch_size, drop_remainder=True)
            .prefetch(PREFETCH)
            .with_options(options))


def FolderLoader(*, workload, rank) -> Batches:  # noqa: N802
    if workload.data_dir is None:
        raise ValueError("the native loader needs a dataset directory (--data)")
    root = Path(workload.data_dir)
    classes = sorted(entry.name for entry in root.iterdir() if entry.is_dir())
    files = [(str(path), label) for label, name in enumerate(classes) for path in sorted((root / name).iterdir())
             if path.is_file()]
    if other := [path for path, _ in files if not path.lower().endswith(JPEG_EXTENSIONS)]:
        raise ValueError(f"the tf.data loader decodes JPEGs only (as the study's ImageNet is); {len(other)} file(s) "
                         f"are not, e.g. {other[0]}")
    paths, labels = zip(*files) if files else ((), ())
    samples = tf.data.Dataset.from_tensor_slices((list(paths), list(labels)))

    def decode(path, label):
        encoded = tf.io.read_file(path)
        return training_transform(encoded, workload.image_size), label, tf.cast(tf.strings.length(encoded), tf.int64)
    return ReadBatches(_pipeline(samples, len(files), workload, rank, decode),
                    {"num_workers": workload.num_workers, "images": len(files), "classes": len(classes),
                     "reader": "tf.data files"})


def TFRecordLoader(*, workload, rank) -> Batches:  # noqa: N802
    if workload.tfrecord_dir is None:
        raise ValueError("the TFRecord loaders need TFRecord shards (--data-tfrecord)")
    shards = open_tfrecord_set(workload.tfrecord_dir)
    features = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64)}
    samples = tf.data.TFRecordDataset([str(path) for path in shards.shards])

    def decode(record):
        example = tf.io.parse_single_example(record, features)
        label = tf.cast(example["image/class/label"] - shards.label_base, tf.int32)
        read = tf.cast(tf.strings.length(record), tf.int64) + TFRECORD_FRAMING
        return training_transform(example["image/encoded"], workload.image_size), label, read
    return ReadBatches(_pipeline(samples, shards.records, workload, rank, decode),
                    {"num_workers": workload.num_workers, "images": shards.records, "shards": len(shards.shards),
                     "reader": "tf.data TFRecordDataset"})

"""The accuracy task: a short, real, seeded training whose validation accuracy shows what the
global batch size and the learning-rate schedule do to it (Aach et al. 2023, Fig. 8 and 9).

    python -m harness.tasks.accuracy --schedules step,cosine,exponential --global-batches 32,128,512,1024 --out DIR

(the command line trains on one rank, emulating a global batch with the per-rank batch; under a
launcher the worker calls :func:`harness.rank.accuracy.run_accuracy`). Its defaults -- 8 epochs, 0.5
of them warm-up, base_lr 0.05 per 32 images scaled linearly with the global batch -- take 2-4 s of
training per run on one CPU core and show the study's finding: accuracy ~99.5 % up to a global
batch of 128, then falling (about 95 % at 512, 50-80 % at 1024), the exponential schedule best at
1024.

The data, the model and the training, which the ranks run, are :mod:`harness.rank.accuracy`; this
module is the command line (its plots: :mod:`harness.report.plots_accuracy`).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from harness.rank.accuracy import load_digits_split, run_accuracy, single_rank_adapter


def main(argv: list[str] | None = None) -> int:
    from harness.rank.schedulers import SCHEDULE_NAMES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", default=",".join(SCHEDULE_NAMES))
    parser.add_argument("--global-batches", default="32,64,128,256,512,1024")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--warmup-epochs", type=float, default=0.5)
    parser.add_argument("--base-lr", type=float, default=0.05, help="learning rate of --reference-batch images")
    parser.add_argument("--reference-batch", type=int, default=32)
    parser.add_argument("--seeds", default="1234")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--running-bn", action="store_true",
                        help="evaluate with BN running averages instead of precise BN statistics")
    parser.add_argument("--out", type=Path, help="write results.json and the plots here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = load_digits_split()
    results = []
    with single_rank_adapter() as (adapter, rank):
        for schedule in args.schedules.split(","):
            for global_batch in (int(b) for b in args.global_batches.split(",")):
                for seed in (int(s) for s in args.seeds.split(",")):
                    result = run_accuracy(adapter, rank=rank, device=torch.device("cpu"), schedule=schedule,
                                          epochs=args.epochs, batch_per_rank=global_batch, base_lr=args.base_lr,
                                          reference_batch=args.reference_batch, warmup_epochs=args.warmup_epochs,
                                          seed=seed, precise_bn=not args.running_bn, data=data)
                    result["seed"] = seed
                    results.append(result)
                    print(f"{schedule:12s} batch {global_batch:5d} seed {seed}: "
                          f"final accuracy {result['final_val_accuracy']:.3f} "
                          f"({result['steps']} steps, {result['train_s']:.1f} s)", file=sys.stderr)
    if args.out:
        from harness.report.plots_accuracy import write_all

        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        for path in write_all(results, args.out):
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

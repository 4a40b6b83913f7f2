"""Counted work of a step, in-process: operators, FLOPs against torchvision's published count,
collectives at torch's dispatcher against the model's parameter bytes, memory, data, and what a
rank says where it cannot count."""
import os
import socket

import pytest
import torch
import torch.distributed as dist

from harness.rank.cifar_resnet import cifar_resnet
from harness.rank.loaders.native import NativeLoader
from harness.rank.rankenv import RankInfo
from harness.rank.torch_work import TorchWorkCounter, collective_bytes, operator_name
from harness.rank.trainloop import train
from harness.rank.work import COUNTED_PARTS, CollectiveTally, StepCounting, WorkCounter, per_step, uncounted
from harness.rank.workload import Workload

from bench_tests.local_adapter import LocalAdapter

CPU = torch.device("cpu")


def local_adapter(model) -> LocalAdapter:
    adapter = LocalAdapter()
    adapter.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), torch.nn.CrossEntropyLoss())
    return adapter


def sgd_step(model, images, labels):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step():
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def counted(step, counter=None, *, steps=2, warm=True) -> dict:
    """``steps`` counted steps, after one that makes the optimizer's state (as a timed window does)."""
    if warm:
        step()
    counting = StepCounting(counter or TorchWorkCounter(CPU))
    for _ in range(steps):
        counting.start()
        step()
        counting.stop(images=2)
    return counting.work()


def test_a_step_counts_the_same_twice():
    torch.manual_seed(0)
    model = cifar_resnet(20, num_classes=10)
    work = counted(sgd_step(model, torch.randn(2, 3, 32, 32), torch.tensor([1, 2])))
    assert work["steps"] == 2 and "steps_differ" not in work  # exact counts, step after step
    assert work["operators"]["aten::convolution"] == 19  # the stem and 18 in the blocks (shortcuts pad, no conv)
    assert work["operators"]["aten::convolution_backward"] == 19
    assert work["collectives"] == {}  # no process group: none, counted
    assert work["memory"]["step_peak_bytes"] > 0
    assert work["data"] == {"images": 2}
    assert work["not_counted"] == {"gpu": "a CPU rank runs no GPU kernels",
                                   "data": "this loader does not say what it read"}


def test_flops_split_into_forward_and_backward_as_a_known_layer_gives_them():
    """A 3x3 convolution, 3 -> 8 channels on 8x8 images, then a 512 -> 10 linear layer, batch 2.
    Forward: the convolution's 2 x 8 x 8 x 8 outputs of 27 multiply-adds each, 27,648, and the
    linear layer's 2 x 10 of 512, 10,240, at two FLOPs each: 75,776. Backward: the convolution's
    weight gradient only (the images need none), 55,296; the linear layer's input and weight
    gradients, 20,480 each: 96,256. SGD's update is elementwise: no FLOPs, so not said."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.Flatten(),
                                torch.nn.Linear(512, 10))
    work = counted(sgd_step(model, torch.randn(2, 3, 8, 8), torch.tensor([1, 2])))
    assert work["flops"]["by_phase"] == {"forward": 75_776, "backward": 96_256}
    assert work["flops"]["total"] == 172_032 and "steps_differ" not in work


def test_an_optimizer_step_with_a_matrix_product_has_its_flops_said():
    class ProjectedSGD(torch.optim.SGD):
        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for parameter in group["params"]:
                    if parameter.ndim == 2:  # project the weight's gradient: a 10x10 by 10x4 product
                        parameter.grad.copy_(torch.eye(parameter.shape[0]) @ parameter.grad)
            return super().step(closure)

    model = torch.nn.Linear(4, 10, bias=False)
    optimizer = ProjectedSGD(model.parameters(), lr=0.1)

    def step():
        model(torch.randn(3, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    work = counted(step, steps=1)
    assert work["flops"]["by_phase"] == {"forward": 2 * 3 * 4 * 10, "backward": 2 * 10 * 3 * 4,
                                         "optimizer": 2 * 10 * 10 * 4}


def test_resnet50_flops_match_torchvisions_published_multiply_adds():
    """torchvision publishes 4.09 G multiply-adds for ResNet50's forward pass at 224 px: a training
    step is about three forward passes' work, at two FLOPs per multiply-add."""
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet50()
    published = torchvision.models.ResNet50_Weights.IMAGENET1K_V1.meta["_ops"]  # GMACs, forward, 224 px
    assert published == pytest.approx(4.09, abs=0.01)
    torch.set_num_threads(1)
    work = counted(sgd_step(model, torch.randn(1, 3, 224, 224), torch.tensor([3])), steps=1, warm=False)
    assert work["flops"]["by_phase"]["forward"] / 2 / 1e9 == pytest.approx(published, rel=0.01)
    # backward: the gradients of each layer's input and weights, twice the forward's, less the stem's
    # input gradient (the images need none): 7x7x3 weights at 112x112 for 64 channels, 0.118 G multiply-adds
    assert work["flops"]["by_phase"]["backward"] / 2 / 1e9 == pytest.approx(2 * published - 0.118, rel=0.01)
    assert "optimizer" not in work["flops"]["by_phase"]


def test_a_wider_layer_is_counted_as_more_flops_in_convolution():
    torch.manual_seed(0)
    images, labels = torch.randn(2, 3, 32, 32), torch.tensor([1, 2])
    narrow = counted(sgd_step(cifar_resnet(20, num_classes=10), images, labels))
    wide_model = cifar_resnet(20, num_classes=10)
    wide_model.fc = torch.nn.Sequential(torch.nn.Linear(64, 80), torch.nn.Linear(80, 10))
    wide = counted(sgd_step(wide_model, images, labels))
    assert wide["flops"]["total"] > narrow["flops"]["total"]
    assert wide["flops"]["by_operator"]["aten::convolution"] == narrow["flops"]["by_operator"]["aten::convolution"]
    assert wide["operators"]["aten::addmm"] == narrow["operators"]["aten::addmm"] + 1


@pytest.fixture
def process_group():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_ddp_all_reduces_each_parameter_byte_once_per_step(process_group):
    torch.manual_seed(0)
    model = cifar_resnet(20, num_classes=10)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.25)
    work = counted(sgd_step(ddp, torch.randn(2, 3, 32, 32), torch.tensor([1, 2])))
    parameter_bytes = sum(parameter.nbytes for parameter in model.parameters())
    assert work["collectives"]["all_reduce"]["bytes"] == parameter_bytes
    assert work["collectives"]["all_reduce"]["calls"] >= 4  # quarter-megabyte buckets of 1.08 MB
    buffers = sum(buffer.nbytes for buffer in model.buffers())
    assert work["collectives"]["broadcast"]["bytes"] == buffers  # batch norm's statistics, every forward


def test_a_collective_counts_the_bytes_this_rank_contributes(process_group):
    tally = CollectiveTally()
    from harness.rank.torch_work import StepCountingMode

    with StepCountingMode(tally):
        dist.all_reduce(torch.ones(10))
        dist.broadcast(torch.ones(3, dtype=torch.float64), src=0)
        out = [torch.zeros(4)]
        dist.all_gather(out, torch.ones(4))
        dist.barrier()
    assert tally.to_json() == {"all_gather": {"calls": 1, "bytes": 16}, "all_reduce": {"calls": 1, "bytes": 40},
                               "barrier": {"calls": 1, "bytes": 0}, "broadcast": {"calls": 1, "bytes": 24}}
    assert operator_name(torch.ops.c10d.allreduce_.default) == "c10d::allreduce_"
    assert collective_bytes(torch.ops.c10d.barrier.default, (), {}) == 0


HOROVOD_COUNTED = """
import json, torch
from harness.rank.frameworks.horovod import HorovodAdapter
from harness.rank.work import CollectiveTally
import horovod.torch as hvd

hvd.init()
tally = CollectiveTally()
with HorovodAdapter().counting_collectives(tally):
    hvd.allreduce(torch.ones(10), name="a")
    hvd.grouped_allreduce([torch.ones(3), torch.ones(5, dtype=torch.float64)], name="g")
    hvd.broadcast(torch.ones(4), root_rank=0, name="b")
    hvd.allgather(torch.ones(2, 3), name="c")
hvd.allreduce(torch.ones(100), name="after")  # after the count: not counted
print(json.dumps(tally.to_json()))
hvd.shutdown()
"""


def test_horovods_collectives_are_counted_where_its_api_hands_each_tensor_over():
    """Horovod's real API on one rank (its own process: Horovod's MPI stays out of pytest's), each
    tensor's bytes as its dtype and shape give them."""
    pytest.importorskip("horovod.torch")
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", HOROVOD_COUNTED], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "all_reduce": {"calls": 3, "bytes": 40 + 12 + 40},  # 10 float32; 3 float32 and 5 float64, grouped
        "broadcast": {"calls": 1, "bytes": 16}, "all_gather": {"calls": 1, "bytes": 24}}


def test_kernel_count_takes_the_profilers_gpu_kernels_and_sums_their_device_time():
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    from harness.rank.torch_work import kernel_totals

    events = [FunctionEvent(id=1, name="aten::mm", thread=0, start_us=0, end_us=100),  # the host side
              FunctionEvent(id=2, name="gemm", thread=0, start_us=10, end_us=35, device_type=DeviceType.CUDA,
                            use_device="cuda"),
              FunctionEvent(id=3, name="add", thread=0, start_us=40, end_us=80, device_type=DeviceType.CUDA,
                            use_device="cuda")]  # as a profile with CUDA among its activities makes them
    assert kernel_totals(events) == (2, 65.0)
    assert kernel_totals(events[:1]) == (0, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_gpu_step_counts_its_kernels_beside_their_time():
    cuda = torch.device("cuda")
    a, b = torch.ones(1000, device=cuda), torch.ones(1000, device=cuda)
    work = counted(lambda: (a + b) * b, TorchWorkCounter(cuda), steps=2)
    assert work["gpu"] == {"kernels": 2}  # one elementwise kernel each
    assert work["memory"]["allocator_peak_bytes"] >= 4 * 4000  # a, b and the two results: CUDA's own peak
    assert work["timed"]["gpu_kernel_time_s"] > 0 and "steps_differ" not in work


def test_a_failed_count_is_named_and_the_steps_go_on():
    class Broken(WorkCounter):
        def start(self):
            raise RuntimeError("no dispatcher")

    steps = []
    work = counted(lambda: steps.append(1), Broken(), steps=2, warm=False)
    assert work["not_counted"] == {part: "counting failed: RuntimeError: no dispatcher" for part in COUNTED_PARTS}
    assert len(steps) == 2  # the steps went on


def test_steps_that_count_differently_are_named():
    counts = [{"operators": {"aten::add": 1}, "memory": {"step_peak_bytes": 8}},
              {"operators": {"aten::add": 2}, "memory": {"step_peak_bytes": 8}}]
    assert per_step(counts) == {**counts[1], "steps": 2, "steps_differ": ["operators"]}
    assert uncounted("why")["not_counted"] == {part: "why" for part in COUNTED_PARTS}


def test_the_training_loop_counts_steps_after_its_window_only():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    batches = iter([(torch.randn(2, 3, 2, 2), torch.tensor([0, 1]))] * 6)
    samples = train(local_adapter(model), batches, warmup_steps=1, steps=3, device=CPU, progress=lambda *a: None,
                    counter=TorchWorkCounter(CPU), batch_data=lambda: {"data": {"bytes_read": 5}})
    assert len(samples["step_times"]) == 3 and samples["images"] == 6  # the counted step is not timed
    assert samples["work"]["data"] == {"images": 2, "bytes_read": 5}
    assert samples["work"]["operators"]["aten::addmm"] == 1 and samples["work"]["steps"] == 1
    assert len(list(batches)) == 1  # one batch taken for the counted step, the rest left


def test_the_native_loader_says_which_files_its_last_batch_read(tiny_dataset):
    workload = Workload(image_size=32, batch_size=4, num_workers=0, data_dir=str(tiny_dataset))
    rank = RankInfo(rank=0, world_size=1, local_rank=0, local_world_size=1, master_addr="127.0.0.1",
                    master_port=1, source="test")
    loader = NativeLoader(workload=workload, rank=rank, device=CPU)
    batches = iter(loader)
    next(batches)
    first = loader.batch_data()["data"]
    order = list(loader.sampler)[:4]
    assert first == {"images_decoded": 4,
                     "bytes_read": sum(os.path.getsize(loader.loader.dataset.samples[i][0]) for i in order)}
    assert first["bytes_read"] > 4 * 100  # real JPEG files

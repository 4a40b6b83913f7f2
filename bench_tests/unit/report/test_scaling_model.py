"""The scaling model, its network fits and its validation against the study (no launch). Each
term of the step has a test that fails when the term is dropped or its sign is wrong."""
import copy
import dataclasses
import json

import pytest

from harness.report import scaling_validation
from harness.report.network import Link, fit_link, read_link
from harness.report.scaling_model import (TERMS, Assumptions, CellModel, Network, allreduce_s, bucket_bytes_of,
                                          corners, hidden_at_reference, lost_efficiency, model_of_records,
                                          overlap_range, predict, step_s, step_terms)
from harness.report.stragglers import RankDelay
from harness.report.study_inputs import GPU_DECODE, NETWORK as STUDY_NETWORK, study_cell

FAST = Link.stated(2e-6, 200e9, "fast")
SLOW = Link.stated(5e-6, 20e9, "slow", spread=0.2)
NETWORK = Network(intra=FAST, inter=SLOW, gpus_per_node=4)
CELL = CellModel(name="c", reference_gpus=1, batch_per_gpu=64, compute_s=0.1, optimizer_s=0.0, data_s=0.0,
                 exposed_s=0.0, gradient_bytes=100_000_000, bucket_bytes=25 * 2**20)


def ring_seconds(nbytes, ranks, alpha, bandwidth):
    return 2 * (ranks - 1) * alpha + 2 * (ranks - 1) / ranks * nbytes / bandwidth


def test_a_link_is_fitted_back_from_ring_all_reduce_timings():
    points = [(size, ring_seconds(size, 4, 3e-6, 50e9)) for size in (2**10, 2**16, 2**20, 2**24, 2**28)]
    link = fit_link(points, 4, "exact")
    assert link.latency_s == pytest.approx(3e-6, rel=1e-6) and link.bandwidth == pytest.approx(50e9, rel=1e-6)
    assert link.bandwidth_range[0] <= link.bandwidth <= link.bandwidth_range[1]
    with pytest.raises(ValueError, match="over 1 rank"):
        fit_link(points, 1, "one")
    with pytest.raises(ValueError, match="3 or more message sizes"):
        fit_link(points[:2], 4, "two")


NCCL_TESTS = """# nThread 1 nGpus 1 minBytes 1048576 maxBytes 268435456 step: 4(factor) warmup iters: 5 iters: 20
#  Rank  0 Group  0 Pid  11 on   node01 device  0 [0x07] NVIDIA A100-SXM4-40GB
#  Rank  1 Group  0 Pid  12 on   node01 device  1 [0x0b] NVIDIA A100-SXM4-40GB
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
{rows}
# Avg bus bandwidth    : 90.1
"""
OSU = """# OSU MPI Allreduce Latency Test v7.1
# Size       Avg Latency(us)
{rows}
"""


def test_nccl_tests_and_osu_output_and_dlscale_collectives_are_read(tmp_path):
    sizes = (2**20, 2**22, 2**24, 2**26, 2**28)
    nccl = "\n".join(f"{s:>12} {s // 4:>12}     float     sum      -1  {ring_seconds(s, 2, 4e-6, 90e9) * 1e6:8.2f}"
                     f"   0.00   0.00      0  1.0  0.00  0.00  0" for s in sizes)
    (tmp_path / "nccl.txt").write_text(NCCL_TESTS.format(rows=nccl))
    link = read_link(tmp_path / "nccl.txt")
    assert link.bandwidth == pytest.approx(90e9, rel=0.01) and "nccl-tests" in link.source  # 2 ranks, from its lines

    osu = "\n".join(f"{s:<16}{ring_seconds(s, 8, 5e-6, 12e9) * 1e6:.2f}" for s in sizes)
    (tmp_path / "osu.txt").write_text(OSU.format(rows=osu))
    with pytest.raises(ValueError, match="give the count"):
        read_link(tmp_path / "osu.txt")
    assert read_link(tmp_path / "osu.txt", ranks=8).bandwidth == pytest.approx(12e9, rel=0.01)

    rows = [{"bytes": s, "time_s": ring_seconds(s, 2, 1e-4, 1e9)} for s in sizes]
    (tmp_path / "c.json").write_text(json.dumps({"kind": "collectives", "ranks": 2, "backend": "gloo", "results": rows}))
    assert read_link(tmp_path / "c.json").latency_s == pytest.approx(1e-4, rel=0.01)
    (tmp_path / "other.txt").write_text("hello")
    with pytest.raises(ValueError, match="not dlscale collectives JSON, nccl-tests"):
        read_link(tmp_path / "other.txt")


def test_an_all_reduce_is_free_alone_a_ring_within_reach_and_a_tree_at_scale():
    assert allreduce_s(1e8, 1, FAST) == 0
    assert allreduce_s(1e8, 2, FAST) == pytest.approx(ring_seconds(1e8, 2, 2e-6, 200e9))
    latency_bound = Link.stated(1e-3, 1e12, "latency")
    assert allreduce_s(1e3, 1024, latency_bound) == pytest.approx(2 * 10 * 1e-3 + 2 * 1e3 / 1e12)  # the tree
    assert allreduce_s(1e8, 8, FAST, buckets=4) > allreduce_s(1e8, 8, FAST, buckets=1)  # more latency terms


def efficiency_at(cell, gpus, network=NETWORK, **extra):
    return predict(cell, network, [gpus], **extra)[0].efficiency


def test_efficiency_is_one_at_the_base_and_falls_with_slower_links_and_with_a_delay():
    one_node, *rest = predict(CELL, NETWORK, [4, 64, 1024])
    assert one_node.efficiency == pytest.approx(1.0)
    assert [p.efficiency for p in rest] == sorted((p.efficiency for p in rest), reverse=True)
    for p in rest:
        assert p.efficiency_range[0] <= p.efficiency <= p.efficiency_range[1]
    slower = predict(CELL, Network(intra=FAST, inter=SLOW.scaled(0.01), gpus_per_node=4), [1024])[0]
    assert slower.efficiency < rest[-1].efficiency
    delayed = dataclasses.replace(CELL, delay=RankDelay(mean_s=1e-5))  # rare delays: the wait grows as G - 1
    assert step_s(delayed, NETWORK, 1024) - step_s(CELL, NETWORK, 1024) == pytest.approx(1e-5 * 1023)
    likely = corners(CELL, NETWORK)[0]
    assert efficiency_at(delayed, 1024) == pytest.approx(
        (step_s(CELL, NETWORK, 4, likely) + 3e-5) / (step_s(CELL, NETWORK, 1024, likely) + 1023e-5))


def test_the_steps_terms_add_up_and_their_parts_of_the_loss_add_up_to_it():
    cell = dataclasses.replace(CELL, delay=RankDelay(spread_s=0.002, mean_s=1e-5), decode_s=0.01,
                               data_prefetched=False)
    terms = step_terms(cell, NETWORK, 256, fs_bandwidth=1e6, image_bytes=1.0)
    assert set(terms) == set(TERMS) and sum(terms.values()) == pytest.approx(
        step_s(cell, NETWORK, 256, fs_bandwidth=1e6, image_bytes=1.0))
    parts = lost_efficiency(cell, NETWORK, 256, fs_bandwidth=1e6, image_bytes=1.0)
    assert sum(parts.values()) == pytest.approx(1 - efficiency_at(cell, 256, fs_bandwidth=1e6, image_bytes=1.0))
    assert parts["compute"] == 0 and parts["wait for the slowest rank"] > 0 and parts["file system"] > 0


def test_without_the_wait_for_the_slowest_rank_the_predicted_efficiency_rises():
    published = json.loads(scaling_validation.PUBLISHED.read_text())
    delay, others = scaling_validation.fit(published).delays
    with_wait = study_cell("resnet50", "ddp", "dali-cpu", delay, others)
    without = study_cell("resnet50", "ddp", "dali-cpu")
    assert efficiency_at(without, 1024, STUDY_NETWORK) > efficiency_at(with_wait, 1024, STUDY_NETWORK) + 0.1
    assert efficiency_at(without, 1024, STUDY_NETWORK) > 0.95  # bandwidth alone loses almost nothing


def test_the_same_delay_costs_a_longer_step_a_smaller_share():
    delay = RankDelay(mean_s=2e-5)
    short = dataclasses.replace(CELL, delay=delay)
    long = dataclasses.replace(short, compute_s=2 * short.compute_s)
    assert (lost_efficiency(long, NETWORK, 1024)["wait for the slowest rank"]
            < lost_efficiency(short, NETWORK, 1024)["wait for the slowest rank"])
    published = json.loads(scaling_validation.PUBLISHED.read_text())
    fitted = scaling_validation.fit(published)
    resnet50, resnet152 = (scaling_validation.predicted({**scaling_validation.DELAY_POINT, "model": model}, fitted)
                           for model in ("resnet50", "resnet152"))
    assert resnet152.efficiency > resnet50.efficiency  # the study: ResNet152 0.81, ResNet50 0.76


def test_decoding_on_the_gpu_costs_throughput_at_every_g_and_efficiency_at_scale():
    delay = RankDelay(mean_s=3e-5)
    cpu = study_cell("resnet50", "ddp", "dali-cpu", delay)
    gpu = study_cell("resnet50", "ddp", "dali-gpu", delay)
    assert gpu.decode_s == pytest.approx(64 / GPU_DECODE.value)  # the published figure, not a fitted one
    for gpus in (4, 64, 1024):
        assert (predict(gpu, STUDY_NETWORK, [gpus])[0].throughput < predict(cpu, STUDY_NETWORK, [gpus])[0].throughput)
    assert efficiency_at(gpu, 64, STUDY_NETWORK) < efficiency_at(cpu, 64, STUDY_NETWORK)
    assert efficiency_at(gpu, 1024, STUDY_NETWORK) < efficiency_at(cpu, 1024, STUDY_NETWORK)
    assert lost_efficiency(gpu, STUDY_NETWORK, 1024)["GPU decoding"] > 0
    assert lost_efficiency(cpu, STUDY_NETWORK, 1024)["GPU decoding"] == 0


def test_the_overlap_measured_on_two_ranks_is_kept_and_a_file_system_limits_the_native_loader():
    two = dataclasses.replace(CELL, reference_gpus=2, exposed_s=0.0001)
    comm = allreduce_s(two.gradient_bytes, 2, FAST, buckets=two.buckets)
    assert hidden_at_reference(two, NETWORK) == pytest.approx(comm - 0.0001)
    assert overlap_range(two, NETWORK) == pytest.approx((comm - 0.0001,) * 3)
    assert hidden_at_reference(CELL, NETWORK) is None  # one rank: not measured, the band spans it
    assert overlap_range(CELL, NETWORK) == pytest.approx((0.1 / 3, 0.0, 0.2 / 3))  # half, none, all of backward
    hid_all = dataclasses.replace(two, exposed_s=0.0)  # hid all it was given: at least that, perhaps more
    likely, least, most = overlap_range(hid_all, NETWORK)
    assert least == pytest.approx(comm) and likely >= least and most >= likely
    shared = step_s(CELL, NETWORK, 1024, Assumptions(hidden_s=0.0), fs_bandwidth=1e5, image_bytes=1.0)
    assert shared >= 1024 * 64 / 1e5
    assert (efficiency_at(CELL, 1024, fs_bandwidth=1e5, image_bytes=1.0)
            < efficiency_at(CELL, 1024, fs_bandwidth=3e5, image_bytes=1.0) < efficiency_at(CELL, 1024))


def test_a_prefetching_loader_is_bound_by_the_file_system_and_a_waiting_one_pays_it_in_full():
    prefetching, waiting = CELL, dataclasses.replace(CELL, data_prefetched=False)
    rest = step_s(CELL, NETWORK, 1024)
    for served in (0.5 * rest, 2 * rest):  # the file system faster, then slower than the rest of the step
        rate = 1024 * 64 / served
        assert step_s(prefetching, NETWORK, 1024, fs_bandwidth=rate, image_bytes=1.0) == pytest.approx(max(rest, served))
        assert step_s(waiting, NETWORK, 1024, fs_bandwidth=rate, image_bytes=1.0) == pytest.approx(rest + served)
    assert study_cell("resnet50", "ddp", "native").data_prefetched  # PyTorch's DataLoader with 8 workers


def test_each_frameworks_fusion_bucket_is_read_from_its_recorded_settings():
    assert bucket_bytes_of({"bucket_cap_mb": 25}) == 25 * 2**20
    assert bucket_bytes_of({"fusion_threshold_bytes": 64 * 2**20}) == 64 * 2**20
    assert bucket_bytes_of({"config": {"zero_optimization": {"reduce_bucket_size": 5e8}}}) == 2_000_000_000
    assert bucket_bytes_of({}) == 25 * 2**20


def test_a_cell_is_modelled_from_its_ranks_records():
    steps = [0.30, 0.31, 0.30, 0.29, 0.30, 0.31, 0.30, 0.29, 0.30, 0.40]  # one delayed step in ten
    record = {"step_times": steps, "data_wait": [0.01] * 10, "fwd_bwd": [0.25] * 10,
              "optimizer": [0.02] * 10, "compute_probe": [0.2, 0.2], "framework_settings": {"bucket_cap_mb": 25}}
    model = model_of_records("ddp-synthetic-resnet50-g2", [dict(record, rank=0), dict(record, rank=1)],
                             batch_per_gpu=8, num_classes=10)
    assert (model.reference_gpus, model.batch_per_gpu, model.buckets) == (2, 8, 4)
    assert model.compute_s == pytest.approx(0.2) and model.exposed_s == pytest.approx(0.05)
    assert model.delay.probability == pytest.approx(0.1) and model.delay.duration_s == pytest.approx(0.10)
    counted = dict(record, work={"collectives": {"all_reduce": {"calls": 1, "bytes": 1_102_288}}})
    model = model_of_records("ddp-synthetic-resnet20-g1", [dict(counted, rank=0)], batch_per_gpu=8)
    assert model.gradient_bytes == 1_102_288  # what the rank counted, for any model
    with pytest.raises(ValueError, match="a scaling cell with its records"):
        model_of_records("accuracy-ddp-step-b32-g1", [record], batch_per_gpu=8)


def study():
    return json.loads(scaling_validation.PUBLISHED.read_text())


def test_each_fitted_figure_rests_on_one_published_point_and_reproduces_it():
    published = study()
    fitted = scaling_validation.fit(published)
    tally = scaling_validation.validate(published, fitted)
    assert sum(row.role == "fitted" for row in tally.rows) == 2
    for row in (r for r in tally.rows if r.role == "fitted"):
        assert row.efficiency == pytest.approx(row.point["value"], abs=0.005)
    moved = copy.deepcopy(published)
    own = next(p for p in moved["efficiency"] if scaling_validation._matches(p, scaling_validation.DELAY_POINT))
    own["value"] = 0.7
    assert scaling_validation.fit(moved).delay_mean_s > fitted.delay_mean_s  # its own point moves it


def test_leave_one_out_predicts_each_fitted_point_from_a_fit_without_it():
    published = study()
    left_out = scaling_validation.leave_one_out(published)
    assert {(item.point["loader"], item.point["gpus"]) for item in left_out} == {("dali-cpu", 1024), ("native", 128)}
    for item in left_out:
        moved = copy.deepcopy(published)  # the held-out value must not reach its own refit
        index = published["efficiency"].index(item.point)
        moved["efficiency"][index]["value"] = 0.2
        refit = scaling_validation.fit(moved, leave_out=moved["efficiency"][index])
        assert refit == item.fitted
    delay = next(item for item in left_out if item.point["loader"] == "dali-cpu")
    assert delay.efficiency is not None and delay.fitted.delay_mean_s != scaling_validation.fit(published).delay_mean_s
    native = next(item for item in left_out if item.point["loader"] == "native")
    assert native.efficiency is None and native.fitted.images_per_s is None  # no other native value to fit to


def test_the_validation_names_each_term_with_its_source(capsys):
    assert scaling_validation.main([]) == 0
    out = capsys.readouterr().out
    for term in TERMS:
        assert any(line.startswith(term) and ("published" in line or "fitted" in line) for line in out.splitlines())
    assert GPU_DECODE.url in out and "fitted: the wait for the slowest rank" in out
    assert "Leave-one-out" in out and "Where the efficiency goes" in out and "Out of sample" in out
    assert "hypothesis" in next(line for line in out.splitlines() if line.startswith("file system"))
    for model in ("resnet50", "resnet152"):
        assert {line.split()[2] for line in out.splitlines() if line.startswith(model)} >= {"4", "64", "1024"}


def test_the_published_figures_name_the_study_by_its_seed_file_not_a_path():
    source = json.loads(scaling_validation.PUBLISHED.read_text())["source"]
    assert not any(isinstance(value, str) and value.startswith("/") for value in source.values())
    assert "001_2fd5bcf02b41e46f.txt" in source["text_copy_read"]


def test_the_command_predicts_a_results_files_cell_with_a_timings_file(tmp_path, capsys):
    from harness.report.scaling_model import main

    record = {"rank": 0, "step_times": [0.30, 0.31], "data_wait": [0.0] * 2, "fwd_bwd": [0.25] * 2,
              "optimizer": [0.02] * 2, "compute_probe": [0.24], "framework_settings": {"bucket_cap_mb": 25}}
    (tmp_path / "results.json").write_text(json.dumps({
        "workload": {"batch_size": 16, "num_classes": 10},
        "cells": [{"cell": "ddp-synthetic-resnet50-g1", "records": [record]}]}))
    rows = [{"bytes": s, "time_s": ring_seconds(s, 2, 5e-5, 1e9)} for s in (2**16, 2**20, 2**24)]
    (tmp_path / "c.json").write_text(json.dumps({"kind": "collectives", "ranks": 2, "results": rows}))
    assert main([str(tmp_path / "results.json"), "--cell", "ddp-synthetic-resnet50-g1", "--intra",
                 str(tmp_path / "c.json"), "--gpus", "4,1024", "--network-speedup", "2"]) == 0
    out = capsys.readouterr().out
    assert "not measured (a 1-rank reference)" in out and "bandwidth x2" in out and "what holds a rank up" in out
    assert [line.split()[0] for line in out.splitlines() if line[:1].isdigit()] == ["4", "1024"]
    assert main([str(tmp_path / "results.json"), "--cell", "nope", "--intra", str(tmp_path / "c.json")]) == 2
    assert "no cell 'nope' in the results" in capsys.readouterr().err


def test_the_command_says_whether_the_loader_waits_for_a_shared_file_system(tmp_path, capsys):
    from harness.report.scaling_model import main

    record = {"rank": 0, "step_times": [0.30, 0.31, 0.30], "data_wait": [0.0] * 3, "fwd_bwd": [0.25] * 3,
              "optimizer": [0.02] * 3, "compute_probe": [0.24], "framework_settings": {"bucket_cap_mb": 25}}
    (tmp_path / "results.json").write_text(json.dumps({
        "workload": {"batch_size": 16, "num_classes": 10},
        "cells": [{"cell": "ddp-synthetic-resnet50-g1", "records": [record]}]}))
    rows = [{"bytes": s, "time_s": ring_seconds(s, 2, 5e-5, 1e9)} for s in (2**16, 2**20, 2**24)]
    (tmp_path / "c.json").write_text(json.dumps({"kind": "collectives", "ranks": 2, "results": rows}))
    common = [str(tmp_path / "results.json"), "--cell", "ddp-synthetic-resnet50-g1", "--intra", str(tmp_path / "c.json"),
              "--gpus", "16", "--fs-bandwidth-gbps", "0.0001", "--image-kb", "1"]  # 16 x 16 images: 2.6 s a step

    def step(*flags):
        assert main([*common, *flags]) == 0
        return float(next(line for line in capsys.readouterr().out.splitlines() if line.startswith("16 ")).split()[4])
    served = 16 * 16 * 1e3 / 1e5
    assert step() == pytest.approx(served, rel=1e-3)  # prefetching: the file system bounds the step
    assert step("--loader-waits") == pytest.approx(served + 0.3, rel=0.05)  # waiting: it adds to it

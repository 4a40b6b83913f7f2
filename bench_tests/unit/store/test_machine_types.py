"""Baselines per machine type (issue 63): a file holds, per cell, an entry for each machine type; a cell is judged
by its machine's entry and is stale only where the file holds none; recording replaces this machine's entry and
keeps the others; two entries for one machine are refused. And the fingerprint's huge pages as the ranks measured
them."""
from __future__ import annotations

import json

import pytest

from harness.judging.fingerprint import huge_pages_of
from harness.judging.stats import Estimate
from harness.judging.verdicts import Evidence, judge_cell
from harness.store.baselines import BaselineError, BaselineFile, machine_label, machine_of

CELL = "ddp-synthetic-resnet50-g1"
MILAN = {"cpu": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 1 stepping 1", "isa": "avx2", "memory_gib": 24,
         "cores": 2, "ranks": 1, "cores_per_rank": 1}
GENOA = {**MILAN, "cpu_id": "AuthenticAMD family 25 model 17 stepping 1", "isa": "avx2 avx512f avx512_bf16"}
SAPPHIRE = {**MILAN, "cpu_id": "GenuineIntel family 6 model 143 stepping 8"}
STACK = {"python": "3.11.7", "torch": "2.14.1", "huge_pages": "thp"}


def entry(value: float, hardware: dict) -> dict:
    return {"throughput": {"value": value, "lower": -0.1, "upper": 0.1, "unit": "img/s"}, "config_hash": "abc",
            "config": {"batch_size": 16}, "fingerprint": {"hardware": hardware, "stack": STACK}}


def two_machines(tmp_path) -> BaselineFile:
    path = tmp_path / "sys.json"
    path.write_text(json.dumps({"schema_version": 2, "system": "sys",
                                "cells": {CELL: [entry(27.8, MILAN), entry(41.0, GENOA)]}}))
    return BaselineFile.load(path, "sys")


def judged(file: BaselineFile, value: float, hardware: dict) -> list[str]:
    evidence = Evidence(cell_id=CELL, config_hash="abc", config={"batch_size": 16},
                        throughput=Estimate(value=value, low=value - 0.3, high=value + 0.3, n_steps=50),
                        fingerprint={"hardware": hardware, "stack": STACK})
    judgement = judge_cell(evidence, file.entry(CELL, hardware),
                           {"throughput": file.reference(CELL, "throughput", hardware)})
    return [f"{verdict.kind}: {verdict.message}" for verdict in judgement.verdicts]


def test_each_machine_type_is_judged_by_its_own_entry(tmp_path):
    file = two_machines(tmp_path)
    assert judged(file, 28.0, MILAN)[0].startswith("pass")
    assert judged(file, 41.5, GENOA)[0].startswith("pass")
    assert judged(file, 30.0, GENOA)[0].startswith("fail")  # Milan's figure would have passed it
    assert judged(file, 24.0, MILAN)[0].startswith("fail")


def test_a_machine_type_the_file_does_not_hold_is_stale_naming_the_difference(tmp_path):
    [verdict] = judged(two_machines(tmp_path), 28.0, SAPPHIRE)
    assert verdict.startswith("stale") and "hardware.cpu_id: AuthenticAMD family 25 model 1" in verdict


def test_recording_replaces_this_machines_entry_and_keeps_the_others(tmp_path):
    file = two_machines(tmp_path)
    recorded = {"cell": CELL, "metrics": {"throughput": 43.0}, "config_hash": "abc", "config": {},
                "provenance": {}, "fingerprint": {"hardware": {**GENOA, "hosts": "another-vm"}, "stack": STACK}}
    changes = file.update([recorded])
    assert changes == [f"{CELL}: throughput 41 -> 43 (+4.9%)"]
    entries = json.loads(file.path.read_text())["cells"][CELL]
    assert [e["throughput"]["value"] for e in entries] == [27.8, 43.0]
    assert entries[1]["throughput"]["lower"] == -0.1  # this machine's band is kept
    sapphire = {**recorded, "fingerprint": {"hardware": SAPPHIRE, "stack": STACK}, "metrics": {"throughput": 35.0}}
    assert file.update([sapphire]) == [f"{CELL}: throughput new 35 img/s on {machine_label(machine_of(SAPPHIRE))}"]
    assert len(json.loads(file.path.read_text())["cells"][CELL]) == 3
    assert file.machines() == {machine_label(machine_of(hardware)): 1 for hardware in (MILAN, GENOA, SAPPHIRE)}


def test_two_entries_for_one_machine_type_are_refused_and_the_file_left_alone(tmp_path):
    path = tmp_path / "sys.json"
    text = json.dumps({"schema_version": 2, "cells": {CELL: [entry(27.8, MILAN), entry(30.0, {**MILAN, "ranks": 1})]}})
    path.write_text(text)
    with pytest.raises(BaselineError) as error:
        BaselineFile.load(path, "sys")
    assert str(error.value) == (f"baseline file {path} is invalid: cell {CELL!r} has two entries (1 and 2) for one "
                                f"machine type (AuthenticAMD family 25 model 1 stepping 1, avx2, 2 cores, 24 GiB); "
                                f"keep one")
    assert path.read_text() == text


def test_a_schema_1_file_reads_as_one_entry_per_cell(tmp_path):
    path = tmp_path / "sys.json"
    path.write_text(json.dumps({"schema_version": 1, "cells": {CELL: entry(27.8, MILAN)}}))
    file = BaselineFile.load(path, "sys")
    assert file.entries(CELL) == [entry(27.8, MILAN)]
    assert file.reference(CELL, "throughput", GENOA).value == 27.8  # the only entry: stale by its fingerprint


@pytest.mark.parametrize("facts, asked, measured", [
    ({"hugetlb_kib": 2048, "anon_huge_kib": 0, "thp": "madvise"}, "glibc.malloc.hugetlb=2", "pool"),
    ({"hugetlb_kib": 0, "anon_huge_kib": 0, "thp": "madvise"}, "glibc.malloc.hugetlb=2", "off"),  # the pool ran out
    ({"hugetlb_kib": 0, "anon_huge_kib": 0, "thp": "always"}, None, "thp"),  # the kernel's, asked or not
    ({"hugetlb_kib": 0, "anon_huge_kib": 38912, "thp": "madvise"}, "glibc.malloc.hugetlb=1", "thp"),
    ({"hugetlb_kib": 0, "anon_huge_kib": 0, "thp": "never"}, "glibc.malloc.hugetlb=1", "off"),  # asked, not given
    ({}, "glibc.malloc.hugetlb=1", "thp"),  # no measurement: what the rank was launched with
])
def test_the_huge_pages_are_what_the_ranks_measured(facts, asked, measured):
    variables = {"GLIBC_TUNABLES": asked} if asked else {}
    assert huge_pages_of({"launch_facts": {**facts, "variables": variables}}) == measured

"""Every adapter states its ranks' roles and implements the interface of each, with no member it
must refuse: the worker dispatches on the role (harness.rank.frameworks.base)."""
import importlib
import inspect
import types

import pytest

from harness.rank.frameworks import FRAMEWORKS, has_servers
from harness.rank.frameworks.base import Follower, FrameworkAdapter, Role, Server, Trainer
from harness.rank.frameworks.ps_common import ServerRoles


def adapter_class(framework: str) -> type:
    module, name = FRAMEWORKS.entry(framework).target.split(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("framework", FRAMEWORKS.names())
def test_an_adapter_implements_the_interfaces_of_its_roles_and_refuses_nothing(framework):
    adapter = adapter_class(framework)
    assert issubclass(adapter, FrameworkAdapter) and not inspect.isabstract(adapter)
    assert issubclass(adapter, Server) == has_servers(framework)
    assert issubclass(adapter, Trainer) or issubclass(adapter, Follower)
    for klass in adapter.__mro__:
        if klass.__module__.startswith("harness.rank.frameworks") and klass.__module__ != "harness.rank.frameworks.base":
            assert "NotImplementedError" not in inspect.getsource(klass), f"{klass.__name__} refuses a member"


def test_tensorflows_parameter_server_workers_follow_its_coordinator_and_train_nothing_themselves():
    adapter = adapter_class("tensorflow_ps_async")
    assert issubclass(adapter, Follower) and not issubclass(adapter, Trainer)
    assert adapter.worker_role is Role.FOLLOWS


@pytest.mark.parametrize("worker_role", [Role.TRAINS, Role.FOLLOWS])
def test_of_a_parameter_server_cells_ranks_the_last_serve_and_the_others_take_the_workers_role(worker_role):
    class Ranks(ServerRoles):
        def __init__(self, rank: int):
            self.rank, self.workers, self.worker_role = types.SimpleNamespace(rank=rank), 3, worker_role

    roles = [Ranks(rank).role() for rank in range(4)]
    assert roles == [worker_role] * 3 + [Role.SERVES]

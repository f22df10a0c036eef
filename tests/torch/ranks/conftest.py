"""The torch backend's tests, run as N ranks by holmes-run --torch (torchrun's variables; see
../CMakeLists.txt). Every rank runs every test in pytest's collection order, so the collectives
of one test meet the same collectives on the other ranks: a test calls the same collectives on
every rank whatever its checks find, and asserts afterwards."""

import datetime

import pytest
import torch
import torch.distributed as dist

import holmes.torch  # noqa: F401 (registers backend "holmes")


@pytest.fixture(scope="session", autouse=True)
def world():
    """The default group on backend holmes, through torch's env:// store (MASTER_ADDR/PORT)."""
    dist.init_process_group("holmes", timeout=datetime.timedelta(seconds=60))
    yield dist.group.WORLD
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture
def rank():
    return dist.get_rank()


@pytest.fixture
def size():
    return dist.get_world_size()

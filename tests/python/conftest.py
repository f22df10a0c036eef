"""Shared fixtures of the Python tests. They run as N ranks under holmes-run (see
CMakeLists.txt): every rank runs every test in the same (pytest's collection) order, so that the
collectives of one test meet the other ranks' same collectives. A test must call the same
collectives on every rank whatever its assertions find: assert after the calls."""

import numpy as np
import pytest

import holmes


@pytest.fixture(scope="session")
def world():
    """The world communicator, created once per process and shared by every test."""
    comm = holmes.init()
    yield comm
    comm.barrier()  # no rank tears its connections down while another still uses them
    comm.destroy()


def gather_ints(world, values):
    """Every rank's list of ints (the same length on every rank), one row per rank."""
    mine = np.asarray(values, dtype=np.int64)
    return world.allgather(mine)

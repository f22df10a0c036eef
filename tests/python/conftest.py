"""Shared fixtures of the Python tests. They run as N ranks under holmes-run (see
CMakeLists.txt): every rank runs every test in the same (pytest's collection) order, so that the
collectives of one test meet the other ranks' same collectives. A test must call the same
collectives on every rank whatever its assertions find: assert after the calls."""

import pytest

import holmes


@pytest.fixture(scope="session")
def world():
    """The world communicator, created once per process and shared by every test."""
    comm = holmes.init()
    yield comm
    comm.barrier()  # no rank tears its connections down while another still uses them
    comm.destroy()


@pytest.fixture
def release(world):
    """release(*comms): destroys communicators once every rank is done with them.

    The world barrier first makes sure that no rank tears a communicator down while another
    still wires it up (a split returns on some ranks before the others have finished connecting)
    or still waits for its last message: a destroy then fails those peers."""

    def release_all(*comms):
        world.barrier()
        for comm in comms:
            if comm is not None:
                comm.destroy()

    return release_all

"""Holmes collectives on CPU torch tensors, without copies.

A CPU tensor and ``tensor.numpy()`` share memory, so each function here hands the tensors'
numpy views to the Comm method of the same name and returns torch tensors over the results.
Tensors must be on the CPU and contiguous; bfloat16 tensors travel as their 16-bit patterns.

    import holmes, holmes.torch as ht
    world = holmes.init()
    grad = torch.ones(1024)
    ht.allreduce(world, grad, "avg", out=grad)   # in place, no copy
"""

import numpy as np
import torch

from .types import Op

__all__ = ["allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "alltoall", "send",
           "recv", "as_numpy"]


def as_numpy(name, tensor):
    """(numpy view sharing tensor's memory, the Holmes dtype keyword to pass)."""
    if tensor is None:
        raise TypeError(f"{name} is None: expected a torch.Tensor")
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"{name} is on {tensor.device}: holmes.torch takes CPU tensors")
    if not tensor.is_contiguous():
        raise ValueError(f"{name} is not contiguous: pass {name}.contiguous()")
    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16), "bfloat16"
    return tensor.numpy(), None


def _out(name, out, like):
    if out is None:
        return None, None
    view, _ = as_numpy(name, out)
    if out.dtype != like.dtype:
        raise TypeError(f"{name} has dtype {out.dtype} but the input has {like.dtype}")
    return view, out


def _tensor(array, like_dtype):
    """A tensor over `array`'s memory (no copy)."""
    if like_dtype == torch.bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def _collective(method, x, out, *args, **kwargs):
    view, dtype = as_numpy("x", x)
    out_view, out_tensor = _out("out", out, x)
    if out_view is not None and out_view.ctypes.data == view.ctypes.data and \
            out_view.nbytes == view.nbytes:
        out_view = view  # in place: the same array object, as Comm expects
    result = method(view, *args, out=out_view, dtype=dtype, **kwargs)
    if result is None:
        return None
    if out_tensor is not None and result is out_view:
        return out_tensor
    return _tensor(result, x.dtype)


def allreduce(comm, x, op=Op.SUM, *, out=None):
    return _collective(comm.allreduce, x, out, op)


def reduce_scatter(comm, x, op=Op.SUM, *, out=None):
    return _collective(comm.reduce_scatter, x, out, op)


def allgather(comm, x, *, out=None):
    return _collective(comm.allgather, x, out)


def broadcast(comm, x, root=0, *, out=None):
    return _collective(comm.broadcast, x, out, root)


def reduce(comm, x, op=Op.SUM, root=0, *, out=None):
    return _collective(comm.reduce, x, out, op, root)


def alltoall(comm, x, *, out=None):
    return _collective(comm.alltoall, x, out)


def send(comm, x, peer):
    view, dtype = as_numpy("x", x)
    comm.send(view, peer, dtype=dtype)


def recv(comm, out, peer):
    view, dtype = as_numpy("out", out)
    comm.recv(view, peer, dtype=dtype)
    return out

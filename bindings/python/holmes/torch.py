"""holmes.torch: Holmes as a torch.distributed backend, and Holmes collectives on CPU tensors.

The backend. ``import holmes.torch`` registers backend "holmes" with torch.distributed; a script
written for gloo or NCCL switches with one line, and every dist.* call, DDP, new_group and
send/recv then run on Holmes (its transports per peer, island-aware algorithms, planner):

    import torch.distributed as dist
    import holmes.torch
    dist.init_process_group("holmes")          # env://, tcp://, file:// or store=: as for gloo
    groups = holmes.torch.plan_groups(preset="gpt-7.5b")  # this rank's TP, PP and DP groups

Ranks meet through the store torch hands the backend; no HOLMES_* variable is needed. The
compiled part is holmes/_holmes_torch (built with the project when torch is found).

The numpy-level functions. A CPU tensor and ``tensor.numpy()`` share memory, so allreduce() and
the others here hand the tensors' numpy views to the Comm method of the same name and return
torch tensors over the results (contiguous CPU tensors; bfloat16 travels as its 16-bit patterns):

    import holmes, holmes.torch as ht
    world = holmes.init()
    grad = torch.ones(1024)
    ht.allreduce(world, grad, "avg", out=grad)   # in place, no copy
"""

import dataclasses
import glob
import importlib.machinery
import importlib.util
import inspect
import json
import os
import pathlib

import numpy as np
import torch

from .types import Op

__all__ = ["allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "alltoall", "send",
           "recv", "as_numpy", "register_backend", "extension_path", "plan_groups", "PlanGroups",
           "peer_transports", "BACKEND"]

BACKEND = "holmes"


class BackendNotBuiltError(ImportError):
    """The compiled backend (holmes/_holmes_torch) was not found; the message says where."""


_extension = None


def _extension_candidates():
    """Where the compiled backend may be, first match wins: HOLMES_TORCH_EXTENSION, this package's
    own directory (an installed package), then build trees of this checkout (the newest)."""
    named = os.environ.get("HOLMES_TORCH_EXTENSION")
    if named:
        return [named]
    package_dir = pathlib.Path(__file__).resolve().parent
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    found = [str(p) for s in suffixes for p in package_dir.glob("_holmes_torch" + s)]
    repo = package_dir.parents[2]
    builds = [pathlib.Path(p) for s in suffixes
              for p in glob.glob(str(repo / "build*" / "lib" / "python" / ("_holmes_torch" + s)))]
    found += [str(p) for p in sorted(builds, key=lambda p: p.stat().st_mtime, reverse=True)]
    return found


def _load_extension():
    global _extension
    if _extension is not None:
        return _extension
    import torch.distributed  # noqa: F401 (its types must exist before the extension uses them)
    tried = _extension_candidates()
    for path in tried:
        if not os.path.exists(path):
            continue
        spec = importlib.util.spec_from_file_location("holmes._holmes_torch", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _extension = module
        return module
    raise BackendNotBuiltError(
        "the holmes torch backend (_holmes_torch) was not found; looked in: " +
        (", ".join(tried) or "(nowhere)") + ". Build Holmes with torch installed "
        "(HOLMES_WITH_TORCH=AUTO) or set HOLMES_TORCH_EXTENSION")


def extension_path():
    """The file of the compiled backend in use."""
    return _load_extension().__file__


def register_backend():
    """Registers backend "holmes" with torch.distributed (done by importing this module; harmless
    twice). Raises BackendNotBuiltError when the compiled backend is missing."""
    import torch.distributed as dist
    ext = _load_extension()
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    kwargs = {}
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        kwargs["devices"] = ["cpu", "cuda"]  # torch >= 2.1: the devices the backend serves
    dist.Backend.register_backend(BACKEND, ext.create_backend, **kwargs)


def _holmes_group(group):
    import torch.distributed as dist
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    return group


def revoke(group=None):
    """hm_comm_revoke on a holmes group (default: the world): never blocks; its calls here and
    at every other rank raise RuntimeError ("revoked") at once instead of at the timeout."""
    _load_extension().revoke(_holmes_group(group))


def shrink_group(group=None, exclude=(), *, failed=True):
    """Collective over the survivors of a holmes group (default: the world): a process group of
    the ranks that remain, in the group's order (hm_comm_shrink; failed=True: the survivors
    agree on which ranks failed and leave them out, besides `exclude`). A rank left out raises
    RuntimeError. torch 1.x: a ProcessGroup, to pass as group= to dist.* collectives (it is not
    registered with torch, so use its rank() and size(), and its own send and recv); torch 2.x: a
    holmes Backend whose rank(), size(), allreduce, broadcast, allgather, send, recv and barrier
    take ranks of the group."""
    ranks = [int(r) for r in exclude]
    return _load_extension().shrink(_holmes_group(group), ranks, bool(failed))


def peer_transports(group=None):
    """(transport, reason, link) of every rank of a holmes group (default: the world), as Holmes
    chose them: shm inside a host, ucx/verbs inside an RDMA island, tcp across islands."""
    return _load_extension().peer_transports(_holmes_group(group))


@dataclasses.dataclass
class PlanGroups:
    """This rank's place in a plan, in torch terms. tensor, pipeline and data are torch process
    groups (backend holmes) for this rank's TP, PP and DP groups; *_ranks are their members as
    ranks of `world` (the group the plan was made on; global ranks for plan_groups),
    pipeline_ranks in stage order (send to pipeline_ranks[stage + 1]), data_ranks in dp order.
    After replan() a spare (a survivor the new plan leaves out) has stage -1, no groups and no
    layers."""

    tensor: object
    pipeline: object
    data: object
    tensor_ranks: list
    pipeline_ranks: list
    data_ranks: list
    stage: int
    num_stages: int
    layers: range
    micro_batches: int
    predicted_step_seconds: float
    naive_step_seconds: float
    plan: dict
    world: object = None
    rank: int = 0  # this rank in `world`
    handle: object = dataclasses.field(default=None, repr=False)

    @property
    def spare(self):
        return self.stage < 0

    def replan(self, survivors):
        """Collective over `survivors`, the group shrink_group made of this plan's world: the same
        model placed on them (hm_plan_replan: a replica that lost a rank is taken out, or the
        stages re-cut; the global batch is kept, its micro-batches divided over the replicas
        left, the first ones taking one more). The groups returned are Holmes's, not registered
        with torch: call their methods (send, recv, allreduce, broadcast) with ranks of the
        group; their *_ranks are ranks of `survivors`. layer_sources() then says where the
        layers this rank now holds are."""
        handle = self.handle.replan(survivors)
        info = handle.info()
        groups = {kind: handle.group(kind) for kind in ("tensor", "pipeline", "data")}
        return _plan_groups_of(handle, info, survivors, groups)

    def layer_sources(self, rank=None):
        """After replan(): [(first_layer, num_layers, source)] for `rank` of this plan's world
        (default: this rank): layers it holds now and did not before, and the rank that holds
        their current weights (-1: nobody; load them from a checkpoint)."""
        if rank is None:
            rank = self.rank
        return [tuple(s) for s in self.handle.layer_sources(int(rank))]


# The keys of hm_plan_comm_create: TP (stage, dp) by tp, PP (dp, tp) by stage, DP (stage, tp)
# by dp; a role is (stage, tp, dp).
_GROUP_KEYS = {
    "tensor": (lambda s, t, d: (s, d), lambda s, t, d: t),
    "pipeline": (lambda s, t, d: (d, t), lambda s, t, d: s),
    "data": (lambda s, t, d: (s, t), lambda s, t, d: d),
}


def _members(roles, kind):
    """{key: ranks in group order} of every group of a kind; spares (stage -1) are in none."""
    key_of, order_of = _GROUP_KEYS[kind]
    by_key = {}
    for rank, r in enumerate(roles):
        if r[0] >= 0:
            by_key.setdefault(key_of(*r), []).append(rank)
    return {key: sorted(ranks, key=lambda rank: order_of(*roles[rank]))
            for key, ranks in sorted(by_key.items())}


def _plan_groups_of(handle, info, world, groups):
    me = world.rank()
    roles = [tuple(r) for r in info["roles"]]
    members = {kind: [] for kind in _GROUP_KEYS}
    for kind in _GROUP_KEYS:
        for ranks in _members(roles, kind).values():
            if me in ranks:
                members[kind] = ranks
    first = info["first_layer"]
    return PlanGroups(
        tensor=groups["tensor"], pipeline=groups["pipeline"], data=groups["data"],
        tensor_ranks=members["tensor"], pipeline_ranks=members["pipeline"],
        data_ranks=members["data"], stage=info["stage"], num_stages=info["num_stages"],
        layers=range(first, first + info["num_layers"]), micro_batches=info["micro_batches"],
        predicted_step_seconds=info["predicted_step_seconds"],
        naive_step_seconds=info["naive_step_seconds"], plan=json.loads(info["json"]),
        world=world, rank=me, handle=handle)


def plan_groups(preset=None, file=None, *, naive=False, world=None, backend=BACKEND, **model):
    """Collective over the world (every rank, same arguments): plans the model on the world's
    topology with Holmes's planner (hm_plan_create) and returns this rank's TP, PP and DP groups
    as torch process groups, its stage and layer range (PlanGroups). naive=True: the naive
    placement (Megatron's rank order, even layer split) the plan compares against. Model fields
    as in holmes.Plan: layers, hidden, heads, seq_len, vocab, micro_batch, global_batch,
    dtype_bytes, recompute, tp, pp, gpu_memory_gb, architecture ("gpt"/"mlp"), device_tflops.
    world: the holmes group of every rank that plans (default: the default group, which must
    then be holmes); backend: of the groups made (another backend, e.g. "gloo", runs a plan on
    it for comparison). PlanGroups.replan() places the model again on a shrunk world."""
    import torch.distributed as dist
    world = _holmes_group(world)
    fields = dict(model)
    if preset is not None:
        fields["preset"] = preset
    if file is not None:
        fields["file"] = str(file)
    handle = _load_extension().plan(world, fields, naive)
    info = handle.info()
    n, me = dist.get_world_size(), dist.get_rank()
    if dist.get_world_size(world) != n:
        raise ValueError(f"plan_groups: world has {dist.get_world_size(world)} ranks, the job {n}:"
                         " plan with a group of every rank")
    roles = [tuple(r) for r in info["roles"]]
    mine = {}
    for kind in _GROUP_KEYS:
        # Every rank creates every group, in the same order, as torch requires.
        for ranks in _members(roles, kind).values():
            group = dist.new_group(ranks, backend=backend)
            if me in ranks:
                mine[kind] = group
    return _plan_groups_of(handle, info, world, mine)


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


def _register_missing(error):
    """Without the compiled backend, init_process_group("holmes") raises the reason (instead of
    torch's "invalid backend"); the numpy-level functions above work all the same."""
    import torch.distributed as dist
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return

    def missing(*_args, **_kwargs):
        raise error

    dist.Backend.register_backend(BACKEND, missing)


try:
    register_backend()
except BackendNotBuiltError as _error:
    _register_missing(_error)

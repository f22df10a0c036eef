"""The planner: TP/PP/DP groups, the stage split and their communicators (hm_plan_*)."""

import ctypes
import dataclasses
import json

from . import _lib
from .comm import Comm, _int_arg
from .errors import Status, UnsupportedError, check

__all__ = ["Plan", "RankInfo", "LayerSource", "GROUPS"]

# hm_group_t by the names Plan.comm takes.
GROUPS = {"tensor": 0, "pipeline": 1, "data": 2}
_GROUP_ALIASES = {"tp": "tensor", "pp": "pipeline", "dp": "data"}

# The hm_model_t fields that may override a preset or a file, and their Python types.
_INT_FIELDS = ("layers", "hidden", "heads", "seq_len", "vocab", "micro_batch", "global_batch",
               "dtype_bytes")


@dataclasses.dataclass(frozen=True)
class RankInfo:
    """Where the calling rank sits in a plan (hm_plan_rank_t)."""

    stage: int  # pipeline stage, 0 .. num_stages - 1
    num_stages: int
    first_layer: int  # the stage's layers: range(first_layer, first_layer + num_layers)
    num_layers: int
    tp_rank: int
    tp_size: int
    dp_rank: int
    dp_size: int
    micro_batches: int  # per step, for this rank's data-parallel replica

    @property
    def layers(self):
        return range(self.first_layer, self.first_layer + self.num_layers)

    @property
    def spare(self):
        """True for a survivor a re-plan left out (stage -1, no layers)."""
        return self.stage < 0


@dataclasses.dataclass(frozen=True)
class LayerSource:
    """Layers a rank holds after a re-plan and did not hold before (hm_layer_source_t): their
    current weights and optimizer state are on `rank` of the new world, or nowhere (rank -1:
    load them from a checkpoint)."""

    first_layer: int
    num_layers: int
    rank: int

    @property
    def layers(self):
        return range(self.first_layer, self.first_layer + self.num_layers)

    @property
    def lost(self):
        return self.rank < 0


class Plan:
    """Collective over `world`: the planner's answer for a model, from a preset ("gpt-3.6b",
    "gpt-7.5b", "gpt-39.1b", "tiny") or a model file (YAML), with any field overridden
    (layers, hidden, heads, seq_len, vocab, micro_batch, global_batch, dtype_bytes,
    recompute=True/False, gpu_memory_gb, architecture="gpt"/"mlp"). tp and pp at 0 let the planner
    choose.
    Every rank must pass the same arguments (MismatchError otherwise)."""

    def __init__(self, world, preset=None, file=None, tp=0, pp=0, **overrides):
        if (preset is None) == (file is None):
            raise ValueError("give exactly one of preset= (e.g. 'gpt-7.5b', 'tiny') and file=")
        model = _lib.Model.initializer()
        # The struct keeps the bytes assigned to its char* fields alive (ctypes' _objects).
        model.preset = _encode("preset", preset)
        model.file = _encode("file", None if file is None else str(file))
        model.tp, model.pp = _non_negative("tp", tp), _non_negative("pp", pp)
        for name, value in overrides.items():
            if name in _INT_FIELDS:
                setattr(model, name, _non_negative(name, value))
            elif name == "recompute":
                model.recompute = -1 if value is None else (1 if value else 0)
            elif name == "architecture":
                model.architecture = _encode("architecture", value)
            elif name == "gpu_memory_gb":
                if not isinstance(value, (int, float)) or value < 0:
                    raise ValueError(f"gpu_memory_gb is {value!r}: expected a number >= 0")
                model.gpu_memory_gb = float(value)
            else:
                known = ", ".join(_INT_FIELDS + ("recompute", "gpu_memory_gb", "architecture"))
                raise TypeError(f"unknown model field {name!r}; known: {known}")
        self._world = world  # the plan's communicators are split from it: keep it alive
        self._ptr = None
        handle = ctypes.c_void_p()
        check(_lib.lib().hm_plan_create(world._handle, ctypes.byref(model), ctypes.byref(handle)))
        self._ptr = handle

    @property
    def _handle(self):
        if self._ptr is None:
            raise ValueError("the plan has been destroyed")
        return self._ptr

    @property
    def rank_info(self):
        """This rank's RankInfo: stage, layers, tp/dp rank and size, micro-batches."""
        info = _lib.PlanRank()
        check(_lib.lib().hm_plan_get_rank(self._handle, ctypes.byref(info)))
        return RankInfo(**{name: getattr(info, name) for name, _ in _lib.PlanRank._fields_})

    def json(self):
        """The whole plan (Holmes's placement and the naive one, predictions, notes) as JSON."""
        lib = _lib.lib()
        length = ctypes.c_size_t(0)
        check(lib.hm_plan_get_json(self._handle, None, 0, ctypes.byref(length)))
        buffer = ctypes.create_string_buffer(length.value)
        check(lib.hm_plan_get_json(self._handle, buffer, length.value, None))
        return buffer.value.decode()

    def as_dict(self):
        """json() parsed: {"holmes": {...}, "naive": {...}, ...}."""
        return json.loads(self.json())

    def _prediction(self):
        step, naive = ctypes.c_double(), ctypes.c_double()
        check(_lib.lib().hm_plan_get_prediction(self._handle, ctypes.byref(step),
                                                ctypes.byref(naive)))
        return step.value, naive.value

    @property
    def predicted_step_seconds(self):
        """The step time the planner predicts for its placement."""
        return self._prediction()[0]

    @property
    def naive_step_seconds(self):
        """The predicted step time of the naive (Megatron rank order) placement."""
        return self._prediction()[1]

    def select_placement(self, placement):
        """Makes rank_info and comm() describe "holmes" (the default) or "naive" (Megatron-LM's
        rank order and even split, which the plan compares against). Every rank must select the
        same one. Needs a library with hm_plan_select_placement."""
        placements = {"holmes": 0, "naive": 1}
        if placement not in placements:
            raise ValueError(f"placement {placement!r}: expected 'holmes' or 'naive'")
        check(self._optional("hm_plan_select_placement")(self._handle, placements[placement]))

    def _optional(self, name):
        if not _lib.has(name):
            raise UnsupportedError(int(Status.ERR_UNSUPPORTED), f"this libholmes has no {name}")
        return getattr(_lib.lib(), name)

    def replan(self, newworld):
        """Collective over `newworld`, the survivors of this plan's world in its rank order (a
        shrink, or a split by survival with key 0): the same model placed on them, keeping the
        global batch (hm_plan_replan). This plan stays valid."""
        handle = ctypes.c_void_p()
        check(self._optional("hm_plan_replan")(self._handle, newworld._handle,
                                               ctypes.byref(handle)))
        plan = Plan.__new__(Plan)
        plan._world = newworld
        plan._ptr = handle
        return plan

    def layer_sources(self, rank=None):
        """For `rank` of the plan's world (default: this rank's): the LayerSource ranges it must
        fetch after a re-plan; [] for a plan that is not one."""
        function = self._optional("hm_plan_get_layer_sources")
        if rank is None:
            rank = self._world.rank
        rank = _int_arg("rank", rank)
        count = ctypes.c_size_t(0)
        check(function(self._handle, rank, None, 0, ctypes.byref(count)))
        array = (_lib.LayerSource * max(count.value, 1))()
        check(function(self._handle, rank, array, count.value, ctypes.byref(count)))
        return [LayerSource(s.first_layer, s.num_layers, s.rank) for s in array[:count.value]]

    def comm(self, kind):
        """Collective over the world: this rank's communicator of kind "tensor", "pipeline" or
        "data" ("tp", "pp", "dp" also work), ranked by tp index, stage or dp index. Every rank
        must ask for the same kinds in the same order. A re-plan's spare gets None."""
        name = _GROUP_ALIASES.get(kind, kind)
        if name not in GROUPS:
            raise ValueError(f"kind {kind!r} is not a group; expected 'tensor', 'pipeline' or "
                             "'data'")
        handle = ctypes.c_void_p()
        check(_lib.lib().hm_plan_comm_create(self._handle, GROUPS[name], ctypes.byref(handle)))
        return Comm(handle) if handle.value else None

    def destroy(self):
        """Releases the plan (communicators made from it stay valid). Harmless twice."""
        if getattr(self, "_ptr", None) is not None:
            handle, self._ptr = self._ptr, None
            check(_lib.lib().hm_plan_destroy(handle))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # pylint: disable=broad-except
            pass  # at interpreter exit the library may be gone

    def __repr__(self):
        if self._ptr is None:
            return "<holmes.Plan destroyed>"
        info = self.rank_info
        return (f"<holmes.Plan stage {info.stage}/{info.num_stages} layers "
                f"{info.first_layer}..{info.first_layer + info.num_layers - 1} tp {info.tp_size} "
                f"dp {info.dp_size}>")


def _encode(name, value):
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value.encode()


def _non_negative(name, value):
    number = _int_arg(name, value)
    if number < 0:
        raise ValueError(f"{name} is {number}: expected an int >= 0")
    return number

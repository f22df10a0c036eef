"""The planner from Python: the 'tiny' preset on this job's ranks (one host, so one island)."""

import numpy as np
import pytest

import holmes


def test_tiny_plan_is_consistent(world, release):
    with world.plan(preset="tiny") as plan:
        info = plan.rank_info
        whole = plan.as_dict()
        step, naive = plan.predicted_step_seconds, plan.naive_step_seconds
        data = plan.comm("data")
        total = data.allreduce(np.ones(3, dtype=np.int32))
        mine = np.array([info.stage, info.first_layer, info.num_layers, info.dp_rank,
                         info.tp_rank], dtype=np.int64)
        everyone = world.allgather(mine)
    assert isinstance(info, holmes.RankInfo)
    assert {"holmes", "naive", "model"} <= whole.keys()
    holmes_placement = whole["holmes"]
    assert whole["model"]["name"] == "tiny"
    assert info.num_stages * info.tp_size * info.dp_size == world.size
    assert (holmes_placement["pp"], holmes_placement["tp"], holmes_placement["dp"]) == (
        info.num_stages, info.tp_size, info.dp_size)
    # This rank's entry in the JSON is the one hm_plan_get_rank returns.
    entry = holmes_placement["ranks"][world.rank]
    assert (entry["stage"], entry["tp"], entry["dp"]) == (info.stage, info.tp_rank, info.dp_rank)
    stage = holmes_placement["stages"][info.stage]
    assert (stage["first_layer"], stage["layers"]) == (info.first_layer, info.num_layers)
    assert list(info.layers) == list(range(info.first_layer, info.first_layer + info.num_layers))
    # The stages tile the model's layers.
    layers = whole["model"]["layers"]
    covered = sorted({(int(s), int(f), int(k)) for s, f, k, _, _ in everyone})
    assert [c[0] for c in covered] == list(range(info.num_stages))
    assert covered[0][1] == 0 and covered[-1][1] + covered[-1][2] == layers
    assert info.micro_batches >= 1
    # Predictions, and the JSON's own figure for them.
    assert step > 0 and naive > 0
    assert step == pytest.approx(holmes_placement["prediction"]["step_s"])
    assert naive == pytest.approx(whole["naive"]["prediction"]["step_s"])
    # The data-parallel communicator outlives the plan and holds dp_size ranks.
    assert (data.size, data.rank) == (info.dp_size, info.dp_rank)
    assert total.tolist() == [info.dp_size] * 3
    release(data)


def test_overrides_and_every_group(world, release):
    tp = 2 if world.size % 2 == 0 else 1
    with world.plan(preset="tiny", tp=tp, layers=12, recompute=True) as plan:
        info = plan.rank_info
        model = plan.as_dict()["model"]
        groups = {kind: plan.comm(kind) for kind in ("tensor", "pipeline", "data")}
        sums = {kind: comm.allreduce(np.array([world.rank], dtype=np.int64))[0]
                for kind, comm in groups.items()}
        members = {kind: comm.allgather(np.array([world.rank], dtype=np.int64)).reshape(-1)
                   for kind, comm in groups.items()}
        sizes = {kind: (comm.size, comm.rank) for kind, comm in groups.items()}
        release(*groups.values())
    assert model["layers"] == 12 and model["recompute"] is True
    assert info.tp_size == tp
    assert sizes["tensor"] == (info.tp_size, info.tp_rank)
    assert sizes["pipeline"] == (info.num_stages, info.stage)
    assert sizes["data"] == (info.dp_size, info.dp_rank)
    for kind in groups:
        assert world.rank in members[kind].tolist()
        assert sums[kind] == members[kind].sum()


def test_plan_arguments_are_checked(world):
    with pytest.raises(ValueError, match="exactly one of preset= .* and file="):
        world.plan()
    with pytest.raises(ValueError, match="exactly one"):
        world.plan(preset="tiny", file="model.yaml")
    with pytest.raises(TypeError, match="unknown model field 'layer'"):
        world.plan(preset="tiny", layer=3)
    with pytest.raises(ValueError, match="tp is -1"):
        world.plan(preset="tiny", tp=-1)
    with world.plan(preset="tiny") as plan:
        with pytest.raises(ValueError, match="kind 'model' is not a group"):
            plan.comm("model")
    with pytest.raises(ValueError, match="destroyed"):
        plan.rank_info


def test_naive_placement_can_be_selected(world, release):
    if not holmes._lib.has("hm_plan_select_placement"):  # the same answer on every rank
        pytest.skip("this libholmes has no hm_plan_select_placement")
    with world.plan(preset="tiny") as plan:
        plan.select_placement("naive")
        info = plan.rank_info
        naive = plan.as_dict()["naive"]
        data = plan.comm("data")
        size = data.size
        with pytest.raises(ValueError, match="placement 'best'"):
            plan.select_placement("best")
        release(data)
    entry = naive["ranks"][world.rank]
    assert (entry["stage"], entry["tp"], entry["dp"]) == (info.stage, info.tp_rank, info.dp_rank)
    assert (naive["pp"], naive["tp"], naive["dp"]) == (info.num_stages, info.tp_size, info.dp_size)
    assert size == info.dp_size

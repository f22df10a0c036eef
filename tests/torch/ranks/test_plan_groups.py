"""holmes.torch.plan_groups: the planner's groups as torch process groups, consistent with the
stages and layers it gives every rank."""

import torch
import torch.distributed as dist

import holmes.torch


def test_plan_groups_cover_the_model_once_per_replica(rank, size):
    layers = 8
    g = holmes.torch.plan_groups(preset="mlp", architecture="mlp", layers=layers, hidden=64,
                                 micro_batch=2, global_batch=2 * size * 2, tp=1, pp=2)
    # Every rank's (stage, first layer, layer count, dp index) to everyone.
    mine = torch.tensor([g.stage, g.layers.start, len(g.layers), g.data_ranks.index(rank)])
    everyone = [torch.zeros_like(mine) for _ in range(size)]
    dist.all_gather(everyone, mine)
    # Collectives on each of this rank's groups reach exactly its members.
    sums = {}
    for kind in ("tensor", "pipeline", "data"):
        x = torch.tensor([float(rank)])
        dist.all_reduce(x, group=getattr(g, kind))
        sums[kind] = x.item()
    assert g.num_stages == 2 and g.stage in (0, 1)
    assert sums["pipeline"] == sum(g.pipeline_ranks)
    assert sums["data"] == sum(g.data_ranks)
    assert sums["tensor"] == sum(g.tensor_ranks) and g.tensor_ranks == [rank]  # tp=1
    # The pipeline holds the stages in order, and its layers tile the model.
    stages = [int(everyone[r][0]) for r in g.pipeline_ranks]
    assert stages == list(range(g.num_stages))
    covered = []
    for r in g.pipeline_ranks:
        first, count = int(everyone[r][1]), int(everyone[r][2])
        covered += list(range(first, first + count))
    assert covered == list(range(layers))
    # A data group is one stage's replicas, numbered 0 .. dp-1.
    assert {int(everyone[r][0]) for r in g.data_ranks} == {g.stage}
    assert sorted(int(everyone[r][3]) for r in g.data_ranks) == list(range(len(g.data_ranks)))
    assert len(g.plan["holmes"]["stages"]) == 2  # the whole plan, as hm_plan_get_json
    assert g.predicted_step_seconds > 0 and g.naive_step_seconds > 0

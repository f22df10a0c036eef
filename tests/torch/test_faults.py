"""Whole jobs started by one pytest process (torchrun's variables, a free port), for what the
ranks-under-holmes-run tests cannot show: a killed rank (every survivor's wait raises within the
group's timeout, naming the peer; holmes-run would stop the survivors), and processes that end
with work still in flight (they must exit, not hang), and survivors that shrink the group (revoke,
shrink_group) and go on."""

import os
import pathlib
import socket
import subprocess
import sys
import time

WORKER = r'''
import datetime, os, signal, sys, time
import torch, torch.distributed as dist
import holmes.torch
dist.init_process_group("holmes", timeout=datetime.timedelta(seconds=5))
rank = dist.get_rank()
x = torch.ones(1 << 12)
dist.all_reduce(x)                                  # everyone is connected
if rank == int(os.environ["VICTIM"]):
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(0.5)
start = time.monotonic()
try:
    for _ in range(50):
        dist.all_reduce(torch.ones(1 << 16))
    print("NO ERROR", flush=True)
except RuntimeError as e:
    print(f"RAISED after {time.monotonic() - start:.2f} s: {e}", flush=True)
os._exit(0)
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DROPPED = r'''
import torch, torch.distributed as dist
import holmes.torch
dist.init_process_group("holmes")
group = dist.new_group(list(range(dist.get_world_size())), backend="holmes")
for i in range(40):
    t = torch.ones(1 << 18)
    dist.all_reduce(t, group=group, async_op=True)  # never waited for; the tensor let go at once
    del t
dist.destroy_process_group(group)
dist.destroy_process_group()
print("EXITED", flush=True)
'''


def run_job(ranks, victim, worker=WORKER):
    port = free_port()
    package = pathlib.Path(__file__).resolve().parents[2] / "bindings" / "python"
    procs = []
    for r in range(ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(ranks), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), VICTIM=str(victim))
        env["PYTHONPATH"] = os.pathsep.join([str(package), env.get("PYTHONPATH", "")])
        procs.append(subprocess.Popen([sys.executable, "-c", worker], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outputs = []
    deadline = time.monotonic() + 60
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            out += "\n(HUNG: killed by the test)"
        outputs.append((p.returncode, out))
    return outputs


def test_survivors_of_a_killed_rank_raise_naming_it():
    ranks, victim = 3, 2
    outputs = run_job(ranks, victim)
    for r, (code, out) in enumerate(outputs):
        if r == victim:
            assert code == -9, out
            continue
        assert code == 0, out
        assert "RAISED" in out, out
        seconds = float(out.split("RAISED after ")[1].split(" s")[0])
        assert seconds < 5 + 5, out  # the group's timeout, plus the slack of one wait
        assert "rank 2" in out or "peer 2" in out, out


def test_groups_destroyed_with_work_in_flight_let_the_process_exit():
    # The completer thread drops the last reference to such tensors, which takes the GIL that
    # the thread destroying the group holds: the destructor must let go of it (it once hung).
    for code, out in run_job(4, victim=-1, worker=DROPPED):
        assert code == 0 and "EXITED" in out, out


SHRINK = r'''
import datetime, os, signal, time
import torch, torch.distributed as dist
import holmes.torch as ht
dist.init_process_group("holmes", timeout=datetime.timedelta(seconds=5))
rank, size = dist.get_rank(), dist.get_world_size()
dist.all_reduce(torch.ones(8))                      # everyone is connected
if rank == int(os.environ["VICTIM"]):
    os.kill(os.getpid(), signal.SIGKILL)
start = time.monotonic()
try:
    for _ in range(50):
        dist.all_reduce(torch.ones(1 << 12))
    print("NO ERROR", flush=True)
except RuntimeError:
    ht.revoke()
    survivors = ht.shrink_group(failed=True)
    x = torch.full((4,), float(rank + 1))
    dist.all_reduce(x, group=survivors)
    print(f"SHRUNK rank {survivors.rank()} of {survivors.size()} sum {x[0].item():.0f} "
          f"after {time.monotonic() - start:.2f} s", flush=True)
os._exit(0)
'''


def test_survivors_shrink_the_group_and_go_on():
    ranks, victim = 4, 2
    outputs = run_job(ranks, victim, worker=SHRINK)
    survivors = [r for r in range(ranks) if r != victim]
    expected_sum = sum(r + 1 for r in survivors)
    for r, (code, out) in enumerate(outputs):
        if r == victim:
            assert code == -9, out
            continue
        assert code == 0, out
        new_rank = survivors.index(r)
        assert f"SHRUNK rank {new_rank} of {len(survivors)} sum {expected_sum} " in out, out

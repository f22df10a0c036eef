#!/usr/bin/env bash
# Ranks started without holmes-run: by hand with torchrun's or Slurm's variables, and by Open
# MPI's mpirun; rank 0 serves the store itself. Then a stranger with the wrong token is refused
# with HM_ERR_AUTH while a running job, unaware of it, finishes correctly.
# usage: launchers_test.sh BIN_DIR
source "$(dirname "$0")/lib.sh"
BIN=$1
BENCH=("$BIN/holmes-bench" allreduce,allgather -b 1K -e 256K -f 16 --check --iters 2 --warmup 1)
export HOLMES_TIMEOUT_MS=60000
# Nothing of an outer launcher may leak in.
CLEAN=(env -u HOLMES_RANK -u HOLMES_WORLD_SIZE -u HOLMES_STORE -u HOLMES_TOKEN
       -u HOLMES_STORE_SERVE -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT
       -u SLURM_PROCID -u SLURM_NTASKS -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE)

# wait_all NAME: waits for the background ranks, checks rank 0's table.
wait_all() {
  local name=$1 failed=0
  for pid in $(jobs -p); do wait "$pid" || failed=1; done
  [ "$failed" = 0 ] || { cat "$WORK/$name".* >&2; fail "$name: a rank failed"; }
  expect_contains "$WORK/$name.0" "Out of bounds values : 0 OK"
  echo "$name: OK"
}

echo "== torchrun's variables"
port=$(free_port)
for r in 0 1 2; do
  "${CLEAN[@]}" RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port HOLMES_TOKEN=t1 \
    "${BENCH[@]}" >"$WORK/torchrun.$r" 2>&1 &
done
wait_all torchrun

echo "== Slurm's variables"
port=$(free_port)
for r in 0 1 2 3; do
  "${CLEAN[@]}" SLURM_PROCID=$r SLURM_NTASKS=4 HOLMES_STORE=127.0.0.1:$port \
    "${BENCH[@]}" >"$WORK/slurm.$r" 2>&1 &
done
wait_all slurm

echo "== Open MPI's mpirun"
command -v mpirun >/dev/null || fail "mpirun not found (scripts/setup-debian.sh installs openmpi-bin)"
port=$(free_port)
"${CLEAN[@]}" mpirun --allow-run-as-root --oversubscribe -np 3 --mca btl self,tcp \
  -x HOLMES_STORE=127.0.0.1:$port -x HOLMES_TIMEOUT_MS "${BENCH[@]}" >"$WORK/mpi.0" 2>&1 \
  || { cat "$WORK/mpi.0" >&2; fail "mpirun job failed"; }
expect_contains "$WORK/mpi.0" "Out of bounds values : 0 OK"
echo "mpirun: OK"

echo "== a stranger with the wrong token is refused; the job is not disturbed"
port=$(free_port)
"$BIN/holmes-store" --host 127.0.0.1 --port "$port" --token right >"$WORK/store.log" 2>&1 &
store=$!
long=("$BIN/holmes-bench" allreduce -b 4M -e 4M --check --iters 60 --warmup 1)
job_pids=()
for r in 0 1; do
  "${CLEAN[@]}" HOLMES_RANK=$r HOLMES_WORLD_SIZE=2 HOLMES_STORE=127.0.0.1:$port \
    HOLMES_STORE_SERVE=0 HOLMES_TOKEN=right "${long[@]}" >"$WORK/job.$r" 2>&1 &
  job_pids+=($!)
done
sleep 1
set +e
"${CLEAN[@]}" HOLMES_RANK=1 HOLMES_WORLD_SIZE=2 HOLMES_STORE=127.0.0.1:$port HOLMES_STORE_SERVE=0 \
  HOLMES_TOKEN=wrong "${long[@]}" >"$WORK/stranger" 2>&1
code=$?
set -e
[ "$code" != 0 ] || fail "the stranger was let in"
expect_contains "$WORK/stranger" "HM_ERR_AUTH"
expect_contains "$WORK/stranger" "refused this job token"
for pid in "${job_pids[@]}"; do
  wait "$pid" || { cat "$WORK"/job.* >&2; fail "the job was disturbed by the stranger"; }
done
expect_contains "$WORK/job.0" "Out of bounds values : 0 OK"
kill -TERM "$store"
wait "$store" || true
expect_contains "$WORK/store.log" "1 refused"
echo "wrong token: refused, job OK"

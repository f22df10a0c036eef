"""Data-parallel SGD with Holmes on numpy: linear regression on synthetic data with a known answer.

Every rank holds its own shard of the data, computes the gradient of the mean squared error on
it, and the ranks average their gradients with an allreduce, so every rank takes the same step
and keeps the same weights. The loss printed is the global one (an allreduce too); at the end
each rank checks that the weights approach the true ones and that all ranks agree bitwise. The
loss levels off at the noise's variance, 1e-4.

    holmes-run -n 4 -- /usr/bin/python3 bindings/python/examples/dp_sgd.py

(PYTHONPATH=bindings/python, and HOLMES_LIBRARY=build/lib/libholmes.so unless the library was
built into build*/ of this checkout or installed.)
"""

import argparse
import sys

import numpy as np

import holmes


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--samples-per-rank", type=int, default=512)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=0.02)
    args = parser.parse_args()

    with holmes.init() as world:
        # The truth is the same everywhere (seed 0); each rank's samples are its own.
        truth = np.random.default_rng(0).normal(size=args.features)
        bias = 0.5
        rng = np.random.default_rng(1000 + world.rank)
        x = rng.normal(size=(args.samples_per_rank, args.features))
        y = x @ truth + bias + 0.01 * rng.normal(size=args.samples_per_rank)

        weights = np.zeros(args.features + 1)  # the last entry is the bias
        inputs = np.hstack([x, np.ones((args.samples_per_rank, 1))])
        losses = []
        for step in range(args.steps):
            error = inputs @ weights - y
            grad = 2.0 * inputs.T @ error / len(y)
            world.allreduce(grad, holmes.AVG, out=grad)  # in place: the data-parallel step
            weights -= args.lr * grad
            loss = world.allreduce(np.array([np.mean(error**2)]), holmes.AVG)[0]
            losses.append(loss)
            if world.rank == 0 and (step % 30 == 0 or step == args.steps - 1):
                print(f"step {step:4d}  loss {loss:.6f}", flush=True)

        distance = np.linalg.norm(weights - np.append(truth, bias))
        everyone = world.allgather(weights)
        agree = all(np.array_equal(everyone[0], w) for w in everyone)
        ok = losses[-1] < losses[0] / 100 and distance < 0.01 and agree
        if world.rank == 0:
            print(f"{world.size} ranks, {args.samples_per_rank} samples each: loss "
                  f"{losses[0]:.4f} -> {losses[-1]:.6f}; |w - truth| = {distance:.5f}; "
                  f"ranks agree bitwise: {agree}; {'OK' if ok else 'FAILED'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

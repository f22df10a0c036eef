// The example trainer's model: a stack of dense layers, residual ones y = x + tanh(W x + b)
// (the identity path lets a deep stack learn fast) and a linear last one y = W x + b; forward and
// backward written by hand, no framework. Batches are row-major [rows x width].
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace trainer {

// Deterministic numbers from (seed, index): every rank, and the single-process reference, draws
// the same weights and samples without sharing state.
float uniform(std::uint64_t seed, std::uint64_t index);  // in [-1, 1)

class DenseLayer {
 public:
  DenseLayer(int width, bool linear, std::uint64_t seed);

  // out[r] = in[r] + tanh(W in[r] + b), or W in[r] + b for the linear layer, for `rows` rows.
  void forward(std::span<const float> in, std::span<float> out, int rows) const;
  // Given the layer's input and output for these rows and d(loss)/d(out), adds the parameter
  // gradients to grad_w / grad_b and writes d(loss)/d(in) (d_in may be empty for the first layer).
  void backward(std::span<const float> in, std::span<const float> out, std::span<const float> d_out,
                std::span<float> d_in, int rows);
  void sgd(float learning_rate, float scale);  // w -= lr * scale * grad; grads reset to 0

  // Parameters and their gradients as one flat range each: weights then biases.
  std::span<float> gradients() { return grads_; }
  std::span<const float> parameters() const { return params_; }
  std::span<float> parameters() { return params_; }  // a recovery copies weights in
  int width() const { return width_; }

 private:
  int width_;
  bool linear_;
  std::vector<float> params_;  // W (width x width, row = output unit), then b (width)
  std::vector<float> grads_;
};

}  // namespace trainer

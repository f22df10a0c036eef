#include "dense.hpp"

#include <cmath>

namespace trainer {

float uniform(std::uint64_t seed, std::uint64_t index) {
  // splitmix64 of (seed, index)
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

DenseLayer::DenseLayer(int width, bool linear, std::uint64_t seed)
    : width_(width),
      linear_(linear),
      params_(static_cast<std::size_t>(width) * width + width),
      grads_(params_.size(), 0.0f) {
  // Xavier-like scale keeps tanh out of saturation at the start.
  const float scale = 1.0f / std::sqrt(static_cast<float>(width));
  for (std::size_t i = 0; i < static_cast<std::size_t>(width) * width; ++i) {
    params_[i] = scale * uniform(seed, i);
  }
}

void DenseLayer::forward(std::span<const float> in, std::span<float> out, int rows) const {
  const int n = width_;
  const float* w = params_.data();
  const float* b = params_.data() + static_cast<std::size_t>(n) * n;
  for (int r = 0; r < rows; ++r) {
    const float* x = in.data() + static_cast<std::size_t>(r) * n;
    float* y = out.data() + static_cast<std::size_t>(r) * n;
    for (int o = 0; o < n; ++o) {
      const float* row = w + static_cast<std::size_t>(o) * n;
      float z = b[o];
      for (int i = 0; i < n; ++i) z += row[i] * x[i];
      y[o] = linear_ ? z : x[o] + std::tanh(z);
    }
  }
}

void DenseLayer::backward(std::span<const float> in, std::span<const float> out,
                          std::span<const float> d_out, std::span<float> d_in, int rows) {
  const int n = width_;
  const float* w = params_.data();
  float* gw = grads_.data();
  float* gb = grads_.data() + static_cast<std::size_t>(n) * n;
  std::vector<float> dz(static_cast<std::size_t>(n));
  for (int r = 0; r < rows; ++r) {
    const float* x = in.data() + static_cast<std::size_t>(r) * n;
    const float* y = out.data() + static_cast<std::size_t>(r) * n;
    const float* dy = d_out.data() + static_cast<std::size_t>(r) * n;
    // Residual: y = x + a with a = tanh(z), so a = y - x and dz = dy (1 - a^2).
    for (int o = 0; o < n; ++o) {
      const float a = y[o] - x[o];
      dz[o] = linear_ ? dy[o] : dy[o] * (1.0f - a * a);
    }
    for (int o = 0; o < n; ++o) {
      float* grow = gw + static_cast<std::size_t>(o) * n;
      for (int i = 0; i < n; ++i) grow[i] += dz[o] * x[i];
      gb[o] += dz[o];
    }
    if (!d_in.empty()) {
      float* dx = d_in.data() + static_cast<std::size_t>(r) * n;
      // The identity path passes dy straight through; the linear layer has none.
      for (int i = 0; i < n; ++i) dx[i] = linear_ ? 0.0f : dy[i];
      for (int o = 0; o < n; ++o) {
        const float* row = w + static_cast<std::size_t>(o) * n;
        for (int i = 0; i < n; ++i) dx[i] += dz[o] * row[i];
      }
    }
  }
}

void DenseLayer::sgd(float learning_rate, float scale) {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    params_[i] -= learning_rate * scale * grads_[i];
    grads_[i] = 0.0f;
  }
}

}  // namespace trainer

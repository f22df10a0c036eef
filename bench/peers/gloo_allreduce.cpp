// gloo-allreduce-bench: Gloo's gloo::allreduce (ring, float32 sum, tcp transport) measured in
// holmes-bench's columns, so that Holmes can be compared with it in one run.
//
//   RANK=r WORLD_SIZE=n GLOO_STORE_DIR=DIR gloo-allreduce-bench [allreduce] [-b MIN] [-e MAX]
//       [-f FACTOR] [-n ITERS] [-w WARMUP] [-c] [--csv F]
//
// Start n copies (bench/compare-local.sh does); they meet through a gloo FileStore in DIR, an
// empty directory that all ranks share (use a fresh one per job). GLOO_HOSTNAME (default
// 127.0.0.1) is the address the tcp transport binds to; GLOO_TIMEOUT_S (default 120) bounds
// every operation.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <fmt/format.h>

#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "allreduce_driver.hpp"

namespace {

// Tags keep the measured allreduce apart from the bookkeeping ones in gloo's matching.
constexpr uint32_t kMeasuredTag = 1;
constexpr uint32_t kBookkeepingTag = 2;
constexpr uint32_t kBarrierTag = 3;

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

// The integer in variable `name`, or `fallback` when it is unset; a clear error when it is not a
// number.
int env_int(const char* name, std::optional<int> fallback = std::nullopt) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    if (fallback) return *fallback;
    throw std::runtime_error(
        fmt::format("{} is not set (start ranks with RANK, WORLD_SIZE and "
                    "GLOO_STORE_DIR)",
                    name));
  }
  std::size_t used = 0;
  int number = 0;
  try {
    number = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || value[used] != '\0') {
    throw std::runtime_error(fmt::format("{}='{}' is not a number", name, value));
  }
  return number;
}

class GlooPeer final : public holmes::peers::AllreducePeer {
 public:
  GlooPeer() {
    const int rank = env_int("RANK");
    const int size = env_int("WORLD_SIZE");
    if (size < 1 || rank < 0 || rank >= size) {
      throw std::runtime_error(fmt::format("RANK {} outside WORLD_SIZE {}", rank, size));
    }
    const std::string store_dir = env_or("GLOO_STORE_DIR", "");
    if (store_dir.empty()) throw std::runtime_error("GLOO_STORE_DIR is not set");
    hostname_ = env_or("GLOO_HOSTNAME", "127.0.0.1");
    const auto timeout = std::chrono::seconds(env_int("GLOO_TIMEOUT_S", 120));
    if (timeout.count() <= 0) throw std::runtime_error("GLOO_TIMEOUT_S must be positive");

    gloo::transport::tcp::attr attr;
    attr.hostname = hostname_;
    attr.ai_family = AF_UNSPEC;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(store_dir);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(timeout);
    context->connectFullMesh(store, device);
    context_ = std::move(context);
  }

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  std::string describe() const override {
    return fmt::format("gloo {}.{}.{} gloo::allreduce ring, tcp transport on {}",
                       GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, hostname_);
  }

  void allreduce_sum(const float* send, float* recv, std::size_t count) override {
    gloo::AllreduceOptions options(context_);
    options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    // Gloo's setInput takes a mutable pointer but only reads the input.
    if (send != recv) options.setInput(const_cast<float*>(send), count);
    options.setOutput(recv, count);
    // Gloo's own element-wise sum, as torch.distributed's gloo backend passes it.
    options.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    options.setTag(kMeasuredTag);
    gloo::allreduce(options);
  }

  void barrier() override {
    gloo::BarrierOptions options(context_);
    options.setTag(kBarrierTag);
    gloo::barrier(options);
  }

  double max_over_ranks(double value) override { return reduce_double(value, &gloo::max<double>); }
  double sum_over_ranks(double value) override { return reduce_double(value, &gloo::sum<double>); }

 private:
  double reduce_double(double value, void (*fn)(void*, const void*, const void*, size_t)) {
    gloo::AllreduceOptions options(context_);
    options.setOutput(&value, 1);
    options.setReduceFunction(fn);
    options.setTag(kBookkeepingTag);
    gloo::allreduce(options);
    return value;
  }

  std::string hostname_;
  std::shared_ptr<gloo::Context> context_;
};

}  // namespace

int main(int argc, char** argv) {
  return holmes::peers::run_allreduce_bench("gloo-allreduce-bench", argc, argv,
                                            [] { return std::make_unique<GlooPeer>(); });
}

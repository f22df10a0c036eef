// Holmes's own ring inside a group: what every group ran before engines existed, and what host
// buffers always run.
#include "collectives/algorithms.hpp"
#include "collectives/engine/group_engine.hpp"

namespace holmes {
namespace {

class RingEngine final : public GroupEngine {
 public:
  std::string_view name() const override { return "ring"; }
  void reduce_scatter_blocks(CollectiveContext& group, const std::byte* in, std::byte* own_out,
                             const BlockLayout& layout, hm_dtype_t dtype, hm_op_t op,
                             int average_over) override {
    ring_reduce_scatter_blocks(group, in, own_out, layout, dtype, op, average_over, nullptr);
  }
  void allgather_blocks(CollectiveContext& group, std::byte* buffer, const BlockLayout& layout,
                        hm_dtype_t dtype) override {
    ring_allgather_blocks(group, buffer, layout, dtype);
  }
};

}  // namespace

GroupEngine& ring_engine() {
  static RingEngine engine;  // stateless
  return engine;
}

}  // namespace holmes

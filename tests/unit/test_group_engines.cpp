// The group engines' pure parts: which engine a group gets (communicator/group_engines.hpp) and
// the blockwise decomposition's calls (collectives/engine/blockwise.hpp), recorded. The engines'
// results are checked end to end in unit.Hierarchical/BlockwiseGroupEngine (every layout, count,
// dtype and op) and in mp.collectives.algo.hier.blockwise.mixed.np6 (processes and sockets).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "collectives/engine/blockwise.hpp"
#include "collectives/engine/nccl_engine.hpp"
#include "communicator/group_engines.hpp"
#include "core/status.hpp"

namespace holmes::detail {
namespace {

EngineFacts facts(std::string setting, bool device, GroupLevel level, std::string fabric, bool nccl,
                  bool ipc = false) {
  EngineFacts f;
  f.setting = std::move(setting);
  f.device_buffers = device;
  f.level = level;
  f.fabric = std::move(fabric);
  f.nccl_usable = nccl;
  f.nccl_why_not = nccl ? "" : "Holmes was built without NCCL (HOLMES_WITH_NCCL)";
  f.ipc_usable = ipc;
  f.ipc_why_not = ipc ? "" : "rank 3 cannot share device memory: no device in this process";
  return f;
}

TEST(GroupEngineChoice, HostBuffersRunOnHolmesRing) {
  for (bool nccl : {false, true}) {
    for (auto level : {GroupLevel::kHost, GroupLevel::kIsland}) {
      const auto c = choose_group_engine(facts("auto", false, level, "ib", nccl));
      EXPECT_EQ(c.kind, EngineKind::kRing);
      EXPECT_NE(c.reason.find("host buffers"), std::string::npos) << c.reason;
    }
  }
}

TEST(GroupEngineChoice, HostBuffersInAnIslandOfSeveralRanksPerHostCrossHostsOnce) {
  auto f = facts("auto", false, GroupLevel::kIsland, "ethernet", false);
  f.ranks_per_host = 2;
  const auto c = choose_group_engine(f);
  EXPECT_EQ(c.kind, EngineKind::kTwoLevel);
  EXPECT_NE(c.reason.find("2 ranks on each host"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("ethernet"), std::string::npos) << c.reason;
  EXPECT_STREQ(engine_kind_name(c.kind), "two-level");
  // The setting still forces the ring (or blockwise) there; device buffers keep their engines.
  f.setting = "ring";
  EXPECT_EQ(choose_group_engine(f).kind, EngineKind::kRing);
  f.setting = "blockwise";
  EXPECT_EQ(choose_group_engine(f).kind, EngineKind::kBlockwise);
  f.setting = "auto";
  f.device_buffers = true;
  EXPECT_EQ(choose_group_engine(f).kind, EngineKind::kRing);
  f.nccl_usable = true;
  EXPECT_EQ(choose_group_engine(f).kind, EngineKind::kNccl);
}

TEST(GroupEngineChoice, TheCostModelKnowsWhichSettingsLeaveHostBuffersTheTwoLevelEngine) {
  // The model prices the islands' phases by host_buffers_take_two_level: it must say what the
  // choice does, for every value of the setting.
  for (const char* setting : {"auto", "ring", "blockwise", "ipc", "nccl"}) {
    auto f = facts(setting, false, GroupLevel::kIsland, "ethernet", true, true);
    f.ranks_per_host = 2;
    EXPECT_EQ(choose_group_engine(f).kind == EngineKind::kTwoLevel,
              host_buffers_take_two_level(setting))
        << setting;
  }
  EXPECT_TRUE(host_buffers_take_two_level("auto"));
  EXPECT_FALSE(host_buffers_take_two_level("ring"));
}

TEST(GroupEngineChoice, DeviceBuffersTakeNcclWhereItRuns) {
  for (const char* fabric : {"ib", "roce", "ethernet"}) {
    const auto c = choose_group_engine(facts("auto", true, GroupLevel::kIsland, fabric, true));
    EXPECT_EQ(c.kind, EngineKind::kNccl);
    EXPECT_NE(c.reason.find(fabric), std::string::npos) << c.reason;
  }
  const auto host = choose_group_engine(facts("auto", true, GroupLevel::kHost, "", true));
  EXPECT_EQ(host.kind, EngineKind::kNccl);
  EXPECT_NE(host.reason.find("inside a host"), std::string::npos) << host.reason;
}

TEST(GroupEngineChoice, InsideAHostDeviceBuffersTakeIpcWhereEveryMemberMapsTheOthers) {
  for (bool nccl : {false, true}) {
    const auto c = choose_group_engine(facts("auto", true, GroupLevel::kHost, "ib", nccl, true));
    EXPECT_EQ(c.kind, EngineKind::kIpc);
    EXPECT_NE(c.reason.find("no host copy"), std::string::npos) << c.reason;
    // Across hosts the windows cannot be mapped: NCCL or the ring, whatever this process can do.
    EXPECT_EQ(choose_group_engine(facts("auto", true, GroupLevel::kIsland, "ib", nccl, true)).kind,
              nccl ? EngineKind::kNccl : EngineKind::kRing);
  }
  // A host whose members cannot map each other: NCCL where it runs, else the ring, saying both.
  EXPECT_EQ(choose_group_engine(facts("auto", true, GroupLevel::kHost, "", true, false)).kind,
            EngineKind::kNccl);
  const auto ring = choose_group_engine(facts("auto", true, GroupLevel::kHost, "", false, false));
  EXPECT_EQ(ring.kind, EngineKind::kRing);
  EXPECT_NE(ring.reason.find("no IPC: rank 3 cannot share"), std::string::npos) << ring.reason;
  EXPECT_NE(ring.reason.find("no NCCL"), std::string::npos) << ring.reason;
  // Host buffers never take it.
  EXPECT_EQ(choose_group_engine(facts("auto", false, GroupLevel::kHost, "", false, true)).kind,
            EngineKind::kRing);
}

TEST(GroupEngineChoice, ForcedIpcRunsInsideHostsAndRefusesWhereTheyCannotMap) {
  EXPECT_EQ(choose_group_engine(facts("ipc", true, GroupLevel::kHost, "", false, true)).kind,
            EngineKind::kIpc);
  const auto island =
      choose_group_engine(facts("ipc", true, GroupLevel::kIsland, "ib", true, true));
  EXPECT_EQ(island.kind, EngineKind::kRing);
  EXPECT_NE(island.reason.find("inside a host"), std::string::npos) << island.reason;
  try {
    choose_group_engine(facts("ipc", true, GroupLevel::kHost, "", true, false));
    ADD_FAILURE() << "expected HM_ERR_UNSUPPORTED";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(e.what()).find("HOLMES_GROUP_ENGINE=ipc"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("rank 3 cannot share"), std::string::npos);
  }
}

TEST(GroupEngineChoice, WithoutNcclDeviceBuffersStageOnTheRingAndSayWhy) {
  const auto c = choose_group_engine(facts("auto", true, GroupLevel::kIsland, "roce", false));
  EXPECT_EQ(c.kind, EngineKind::kRing);
  EXPECT_NE(c.reason.find("staged"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("HOLMES_WITH_NCCL"), std::string::npos) << c.reason;
}

TEST(GroupEngineChoice, TheSettingForcesAnEngine) {
  EXPECT_EQ(choose_group_engine(facts("ring", true, GroupLevel::kHost, "", true)).kind,
            EngineKind::kRing);
  for (bool device : {false, true}) {
    EXPECT_EQ(
        choose_group_engine(facts("blockwise", device, GroupLevel::kIsland, "ib", false)).kind,
        EngineKind::kBlockwise);
  }
  EXPECT_EQ(choose_group_engine(facts("nccl", true, GroupLevel::kIsland, "ib", true)).kind,
            EngineKind::kNccl);
  // NCCL takes device buffers only: host buffers stay on the ring even when it is forced.
  EXPECT_EQ(choose_group_engine(facts("nccl", false, GroupLevel::kIsland, "ib", true)).kind,
            EngineKind::kRing);
}

TEST(GroupEngineChoice, ForcedNcclWithoutNcclIsUnsupported) {
  try {
    choose_group_engine(facts("nccl", true, GroupLevel::kIsland, "ib", false));
    ADD_FAILURE() << "expected HM_ERR_UNSUPPORTED";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(e.what()).find("HOLMES_GROUP_ENGINE=nccl"), std::string::npos);
  }
}

TEST(GroupEngineChoice, NcclUsabilityIsDecidedAndExplained) {
  std::string why;
  if (!nccl_usable(&why)) {
    EXPECT_FALSE(why.empty());
  } else {
    EXPECT_TRUE(why.empty()) << why;
  }
}

// A store in memory: what the other members said is set beforehand, as if they had said it first.
struct MemoryStore {
  std::map<std::string, std::string> values;
  EngineStore view() {
    return {[this](const std::string& key, const std::string& value) { values[key] = value; },
            [this](const std::string& key) {
              const auto it = values.find(key);
              if (it == values.end()) fail(HM_ERR_TIMEOUT, "no one set '{}'", key);
              return it->second;
            }};
  }
};

const std::string kRefusal = "NCCL does not run";

TEST(GroupEngineAgreement, NcclRunsForTheGroupOnlyWhereItRunsForEveryMember) {
  const std::vector<int> members = {4, 6, 9};
  MemoryStore store;
  store.values["g/usable/0"] = "yes";
  store.values["g/usable/2"] = "yes";
  EXPECT_EQ(why_not_for_group(store.view(), "g", members, 1, true, "", kRefusal), "");
  EXPECT_EQ(store.values["g/usable/1"], "yes");

  // Rank 9 has no libnccl: every member learns it, the one with NCCL included.
  store.values["g/usable/2"] = "no: libnccl.so.2 is not on the loader's path";
  const std::string why = why_not_for_group(store.view(), "g", members, 1, true, "", kRefusal);
  EXPECT_NE(why.find("NCCL does not run for rank 9"), std::string::npos) << why;
  EXPECT_NE(why.find("libnccl.so.2 is not on the loader's path"), std::string::npos) << why;

  // This member cannot run NCCL: it says so before it reads the others, so they do not wait.
  MemoryStore alone;
  alone.values["h/usable/0"] = "yes";
  const std::string mine = why_not_for_group(alone.view(), "h", {0, 1}, 1, false,
                                             "no usable CUDA device: none", kRefusal);
  EXPECT_EQ(alone.values["h/usable/1"], "no: no usable CUDA device: none");
  EXPECT_NE(mine.find("rank 1"), std::string::npos) << mine;
}

TEST(GroupEngineAgreement, AMemberThatNeverSaysTimesOut) {
  MemoryStore store;
  try {
    why_not_for_group(store.view(), "g", {0, 1}, 0, true, "", kRefusal);
    ADD_FAILURE() << "expected the store's timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_TIMEOUT);
  }
}

// What the decomposition asked for, in order.
class RecordedCalls final : public BlockCalls {
 public:
  void begin() override { log.push_back("begin"); }
  void end() override { log.push_back("end"); }
  void reduce(const std::byte* in, std::byte* out, std::size_t count, hm_dtype_t dtype, hm_op_t op,
              int root, int average_over) override {
    (void)dtype;
    (void)op;
    log.push_back(fmt::format("reduce in+{} out={} count {} root {} avg {}", in - base,
                              out == own ? std::string("own") : fmt::format("in+{}", out - base),
                              count, root, average_over));
  }
  void broadcast(std::byte* buffer, std::size_t count, hm_dtype_t dtype, int root) override {
    (void)dtype;
    log.push_back(fmt::format("broadcast +{} count {} root {}", buffer - base, count, root));
  }
  const std::byte* base = nullptr;
  const std::byte* own = nullptr;
  std::vector<std::string> log;
};

TEST(BlockwiseDecomposition, ReduceScatterReducesEachBlockToItsOwnerInOneBatch) {
  // Three positions: blocks of 5 and 4 int32 elements, the third position past the lanes.
  const BlockLayout layout({{0, 5}, {5, 4}, {0, 0}}, 1024);
  std::vector<std::byte> in(9 * 4);
  std::vector<std::byte> own(5 * 4);
  RecordedCalls calls;
  calls.base = in.data();
  calls.own = own.data();
  blockwise_reduce_scatter(calls, 1, in.data(), own.data(), layout, HM_INT32, HM_AVG, 6);
  const std::vector<std::string> expected = {
      "begin",
      "reduce in+0 out=in+0 count 5 root 0 avg 6",
      "reduce in+20 out=own count 4 root 1 avg 6",
      "end",
  };
  EXPECT_EQ(calls.log, expected);
}

TEST(BlockwiseDecomposition, AllgatherBroadcastsEachBlockFromItsOwner) {
  const BlockLayout layout({{0, 3}, {3, 0}, {3, 2}}, 1024);
  std::vector<std::byte> buffer(5 * 8);
  RecordedCalls calls;
  calls.base = buffer.data();
  blockwise_allgather(calls, buffer.data(), layout, HM_FLOAT64);
  const std::vector<std::string> expected = {
      "begin",
      "broadcast +0 count 3 root 0",
      "broadcast +24 count 2 root 2",
      "end",
  };
  EXPECT_EQ(calls.log, expected);
}

}  // namespace
}  // namespace holmes::detail

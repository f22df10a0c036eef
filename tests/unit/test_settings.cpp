// Tests of the settings registry (src/core/setting_registry.hpp, settings.hpp) and of the
// slices the communicator cuts from it: every setting is registered once with a default of its
// own type, the registered defaults are the ones the structs hold, a value records where it came
// from (default, environment and its alias, hm_config_t), the config wins over the environment,
// and a bad value is refused naming the setting and the value, through the C++ and the C API.
#include <holmes/holmes.h>
#include <holmes/holmes.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "collectives/algorithm.hpp"
#include "collectives/tuning.hpp"
#include "communicator/config.hpp"
#include "communicator/transport_setup.hpp"
#include "core/setting_registry.hpp"
#include "core/settings.hpp"
#include "core/status.hpp"
#include "transports/options.hpp"
#include "transports/shm/layout.hpp"
#include "transports/verbs/qp_info.hpp"
#include "transports/verbs/wire.hpp"

namespace holmes {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Clears every registered variable (and the launchers' aliases) for the test and puts the
// environment back afterwards.
class SettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& spec : all_settings()) {
      save(std::string(spec.name));
      for (auto alias : spec.aliases) save(std::string(alias));
    }
    save("MASTER_ADDR");
    save("MASTER_PORT");
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  static void set(const char* name, const char* value) { ASSERT_EQ(::setenv(name, value, 1), 0); }

  // The line of a dump that shows `name`.
  static std::string line_of(const std::string& dump, const std::string& name) {
    std::size_t at = 0;
    while ((at = dump.find(name, at)) != std::string::npos) {
      if ((at == 0 || dump[at - 1] == '\n') && dump[at + name.size()] == ' ') {
        return dump.substr(at, dump.find('\n', at) - at);
      }
      at += name.size();
    }
    return {};
  }

 private:
  void save(const std::string& name) {
    if (saved_.count(name) != 0) return;
    const char* value = std::getenv(name.c_str());
    saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
    ::unsetenv(name.c_str());
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST_F(SettingsTest, EverySettingIsRegisteredOnceWithADefaultOfItsType) {
  std::set<std::string> names;
  ASSERT_EQ(all_settings().size(), kSettingCount);
  for (const auto& spec : all_settings()) {
    EXPECT_TRUE(names.insert(std::string(spec.name)).second) << spec.name << " twice";
    EXPECT_EQ(spec.name.rfind("HOLMES_", 0), 0u) << spec.name;
    EXPECT_FALSE(spec.doc.empty()) << spec.name;
    EXPECT_EQ(spec.doc.find('\n'), std::string::npos) << spec.name << ": one line of doc";
    EXPECT_EQ(&setting_spec(spec.id), &spec);
    EXPECT_EQ(find_setting(spec.name), &spec);
    if (spec.type == SettingType::kInteger || spec.type == SettingType::kFlag) {
      EXPECT_LE(spec.min, spec.max) << spec.name;
    }
    if (spec.type == SettingType::kChoice) {
      EXPECT_FALSE(spec.choices.empty()) << spec.name;
    }
    if (!spec.default_value.empty()) {
      EXPECT_NO_THROW(check_setting(spec, std::string(spec.default_value), std::string(spec.name),
                                    SettingSource::kDefault))
          << spec.name << " default " << spec.default_value;
    }
  }
  EXPECT_EQ(find_setting("HOLMES_NO_SUCH_THING"), nullptr);
  EXPECT_EQ(find_setting("holmes_sockets"), nullptr) << "names are exact";
}

// One home for each number: the registry's defaults and ranges are the structs' and the
// transports' own.
TEST_F(SettingsTest, RegisteredDefaultsAreTheStructsDefaults) {
  const Settings defaults;
  const TransportOptions options;
  EXPECT_EQ(defaults.integer(Setting::kSockets), options.sockets_per_peer);
  EXPECT_EQ(defaults.flag(Setting::kChecksum), options.checksum);
  EXPECT_EQ(defaults.flag(Setting::kTcpFusedReduce), options.tcp_fused_reduce);
  EXPECT_EQ(defaults.integer(Setting::kTimeoutMs), detail::kDefaultTimeoutMs);
  EXPECT_EQ(defaults.integer(Setting::kSockets), detail::kDefaultSocketsPerPeer);
  EXPECT_EQ(defaults.integer(Setting::kChunkBytes),
            static_cast<std::int64_t>(detail::kDefaultChunkBytes));

  const shm::ShmTuning shm;
  EXPECT_EQ(defaults.integer(Setting::kShmRingBytes), static_cast<std::int64_t>(shm.ring_bytes));
  EXPECT_EQ(defaults.flag(Setting::kShmCma), shm.cma);
  EXPECT_EQ(defaults.integer(Setting::kShmCmaMinBytes),
            static_cast<std::int64_t>(shm.cma_min_bytes));
  EXPECT_EQ(defaults.integer(Setting::kShmParkUs), shm.park_grace.count());
  EXPECT_EQ(defaults.flag(Setting::kShmPoll), shm.caller_progress);
  EXPECT_EQ(defaults.integer(Setting::kShmPollUs), shm.poll_window.count());
  EXPECT_EQ(defaults.flag(Setting::kShmFusedReduce), shm.fused_reduce);
  EXPECT_EQ(setting_spec(Setting::kShmRingBytes).min,
            static_cast<std::int64_t>(shm::kMinRingBytes));
  EXPECT_EQ(setting_spec(Setting::kShmRingBytes).max,
            static_cast<std::int64_t>(shm::kMaxRingBytes));

  const verbs::VerbsConfig ib;
  EXPECT_EQ(defaults.integer(Setting::kIbSlots), ib.data_slots);
  EXPECT_EQ(defaults.integer(Setting::kIbSlotBytes), ib.slot_bytes);
  EXPECT_EQ(defaults.integer(Setting::kIbSl), ib.service_level);
  EXPECT_EQ(defaults.integer(Setting::kIbTc), ib.traffic_class);
  EXPECT_EQ(defaults.integer(Setting::kIbTimeout), ib.ack_timeout);
  EXPECT_EQ(defaults.integer(Setting::kIbRetryCnt), ib.retry_count);
  EXPECT_EQ(setting_spec(Setting::kIbSlots).max, verbs::kMaxSlots);
  EXPECT_EQ(setting_spec(Setting::kIbSlotBytes).max, verbs::kMaxSlotBytes);

  // The cost model's nominal tiers, as the registry documents them.
  const CostModel model;
  const std::pair<Setting, LinkCost> tiers[] = {{Setting::kCostShm, model.shm},
                                                {Setting::kCostHostTcp, model.host_tcp},
                                                {Setting::kCostIslandRdma, model.island_rdma},
                                                {Setting::kCostIslandTcp, model.island_tcp},
                                                {Setting::kCostInterIsland, model.inter_island}};
  for (const auto& [setting, link] : tiers) {
    Settings given;
    given.set(setting, std::string(setting_spec(setting).default_value), SettingSource::kConfig);
    const auto parsed = given.link_if_given(setting);
    ASSERT_TRUE(parsed) << setting_spec(setting).name;
    EXPECT_DOUBLE_EQ(parsed->latency_us, link.latency_us) << setting_spec(setting).name;
    EXPECT_DOUBLE_EQ(parsed->gbytes_per_s, link.gbytes_per_s) << setting_spec(setting).name;
  }
  EXPECT_EQ(std::stod(std::string(setting_spec(Setting::kCostReduceGbps).default_value)),
            model.reduce_gbytes_per_s);
  EXPECT_FALSE(defaults.flag(Setting::kCostProbe));

  // Nothing given: the slices are the structs' defaults, and nothing counts as set.
  const auto from_nothing = CostModel::from_settings(defaults);
  EXPECT_EQ(from_nothing.set_by_setting, 0u);
  EXPECT_DOUBLE_EQ(from_nothing.inter_island.latency_us, model.inter_island.latency_us);
  const auto tuning = detail::shm_tuning(defaults);
  EXPECT_EQ(tuning.ring_bytes, shm.ring_bytes);
  EXPECT_EQ(tuning.park_grace, shm.park_grace);
  EXPECT_EQ(detail::verbs_config(defaults).data_slots, ib.data_slots);
}

TEST_F(SettingsTest, EachValueSaysWhereItCameFrom) {
  set("HOLMES_SOCKETS", "4");
  set("SLURM_PROCID", "3");  // an alias of HOLMES_RANK
  set("MASTER_ADDR", "node0");
  set("MASTER_PORT", "29500");
  const Settings env = Settings::from_environment();
  EXPECT_EQ(env.value(Setting::kSockets).source, SettingSource::kEnvironment);
  EXPECT_EQ(env.integer(Setting::kSockets), 4);
  EXPECT_EQ(env.value(Setting::kRank).origin, "SLURM_PROCID");
  EXPECT_EQ(env.integer_if_given(Setting::kRank), 3);
  EXPECT_EQ(env.value(Setting::kStore).origin, "MASTER_ADDR/MASTER_PORT");
  EXPECT_EQ(env.address_if_given(Setting::kStore)->host, "node0");
  EXPECT_EQ(env.value(Setting::kChunkBytes).source, SettingSource::kDefault);
  EXPECT_FALSE(env.given(Setting::kChunkBytes));
  EXPECT_EQ(env.integer(Setting::kChunkBytes), 524288);

  const std::string dump = env.dump();
  EXPECT_TRUE(contains(line_of(dump, "HOLMES_SOCKETS"), "4")) << dump;
  EXPECT_TRUE(contains(line_of(dump, "HOLMES_SOCKETS"), "# environment")) << dump;
  EXPECT_TRUE(contains(line_of(dump, "HOLMES_RANK"), "environment: SLURM_PROCID")) << dump;
  EXPECT_TRUE(contains(line_of(dump, "HOLMES_CHUNK_BYTES"), "524288")) << dump;
  EXPECT_TRUE(contains(line_of(dump, "HOLMES_CHUNK_BYTES"), "# default")) << dump;
  EXPECT_TRUE(contains(line_of(dump, "HOLMES_HOST"), "(unset)")) << dump;
  // Every setting is listed, once.
  for (const auto& spec : all_settings()) {
    EXPECT_FALSE(line_of(dump, std::string(spec.name)).empty()) << spec.name;
  }
}

// UCX's own UCX_TLS and UCX_NET_DEVICES are aliases of Holmes's settings, so the ucx transport
// leaves UCX's choice alone where the user made one, from the environment or through the config.
TEST_F(SettingsTest, UcxChoicesComeFromUcxVariablesOrTheConfig) {
  EXPECT_FALSE(detail::ucx_choices(Settings::from_environment()).tls.has_value());
  EXPECT_FALSE(detail::ucx_choices(Settings::from_environment()).net_devices.has_value());
  set("UCX_TLS", "tcp,self");
  set("UCX_NET_DEVICES", "lo");
  const auto env = detail::ucx_choices(Settings::from_environment());
  EXPECT_EQ(env.tls, "tcp,self");
  EXPECT_EQ(env.net_devices, "lo");
  Config config;
  config.set("HOLMES_UCX_TLS", "rc,sm");
  const auto configured = detail::ucx_choices(detail::configured_settings(config));
  EXPECT_EQ(configured.tls, "rc,sm");
  EXPECT_EQ(configured.net_devices, "lo");
}

// tcp's NIC list: HOLMES_TCP_NICS as given; else the topology file's ethernet NICs of this host
// at their class's rate / emulation_scale, when it lists two or more and the machine has them.
TEST_F(SettingsTest, TcpNicsComeFromTheSettingElseTheTopologyFile) {
  const std::string file = ::testing::TempDir() + "tcp-nics-topology.yaml";
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(
        "emulation_scale: 10\n"
        "link_classes:\n"
        "  eth-10: {fabric: ethernet, gbit_per_s: 10, latency_us: 20}\n"
        "  ib:     {fabric: ib, gbit_per_s: 200, latency_us: 2}\n"
        "  nvlink: {fabric: nvlink, gbit_per_s: 2400, latency_us: 1}\n"
        "inter_island_link: eth-10\n"
        "islands:\n"
        "  - {name: a, fabric: ib, link_class: ib, hosts: [\n"
        "      {name: two, gpus: 1, nics: [{name: mlx5_0}, {name: eth0, link_class: eth-10},\n"
        "                                   {name: eth1, link_class: eth-10}]},\n"
        "      {name: one, gpus: 1, nics: [{name: eth0, link_class: eth-10}]}]}\n",
        f);
    std::fclose(f);
  }
  const std::set<std::string> both = {"lo", "eth0", "eth1"};
  EXPECT_EQ(detail::tcp_nics(Settings::from_environment(), "two", both), "");  // no file
  set("HOLMES_TOPOLOGY", file.c_str());
  const Settings with_file = Settings::from_environment();
  // The RDMA port is not tcp's; 10 Gbit/s / 10.
  EXPECT_EQ(detail::tcp_nics(with_file, "two", both), "eth0@1,eth1@1");
  EXPECT_EQ(detail::tcp_nics(with_file, "one", both), "");            // one NIC: nothing to stripe
  EXPECT_EQ(detail::tcp_nics(with_file, "absent", both), "");         // not in the file
  EXPECT_EQ(detail::tcp_nics(with_file, "two", {"lo", "eth0"}), "");  // eth1 is not here
  set("HOLMES_TCP_NICS", "eth3@2,10.0.0.1");
  EXPECT_EQ(detail::tcp_nics(Settings::from_environment(), "two", both), "eth3@2,10.0.0.1");
  std::remove(file.c_str());
}

TEST_F(SettingsTest, TheConfigWinsOverTheEnvironmentAndItsFieldsOverItsSettings) {
  set("HOLMES_SOCKETS", "4");
  set("HOLMES_ALGO", "rd");
  Config config;
  config.set("HOLMES_SOCKETS", "8").set("HOLMES_SHM_RING_BYTES", "1048576");
  Settings s = detail::configured_settings(config);
  EXPECT_EQ(s.integer(Setting::kSockets), 8);
  EXPECT_EQ(s.value(Setting::kSockets).source, SettingSource::kConfig);
  EXPECT_TRUE(contains(line_of(s.dump(), "HOLMES_SOCKETS"), "# hm_config_t")) << s.dump();
  EXPECT_EQ(s.text(Setting::kAlgo), "rd");
  EXPECT_EQ(detail::shm_tuning(s).ring_bytes, 1u << 20);
  config.sockets_per_peer = 3;
  s = detail::configured_settings(config);
  EXPECT_EQ(s.integer(Setting::kSockets), 3);
  // The slices follow: the algorithm forced through the config, the cost numbers given there.
  config.set("HOLMES_ALGO", "ring").set("HOLMES_COST_INTER_ISLAND", "250,0.5");
  s = detail::configured_settings(config);
  const auto forced = ForcedAlgorithms::from_settings(s);
  EXPECT_EQ(forced.get(CollectiveKind::kAllreduce), Algorithm::kRing);
  const auto model = CostModel::from_settings(s);
  EXPECT_DOUBLE_EQ(model.inter_island.latency_us, 250);
  EXPECT_EQ(model.set_by_setting, CostModel::kSetInterIsland);
}

TEST_F(SettingsTest, ResolvedConfigTakesItsValuesFromTheSettings) {
  set("HOLMES_RANK", "1");
  set("HOLMES_WORLD_SIZE", "2");
  set("HOLMES_STORE", "127.0.0.1:1234");
  set("HOLMES_TCP_FUSED_REDUCE", "0");
  Config config;
  config.set("HOLMES_CHECKSUM", "1").set("HOLMES_CHUNK_BYTES", "65536");
  const auto resolved = detail::resolve_config(config);
  EXPECT_EQ(resolved.rank, 1);
  EXPECT_EQ(resolved.world_size, 2);
  EXPECT_EQ(resolved.store.port, 1234);
  EXPECT_FALSE(resolved.serve_store);
  EXPECT_TRUE(resolved.checksum);
  EXPECT_FALSE(resolved.tcp_fused_reduce);
  EXPECT_EQ(resolved.chunk_bytes, 65536u);
  EXPECT_EQ(resolved.timeout.count(), detail::kDefaultTimeoutMs);
  EXPECT_EQ(resolved.settings.value(Setting::kChecksum).source, SettingSource::kConfig);
}

TEST_F(SettingsTest, BadValuesAreRefusedNamingTheSettingAndTheValue) {
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"HOLMES_SOCKETS", "17"},          {"HOLMES_SOCKETS", "two"},
      {"HOLMES_CHECKSUM", "yes"},        {"HOLMES_TRANSPORT", "carrier-pigeon"},
      {"HOLMES_FABRIC", "nvlink"},       {"HOLMES_COST_INTER_ISLAND", "10,0"},
      {"HOLMES_COST_REDUCE_GBPS", "-2"}, {"HOLMES_STORE", "host:70000"},
      {"HOLMES_LOG_LEVEL", "loud"},
  };
  for (const auto& [name, value] : bad) {
    Config config;
    try {
      config.set(name, value);
      ADD_FAILURE() << name << "=" << value << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
      EXPECT_TRUE(contains(e.what(), name)) << e.what();
      EXPECT_TRUE(contains(e.what(), value)) << e.what();
    }
    EXPECT_TRUE(config.settings.empty()) << "a refused value is not kept";
    // From the environment, the same value fails where it is read, naming the variable.
    set(name, value);
    try {
      Settings::from_environment().check();
      ADD_FAILURE() << name << "=" << value << " accepted from the environment";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), name)) << e.what();
      EXPECT_TRUE(contains(e.what(), value)) << e.what();
    }
    ::unsetenv(name);
  }
  try {
    Config().set("HOLMES_SOCKET", "2");
    ADD_FAILURE() << "an unknown name was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "unknown setting 'HOLMES_SOCKET'")) << e.what();
  }
  // Torchrun's pair needs both halves; the problem shows where the store is read.
  set("MASTER_ADDR", "node0");
  EXPECT_THROW(Settings::from_environment().address_if_given(Setting::kStore), Error);
}

TEST_F(SettingsTest, TheTokenIsHiddenInTheDump) {
  set("HOLMES_TOKEN", "s3cret-token");
  const std::string dump = Settings::from_environment().dump();
  EXPECT_FALSE(contains(dump, "s3cret-token")) << dump;
  EXPECT_TRUE(contains(line_of(dump, "HOLMES_TOKEN"), "(hidden)")) << dump;
}

TEST_F(SettingsTest, TheMarkdownTableHasARowPerSetting) {
  const std::string table = Settings::markdown_table();
  EXPECT_EQ(table.rfind("| setting | type | default | scope | meaning |\n", 0), 0u);
  for (const auto& spec : all_settings()) {
    EXPECT_TRUE(contains(table, fmt::format("| `{}` |", spec.name))) << spec.name;
  }
  EXPECT_TRUE(contains(table, "| `HOLMES_SOCKETS` | integer 1..16 | `2` | tcp |")) << table;
}

// The C API: hm_config_set checks and keeps values, hm_config_dump shows them, release frees.
TEST_F(SettingsTest, CApiSetsDumpsAndReleases) {
  hm_config_t config = HM_CONFIG_INITIALIZER;
  EXPECT_EQ(hm_config_set(&config, "HOLMES_SHM_POLL_US", "250"), HM_SUCCESS);
  EXPECT_EQ(hm_config_set(&config, "HOLMES_SHM_POLL_US", "2000000"), HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(hm_last_error_message(), "HOLMES_SHM_POLL_US"));
  EXPECT_TRUE(contains(hm_last_error_message(), "2000000"));
  EXPECT_EQ(hm_config_set(&config, "HOLMES_NOPE", "1"), HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(hm_last_error_message(), "HOLMES_NOPE"));
  config.sockets_per_peer = 5;

  std::size_t length = 0;
  ASSERT_EQ(hm_config_dump(&config, nullptr, 0, &length), HM_SUCCESS);
  std::string dump(length, '\0');
  char small[4];
  EXPECT_EQ(hm_config_dump(&config, small, sizeof(small), nullptr), HM_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(hm_config_dump(&config, dump.data(), dump.size(), nullptr), HM_SUCCESS);
  dump.resize(length - 1);
  EXPECT_TRUE(contains(line_of(dump, "HOLMES_SHM_POLL_US"), "250")) << dump;
  EXPECT_TRUE(contains(line_of(dump, "HOLMES_SHM_POLL_US"), "# hm_config_t")) << dump;
  EXPECT_TRUE(contains(line_of(dump, "HOLMES_SOCKETS"), "5")) << dump;

  // NULL removes one; release frees the rest (twice is harmless).
  EXPECT_EQ(hm_config_set(&config, "HOLMES_SHM_POLL_US", nullptr), HM_SUCCESS);
  ASSERT_EQ(hm_config_dump(&config, dump.data(), dump.size() + 1, &length), HM_SUCCESS);
  EXPECT_TRUE(contains(std::string(dump.c_str()), "HOLMES_SHM_POLL_US")) << "still listed";
  EXPECT_EQ(hm_config_release(&config), HM_SUCCESS);
  EXPECT_EQ(config.settings, nullptr);
  EXPECT_EQ(hm_config_release(&config), HM_SUCCESS);

  // A config from a header older than hm_config_set has no room for settings.
  hm_config_t old = HM_CONFIG_INITIALIZER;
  old.size = offsetof(hm_config_t, settings);
  EXPECT_EQ(hm_config_set(&old, "HOLMES_SOCKETS", "2"), HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(hm_last_error_message(), "hm_config_t.size")) << hm_last_error_message();
  EXPECT_EQ(hm_config_dump(nullptr, nullptr, 0, &length), HM_SUCCESS) << "the environment only";
}

}  // namespace
}  // namespace holmes

// Tests of src/bootstrap/launch_env.hpp (read_launch_env) and src/core/parse.hpp (parse_int,
// parse_host_port): which launcher variable wins, what the store address comes from, and that
// every malformed value is refused with HM_ERR_INVALID_ARGUMENT naming the variable, so a user
// can tell which of many variables to fix.
#include "bootstrap/launch_env.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/parse.hpp"
#include "core/status.hpp"

namespace holmes {
namespace {

// Whether `text` contains `part` (what an error message must name).
bool contains(const char* text, const std::string& part) {
  return std::string(text).find(part) != std::string::npos;
}

const char* const kRankVars[] = {"HOLMES_RANK", "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK",
                                 "PMI_RANK"};
const char* const kSizeVars[] = {"HOLMES_WORLD_SIZE", "WORLD_SIZE", "SLURM_NTASKS",
                                 "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
const char* const kLocalRankVars[] = {"HOLMES_LOCAL_RANK", "LOCAL_RANK", "SLURM_LOCALID",
                                      "OMPI_COMM_WORLD_LOCAL_RANK"};
const char* const kOtherVars[] = {"HOLMES_STORE",      "MASTER_ADDR",     "MASTER_PORT",
                                  "HOLMES_TOKEN",      "HOLMES_TOPOLOGY", "HOLMES_STORE_SERVE",
                                  "HOLMES_TIMEOUT_MS", "HOLMES_SOCKETS",  "HOLMES_ADDR",
                                  "HOLMES_CHUNK_BYTES"};

// Clears every variable read_launch_env() looks at (the test may run under Slurm or torchrun)
// and puts the original environment back afterwards.
class LaunchEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for_each_var([this](const char* name) {
      const char* value = std::getenv(name);
      saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
      ::unsetenv(name);
    });
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
  static void for_each_var(const std::function<void(const char*)>& f) {
    for (const char* name : kRankVars) f(name);
    for (const char* name : kSizeVars) f(name);
    for (const char* name : kLocalRankVars) f(name);
    for (const char* name : kOtherVars) f(name);
  }
  static void set(const char* name, const std::string& value) {
    ASSERT_EQ(::setenv(name, value.c_str(), 1), 0);
  }

  // read_launch_env() must throw HM_ERR_INVALID_ARGUMENT whose message names `variable`.
  static void expect_invalid(const std::string& variable, const std::string& context) {
    try {
      read_launch_env();
      ADD_FAILURE() << context << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT) << context << ": " << e.what();
      EXPECT_TRUE(contains(e.what(), variable)) << context << ": " << e.what();
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST_F(LaunchEnvTest, EmptyEnvironmentGivesNothing) {
  const LaunchEnv env = read_launch_env();
  EXPECT_FALSE(env.rank.has_value());
  EXPECT_EQ(env.rank_source, "");
  EXPECT_FALSE(env.world_size.has_value());
  EXPECT_EQ(env.world_size_source, "");
  EXPECT_FALSE(env.local_rank.has_value());
  EXPECT_FALSE(env.store.has_value());
  EXPECT_EQ(env.store_source, "");
  EXPECT_FALSE(env.token.has_value());
  EXPECT_FALSE(env.topology.has_value());
  EXPECT_FALSE(env.serve_store.has_value());
  EXPECT_FALSE(env.timeout_ms.has_value());
  EXPECT_FALSE(env.sockets_per_peer.has_value());
  EXPECT_FALSE(env.local_addr.has_value());
  EXPECT_FALSE(env.chunk_bytes.has_value());
}

// Sets every variable of a list to a distinct value, then removes them from the front: each time
// the first one still set must win and be named as the source.
TEST_F(LaunchEnvTest, RankPrecedence) {
  for (std::size_t i = 0; i < std::size(kRankVars); ++i) set(kRankVars[i], std::to_string(10 + i));
  for (std::size_t i = 0; i < std::size(kRankVars); ++i) {
    const LaunchEnv env = read_launch_env();
    ASSERT_TRUE(env.rank.has_value()) << kRankVars[i];
    EXPECT_EQ(*env.rank, static_cast<int>(10 + i));
    EXPECT_EQ(env.rank_source, kRankVars[i]);
    ::unsetenv(kRankVars[i]);
  }
  EXPECT_FALSE(read_launch_env().rank.has_value());
}

TEST_F(LaunchEnvTest, WorldSizePrecedence) {
  for (std::size_t i = 0; i < std::size(kSizeVars); ++i) set(kSizeVars[i], std::to_string(20 + i));
  for (std::size_t i = 0; i < std::size(kSizeVars); ++i) {
    const LaunchEnv env = read_launch_env();
    ASSERT_TRUE(env.world_size.has_value()) << kSizeVars[i];
    EXPECT_EQ(*env.world_size, static_cast<int>(20 + i));
    EXPECT_EQ(env.world_size_source, kSizeVars[i]);
    ::unsetenv(kSizeVars[i]);
  }
  EXPECT_FALSE(read_launch_env().world_size.has_value());
}

TEST_F(LaunchEnvTest, LocalRankPrecedence) {
  for (std::size_t i = 0; i < std::size(kLocalRankVars); ++i) {
    set(kLocalRankVars[i], std::to_string(i));
  }
  for (std::size_t i = 0; i < std::size(kLocalRankVars); ++i) {
    const LaunchEnv env = read_launch_env();
    ASSERT_TRUE(env.local_rank.has_value()) << kLocalRankVars[i];
    EXPECT_EQ(*env.local_rank, static_cast<int>(i));
    ::unsetenv(kLocalRankVars[i]);
  }
  EXPECT_FALSE(read_launch_env().local_rank.has_value());
}

TEST_F(LaunchEnvTest, TypicalLaunchers) {
  // torchrun
  set("RANK", "3");
  set("WORLD_SIZE", "8");
  set("LOCAL_RANK", "1");
  set("MASTER_ADDR", "node0");
  set("MASTER_PORT", "29500");
  LaunchEnv env = read_launch_env();
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.rank_source, "RANK");
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.world_size_source, "WORLD_SIZE");
  EXPECT_EQ(env.local_rank, 1);
  ASSERT_TRUE(env.store.has_value());
  EXPECT_EQ(env.store->host, "node0");
  EXPECT_EQ(env.store->port, 29500);
  EXPECT_EQ(env.store_source, "MASTER_ADDR/MASTER_PORT");
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK"}) ::unsetenv(name);

  // Slurm, with the store still from MASTER_*
  set("SLURM_PROCID", "0");
  set("SLURM_NTASKS", "1");
  set("SLURM_LOCALID", "0");
  env = read_launch_env();
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.rank_source, "SLURM_PROCID");
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.world_size_source, "SLURM_NTASKS");
  EXPECT_EQ(env.local_rank, 0);
}

// An empty variable counts as unset (some launchers export NAME= to clear it).
TEST_F(LaunchEnvTest, EmptyValueFallsThroughToTheNextVariable) {
  set("HOLMES_RANK", "");
  set("RANK", "4");
  set("HOLMES_WORLD_SIZE", "");
  set("OMPI_COMM_WORLD_SIZE", "6");
  const LaunchEnv env = read_launch_env();
  EXPECT_EQ(env.rank, 4);
  EXPECT_EQ(env.rank_source, "RANK");
  EXPECT_EQ(env.world_size, 6);
  EXPECT_EQ(env.world_size_source, "OMPI_COMM_WORLD_SIZE");
}

// A malformed higher-priority variable is an error, not silently skipped for a lower one.
TEST_F(LaunchEnvTest, MalformedRankOrSizeIsRefusedNamingTheVariable) {
  for (const char* name : kRankVars) {
    for (const char* bad : {"abc", "-1", "12x", "1.5", " 1", "0x10", "99999999999999999999"}) {
      set(name, bad);
      set("PMI_RANK", "0");  // a valid fallback must not hide the error
      if (std::string(name) == "PMI_RANK") set("PMI_RANK", bad);
      expect_invalid(name, std::string(name) + "=" + bad);
      ::unsetenv(name);
    }
  }
  ::unsetenv("PMI_RANK");
  for (const char* name : kSizeVars) {
    for (const char* bad : {"0", "-3", "abc", "4k"}) {
      set(name, bad);
      expect_invalid(name, std::string(name) + "=" + bad);
      ::unsetenv(name);
    }
  }
  for (const char* name : kLocalRankVars) {
    set(name, "-1");
    expect_invalid(name, std::string(name) + "=-1");
    ::unsetenv(name);
  }
}

TEST_F(LaunchEnvTest, RankAndSizeBounds) {
  set("HOLMES_RANK", "2147483646");  // INT_MAX - 1: the largest rank of a world of INT_MAX
  set("HOLMES_WORLD_SIZE", "2147483647");
  LaunchEnv env = read_launch_env();
  EXPECT_EQ(env.rank, 2147483646);
  EXPECT_EQ(env.world_size, 2147483647);
  set("HOLMES_RANK", "2147483647");
  expect_invalid("HOLMES_RANK", "rank INT_MAX");
  set("HOLMES_RANK", "0");
  set("HOLMES_WORLD_SIZE", "2147483648");
  expect_invalid("HOLMES_WORLD_SIZE", "size INT_MAX + 1");
}

TEST_F(LaunchEnvTest, HolmesStoreHostPort) {
  set("HOLMES_STORE", "10.1.2.3:29400");
  LaunchEnv env = read_launch_env();
  ASSERT_TRUE(env.store.has_value());
  EXPECT_EQ(env.store->host, "10.1.2.3");
  EXPECT_EQ(env.store->port, 29400);
  EXPECT_EQ(env.store_source, "HOLMES_STORE");

  set("HOLMES_STORE", "[::1]:29500");
  env = read_launch_env();
  ASSERT_TRUE(env.store.has_value());
  EXPECT_EQ(env.store->host, "::1");
  EXPECT_EQ(env.store->port, 29500);
}

TEST_F(LaunchEnvTest, HolmesStoreWinsOverMasterAddr) {
  set("HOLMES_STORE", "store-host:1234");
  set("MASTER_ADDR", "master");
  set("MASTER_PORT", "29500");
  const LaunchEnv env = read_launch_env();
  ASSERT_TRUE(env.store.has_value());
  EXPECT_EQ(env.store->host, "store-host");
  EXPECT_EQ(env.store->port, 1234);
  EXPECT_EQ(env.store_source, "HOLMES_STORE");
}

TEST_F(LaunchEnvTest, OnlyOneOfMasterAddrAndPortIsAnError) {
  set("MASTER_ADDR", "master");
  expect_invalid("MASTER_PORT", "MASTER_ADDR alone");
  ::unsetenv("MASTER_ADDR");
  set("MASTER_PORT", "29500");
  expect_invalid("MASTER_ADDR", "MASTER_PORT alone");
}

TEST_F(LaunchEnvTest, MalformedStoreAddressesAreRefused) {
  for (const char* bad : {"host", "host:", ":29500", "host:abc", "host:70000", "host:0", "host:-1",
                          "host:12x", "[::1]29500", "[::1", "[::1]:", "[::1]:70000"}) {
    set("HOLMES_STORE", bad);
    expect_invalid("HOLMES_STORE", std::string("HOLMES_STORE=") + bad);
  }
  ::unsetenv("HOLMES_STORE");
  set("MASTER_ADDR", "master");
  for (const char* bad : {"abc", "-1", "70000", "12x", "0"}) {
    set("MASTER_PORT", bad);
    expect_invalid("MASTER_PORT", std::string("MASTER_PORT=") + bad);
  }
}

TEST_F(LaunchEnvTest, OtherSettings) {
  set("HOLMES_TOKEN", "s3cret");
  set("HOLMES_TOPOLOGY", "/etc/topo.json");
  set("HOLMES_STORE_SERVE", "0");
  set("HOLMES_TIMEOUT_MS", "1500");
  set("HOLMES_SOCKETS", "16");
  set("HOLMES_ADDR", "192.168.0.5");
  set("HOLMES_CHUNK_BYTES", "4096");
  LaunchEnv env = read_launch_env();
  EXPECT_EQ(env.token, "s3cret");
  EXPECT_EQ(env.topology, "/etc/topo.json");
  EXPECT_EQ(env.serve_store, false);
  EXPECT_EQ(env.timeout_ms, 1500);
  EXPECT_EQ(env.sockets_per_peer, 16);
  EXPECT_EQ(env.local_addr, "192.168.0.5");
  EXPECT_EQ(env.chunk_bytes, 4096);
  set("HOLMES_STORE_SERVE", "1");
  EXPECT_EQ(read_launch_env().serve_store, true);
}

TEST_F(LaunchEnvTest, OtherSettingsOutOfRangeAreRefused) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"HOLMES_STORE_SERVE", "2"},    {"HOLMES_STORE_SERVE", "yes"},
      {"HOLMES_TIMEOUT_MS", "0"},     {"HOLMES_TIMEOUT_MS", "2147483648"},
      {"HOLMES_SOCKETS", "0"},        {"HOLMES_SOCKETS", "17"},
      {"HOLMES_CHUNK_BYTES", "4095"}, {"HOLMES_CHUNK_BYTES", "67108865"},
  };
  for (const auto& [name, value] : cases) {
    set(name, value);
    expect_invalid(name, std::string(name) + "=" + value);
    ::unsetenv(name);
  }
}

void expect_parse_int_fails(const std::string& text, std::int64_t min, std::int64_t max) {
  try {
    parse_int(text, min, max, "the widget count");
    ADD_FAILURE() << "'" << text << "' accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT) << text;
    EXPECT_TRUE(contains(e.what(), "the widget count")) << text << ": " << e.what();
  }
}

TEST(ParseInt, AcceptsWholeNumbersInRange) {
  EXPECT_EQ(parse_int("0", 0, 10, "x"), 0);
  EXPECT_EQ(parse_int("10", 0, 10, "x"), 10);
  EXPECT_EQ(parse_int("-5", -5, 5, "x"), -5);
  EXPECT_EQ(parse_int("007", 0, 10, "x"), 7);
  EXPECT_EQ(parse_int("9223372036854775807", INT64_MIN, INT64_MAX, "x"), INT64_MAX);
  EXPECT_EQ(parse_int("-9223372036854775808", INT64_MIN, INT64_MAX, "x"), INT64_MIN);
}

TEST(ParseInt, RefusesEverythingElse) {
  for (const char* bad : {"", "abc", "12x", "x12", " 1", "1 ", "+1", "1.0", "1e3", "0x10", "--1",
                          "9223372036854775808", "-9223372036854775809"}) {
    expect_parse_int_fails(bad, INT64_MIN, INT64_MAX);
  }
  expect_parse_int_fails("11", 0, 10);
  expect_parse_int_fails("-1", 0, 10);
}

TEST(ParseHostPort, Forms) {
  HostPort hp = parse_host_port("example.com:80", "addr");
  EXPECT_EQ(hp.host, "example.com");
  EXPECT_EQ(hp.port, 80);
  hp = parse_host_port("127.0.0.1:65535", "addr");
  EXPECT_EQ(hp.host, "127.0.0.1");
  EXPECT_EQ(hp.port, 65535);
  hp = parse_host_port("[fe80::1%eth0]:1", "addr");
  EXPECT_EQ(hp.host, "fe80::1%eth0");
  EXPECT_EQ(hp.port, 1);
  hp = parse_host_port("[::1]:29500", "addr");
  EXPECT_EQ(hp.host, "::1");
  EXPECT_EQ(hp.port, 29500);
}

TEST(ParseHostPort, MalformedNamesWhat) {
  for (const char* bad : {"", "host", "host:", ":1", "host:65536", "host:0", "host:1:2x", "[::1]",
                          "[::1]:", "[::1]x1", "[::1"}) {
    try {
      parse_host_port(bad, "THE_VARIABLE");
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT) << bad;
      EXPECT_TRUE(contains(e.what(), "THE_VARIABLE")) << bad << ": " << e.what();
    }
  }
}

// ":29500" is refused because its host is empty; the bracketed form of an empty host should be
// refused for the same reason.
TEST(ParseHostPort, EmptyBracketedHostIsRefused) {
  try {
    const HostPort hp = parse_host_port("[]:29500", "THE_VARIABLE");
    ADD_FAILURE() << "accepted, host '" << hp.host << "' port " << hp.port;
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT) << e.what();
    EXPECT_TRUE(contains(e.what(), "THE_VARIABLE")) << e.what();
  }
}

}  // namespace
}  // namespace holmes

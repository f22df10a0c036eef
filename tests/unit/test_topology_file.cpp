// Topology files: exact parsed values, defaults, every example file, errors with line:column,
// and truncated or damaged files that must fail cleanly.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/status.hpp"
#include "topology/topology_file.hpp"

namespace holmes::topology {
namespace {

namespace fs = std::filesystem;

// The error text of parsing `text` as "t.yaml"; fails the test when it parses.
std::string error_of(const std::string& text) {
  try {
    parse_topology_yaml(text, "t.yaml");
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "parsed:\n" << text;
  return "";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const char* const kTwoIslands = R"(name: small
emulation_scale: 4
link_classes:
  nvlink: {fabric: nvlink, gbit_per_s: 2400, latency_us: 1.5}
  ib-hdr: {fabric: ib, gbit_per_s: 200, latency_us: 2}
  roce-100: {fabric: roce, gbit_per_s: 100, latency_us: 4}
  eth-25: {fabric: ethernet, gbit_per_s: 25, latency_us: 30}
inter_island_link: eth-25
islands:
  - name: ib
    fabric: ib
    link_class: ib-hdr
    hosts:
      - {name: ib-0, gpus: 8, gpu_model: A100, nics: [{name: mlx5_0}, {name: eth0, link_class: eth-25}]}
      - {name_prefix: ib-, first: 1, count: 2, gpus: 4, nics: {count: 3, name_prefix: mlx5_, first: 2}}
  - name: roce
    fabric: roce
    link_class: roce-100
    hosts:
      - {name_prefix: r, count: 2, width: 3, gpus: 2}
)";

TEST(TopologyFile, ParsesEveryField) {
  const Topology t = parse_topology_yaml(kTwoIslands, "small.yaml");
  EXPECT_EQ(t.name, "small");
  EXPECT_EQ(t.emulation_scale, 4.0);
  ASSERT_EQ(t.link_classes.size(), 4u);
  const LinkClass& nvlink = t.link_classes.at("nvlink");
  EXPECT_EQ(nvlink.name, "nvlink");
  EXPECT_EQ(nvlink.fabric, Fabric::kNvlink);
  EXPECT_EQ(nvlink.gbit_per_s, 2400.0);
  EXPECT_EQ(nvlink.latency_us, 1.5);
  EXPECT_EQ(t.link_classes.at("roce-100").fabric, Fabric::kRoce);
  EXPECT_EQ(t.link_classes.at("eth-25").gbit_per_s, 25.0);
  EXPECT_EQ(t.intra_host_link, "nvlink");  // the default: a class named nvlink
  EXPECT_EQ(t.inter_island_link, "eth-25");

  ASSERT_EQ(t.hosts.size(), 5u);
  const std::vector<std::string> names = {"ib-0", "ib-1", "ib-2", "r000", "r001"};
  for (std::size_t i = 0; i < names.size(); ++i) EXPECT_EQ(t.hosts[i].name, names[i]);
  EXPECT_EQ(t.total_gpus(), 8 + 4 + 4 + 2 + 2);

  const Host& first = t.hosts[0];
  EXPECT_EQ(first.island, "ib");
  EXPECT_EQ(first.gpus, 8);
  EXPECT_EQ(first.gpu_model, "A100");
  ASSERT_EQ(first.nics.size(), 2u);
  EXPECT_EQ(first.nics[0].name, "mlx5_0");
  EXPECT_EQ(first.nics[0].link_class, "ib-hdr");  // the island's class
  EXPECT_EQ(first.nics[1].name, "eth0");
  EXPECT_EQ(first.nics[1].link_class, "eth-25");
  EXPECT_EQ(first.nics[0].numa_node, -1);  // the file does not say

  const Host& ranged = t.hosts[2];
  EXPECT_EQ(ranged.gpus, 4);
  EXPECT_EQ(ranged.gpu_model, "");
  ASSERT_EQ(ranged.nics.size(), 3u);
  EXPECT_EQ(ranged.nics[0].name, "mlx5_2");
  EXPECT_EQ(ranged.nics[2].name, "mlx5_4");
  EXPECT_EQ(ranged.nics[2].link_class, "ib-hdr");
  EXPECT_TRUE(t.hosts[3].nics.empty());

  ASSERT_EQ(t.islands.size(), 2u);
  const Island& ib = t.islands.at("ib");
  EXPECT_EQ(ib.fabric, Fabric::kIb);
  EXPECT_EQ(ib.link_class, "ib-hdr");
  EXPECT_EQ(ib.hosts, (std::vector<std::string>{"ib-0", "ib-1", "ib-2"}));
  EXPECT_EQ(t.islands.at("roce").hosts, (std::vector<std::string>{"r000", "r001"}));

  EXPECT_EQ(t.link_between(t.hosts[0], t.hosts[1]).name, "ib-hdr");
  EXPECT_EQ(t.link_between(t.hosts[0], t.hosts[3]).name, "eth-25");
  EXPECT_EQ(t.host_bandwidth(t.hosts[2], "ib-hdr"), 3 * 200e9 / 8);
}

TEST(TopologyFile, DefaultsForOneRdmaIslandAndEthernetIslands) {
  const Topology single = parse_topology_yaml(R"(
link_classes:
  shm: {fabric: nvlink, gbit_per_s: 100, latency_us: 1}
  ib: {fabric: ib, gbit_per_s: 100, latency_us: 2}
intra_host_link: shm
islands:
  - {name: only, fabric: ib, link_class: ib, hosts: [{name: a, gpus: 1}]}
)",
                                              "single");
  EXPECT_EQ(single.name, "");
  EXPECT_EQ(single.emulation_scale, 1.0);
  EXPECT_EQ(single.intra_host_link, "shm");
  EXPECT_EQ(single.inter_island_link, "ib");  // no traffic crosses islands

  const Topology eth = parse_topology_yaml(R"(
link_classes:
  nvlink: {fabric: nvlink, gbit_per_s: 100, latency_us: 1}
  eth: {fabric: ethernet, gbit_per_s: 10, latency_us: 50}
inter_island_link: eth
islands:
  - {name: lan, fabric: ethernet, hosts: [{name: a, gpus: 2, nics: [{name: eno1}]}]}
)",
                                           "eth");
  EXPECT_EQ(eth.islands.at("lan").fabric, Fabric::kEthernet);
  EXPECT_EQ(eth.islands.at("lan").link_class, "eth");
  EXPECT_EQ(eth.hosts[0].nics[0].link_class, "eth");
}

// Loads every .yaml file of `dir`: each must validate and carry its file's name; `check` then
// sees it with that name. Returns how many files there were.
template <typename Check>
std::size_t for_each_topology_file(const std::string& dir, Check&& check) {
  std::size_t seen = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    ++seen;
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    const Topology t = load_topology_file(entry.path().string());
    EXPECT_NO_THROW(t.validate());
    EXPECT_EQ(t.name + ".yaml", name);
    check(name, t);
  }
  return seen;
}

// Every example file parses, validates and describes the cluster its comment announces.
TEST(TopologyFile, EveryExampleFileParses) {
  struct Expected {
    std::size_t hosts;
    int gpus;
    std::size_t islands;
  };
  const std::map<std::string, Expected> expected = {
      {"paper-gpt-7.5b.yaml", {8, 64, 2}},      {"paper-gpt-39.1b.yaml", {4, 32, 2}},
      {"three-fabrics.yaml", {12, 96, 3}},      {"uneven-islands.yaml", {8, 64, 2}},
      {"emulated-two-islands.yaml", {4, 8, 2}}, {"large-10k.yaml", {1250, 10000, 5}}};
  const std::size_t seen = for_each_topology_file(
      HOLMES_EXAMPLE_TOPOLOGIES, [&](const std::string& name, const Topology& t) {
        auto it = expected.find(name);
        ASSERT_NE(it, expected.end()) << "an example without expectations here";
        EXPECT_EQ(t.hosts.size(), it->second.hosts);
        EXPECT_EQ(t.total_gpus(), it->second.gpus);
        EXPECT_EQ(t.islands.size(), it->second.islands);
      });
  EXPECT_EQ(seen, expected.size());
}

// The mixes bench/compare.sh and the fault tests emulate: each parses, names itself after its
// file, scales its rates for the emulation and has the hosts and islands its comment says.
TEST(TopologyFile, EveryEmulatedMixParses) {
  struct Expected {
    std::size_t hosts;
    std::size_t islands;
  };
  const std::map<std::string, Expected> expected = {
      {"pure-ethernet.yaml", {4, 1}}, {"pure-ib.yaml", {2, 1}},
      {"pure-roce.yaml", {2, 1}},     {"two-islands.yaml", {4, 2}},
      {"three-islands.yaml", {4, 3}}, {"three-fabrics.yaml", {6, 3}}};
  const std::size_t seen = for_each_topology_file(
      HOLMES_EMULATED_MIXES, [&](const std::string& name, const Topology& t) {
        EXPECT_GT(t.emulation_scale, 1.0);
        auto it = expected.find(name);
        ASSERT_NE(it, expected.end()) << "a mix without expectations here";
        EXPECT_EQ(t.hosts.size(), it->second.hosts);
        EXPECT_EQ(t.islands.size(), it->second.islands);
      });
  EXPECT_EQ(seen, expected.size());
}

TEST(TopologyFile, PaperSetupHasItsNics) {
  const Topology t =
      load_topology_file(std::string(HOLMES_EXAMPLE_TOPOLOGIES) + "/paper-gpt-7.5b.yaml");
  // ib-0 is spelled out and ib-1 comes from a range: both forms give the same NICs.
  const Host* spelled = t.find_host("ib-0");
  const Host* ranged = t.find_host("ib-3");
  ASSERT_NE(spelled, nullptr);
  ASSERT_NE(ranged, nullptr);
  ASSERT_EQ(spelled->nics.size(), 4u);
  ASSERT_EQ(ranged->nics.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(spelled->nics[i].name, "mlx5_" + std::to_string(i));
    EXPECT_EQ(ranged->nics[i].name, spelled->nics[i].name);
    EXPECT_EQ(ranged->nics[i].link_class, "ib-hdr");
  }
  EXPECT_EQ(t.host_bandwidth(*t.find_host("roce-3"), "roce-100"), 2 * 100e9 / 8);
  EXPECT_EQ(t.hosts[4].name, "roce-0");
  EXPECT_EQ(t.emulation_scale, 1.0);
  const Topology emulated =
      load_topology_file(std::string(HOLMES_EXAMPLE_TOPOLOGIES) + "/emulated-two-islands.yaml");
  EXPECT_EQ(emulated.emulation_scale, 100.0);
  EXPECT_EQ(emulated.intra_host_link, "shm");
}

TEST(TopologyFile, TenThousandGpusParseFast) {
  const std::string text = read_file(std::string(HOLMES_EXAMPLE_TOPOLOGIES) + "/large-10k.yaml");
  const auto start = std::chrono::steady_clock::now();
  const Topology t = parse_topology_yaml(text, "large-10k.yaml");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(t.total_gpus(), 10000);
  EXPECT_EQ(t.hosts.front().name, "ib-a-0000");
  EXPECT_EQ(t.hosts.back().name, "eth-0099");
  EXPECT_LT(seconds, 1.0);
  RecordProperty("parse_seconds", std::to_string(seconds));
}

// ---- errors: each names the place and the problem ----------------------------------------------

const char* const kHeader = R"(link_classes:
  nvlink: {fabric: nvlink, gbit_per_s: 2400, latency_us: 1}
  ib: {fabric: ib, gbit_per_s: 200, latency_us: 2}
  eth: {fabric: ethernet, gbit_per_s: 25, latency_us: 30}
inter_island_link: eth
islands:
)";  // six lines: the first island is line 7

// "t.yaml:L:C" where C is the 1-based column of the `nth` occurrence of `token` in `line`.
std::string at(int line_number, const std::string& line, const std::string& token, int nth = 0) {
  std::size_t column = line.find(token);
  for (int i = 0; i < nth; ++i) column = line.find(token, column + 1);
  EXPECT_NE(column, std::string::npos) << token;
  return "t.yaml:" + std::to_string(line_number) + ":" + std::to_string(column + 1);
}

// The error of kHeader followed by one island line (line 7).
std::string island_error(const std::string& island) { return error_of(kHeader + island + "\n"); }

TEST(TopologyFileErrors, TypoInAKeyIsNamedWithASuggestion) {
  const std::string link = "  ib: {fabric: ib, gbit_per_sec: 200, latency_us: 2}";
  EXPECT_EQ(error_of("link_classes:\n" + link + "\n"),
            at(2, link, "gbit_per_sec") +
                ": link class 'ib': unknown key 'gbit_per_sec' (did you mean 'gbit_per_s'?); "
                "expected one of: fabric, gbit_per_s, latency_us");
  const std::string island =
      "  - {name: a, fabric: ib, link_class: ib, hosts: [{name: h, gpu: 8}]}";
  EXPECT_EQ(island_error(island),
            at(7, island, "gpu:") +
                ": island 'a': a host: unknown key 'gpu' (did you mean 'gpus'?); expected one of: "
                "name, name_prefix, first, count, width, gpus, gpu_model, nics");
  EXPECT_EQ(error_of("link_class:\n"),
            "t.yaml:1:1: topology: unknown key 'link_class' (did you mean 'link_classes'?); "
            "expected one of: name, emulation_scale, link_classes, intra_host_link, "
            "inter_island_link, islands");
}

TEST(TopologyFileErrors, MalformedYamlHasLineAndColumn) {
  // The flow map never closes: yaml-cpp notices at the end of the text, line 8.
  const std::string unclosed = island_error("  - {name: a, fabric: ib");
  EXPECT_EQ(unclosed.rfind("t.yaml:8:1: invalid YAML: ", 0), 0u) << unclosed;
  // A tab cannot indent YAML: the key is read as a scalar and its ':' is refused.
  const std::string tab = "\tnvlink: {}";
  EXPECT_EQ(error_of("link_classes:\n" + tab + "\n"),
            at(2, tab, ":") + ": invalid YAML: illegal map value");
}

TEST(TopologyFileErrors, WrongTypes) {
  std::string island = "  - {name: a, fabric: ib, link_class: ib, hosts: [{name: h, gpus: eight}]}";
  EXPECT_EQ(island_error(island),
            at(7, island, "eight") + ": host 'h': gpus: expected a whole number, got 'eight'");
  island = "  - {name: a, fabric: ib, link_class: ib, hosts: [{name: h, gpus: 2.5}]}";
  EXPECT_EQ(island_error(island),
            at(7, island, "2.5") + ": host 'h': gpus: expected a whole number, got '2.5'");
  island = "  - {name: a, fabric: ib, link_class: ib, hosts: h}";
  EXPECT_EQ(island_error(island), at(7, island, "h}") +
                                      ": island 'a': hosts: expected a non-empty list of hosts, "
                                      "got 'h'");
  EXPECT_EQ(error_of("link_classes: [nvlink]\n"),
            "t.yaml:1:15: link_classes: expected a map of link classes, got a list");
  EXPECT_EQ(error_of("- a\n- b\n"),
            "t.yaml:1:1: expected a map with link_classes and islands at the top, got a list");
  const std::string link = "  ib: {fabric: ib, gbit_per_s: fast, latency_us: 2}";
  EXPECT_EQ(error_of("link_classes:\n" + link + "\n"),
            at(2, link, "fast") + ": link class 'ib': gbit_per_s: expected a number, got 'fast'");
}

TEST(TopologyFileErrors, MissingKeys) {
  EXPECT_EQ(error_of("name: x\n"), "t.yaml:1:1: topology: missing key 'link_classes'");
  const std::string header(kHeader);
  EXPECT_EQ(error_of(header.substr(0, header.size() - std::string("islands:\n").size())),
            "t.yaml:1:1: topology: missing key 'islands'");
  const std::string link = "  ib: {fabric: ib, latency_us: 2}";
  EXPECT_EQ(error_of("link_classes:\n" + link + "\n"),
            at(2, link, "{") + ": link class 'ib': missing key 'gbit_per_s'");
  std::string island = "  - {name: a, fabric: ib, hosts: [{name: h, gpus: 1}]}";
  EXPECT_EQ(island_error(island),
            at(7, island, "{") +
                ": island 'a': missing key 'link_class' (required unless the fabric is ethernet)");
  island = "  - {name: a, fabric: ib, link_class: ib, hosts: [{name_prefix: h, gpus: 1}]}";
  EXPECT_EQ(island_error(island),
            at(7, island, "{", 1) +
                ": island 'a': a host: missing key 'count' (how many hosts the range has)");
  island = "  - {name: a, fabric: ethernet, hosts: [{name: h, gpus: 1}]}";
  EXPECT_EQ(error_of("link_classes:\n  nvlink: {fabric: nvlink, gbit_per_s: 1, latency_us: 1}\n"
                     "islands:\n" +
                     island + "\n"),
            at(4, island, "ethernet") +
                ": island 'a': an ethernet island needs 'link_class' or a top-level "
                "'inter_island_link'");
  EXPECT_EQ(
      error_of(
          "link_classes:\n  ib: {fabric: ib, gbit_per_s: 1, latency_us: 2}\n"
          "islands:\n  - {name: a, fabric: ib, link_class: ib, hosts: [{name: h, gpus: 1}]}\n"),
      "t.yaml:1:1: topology: missing key 'intra_host_link' (no link class is named 'nvlink')");
  const std::string two =
      "link_classes:\n  nvlink: {fabric: nvlink, gbit_per_s: 1, latency_us: 1}\n"
      "  ib: {fabric: ib, gbit_per_s: 1, latency_us: 2}\nislands:\n"
      "  - {name: a, fabric: ib, link_class: ib, hosts: [{name: h, gpus: 1}]}\n"
      "  - {name: b, fabric: ib, link_class: ib, hosts: [{name: g, gpus: 1}]}\n";
  EXPECT_EQ(error_of(two),
            "t.yaml:1:1: topology: missing key 'inter_island_link' (required with more than one "
            "island)");
  EXPECT_EQ(error_of(""), "t.yaml:1:1: the file is empty");
}

TEST(TopologyFileErrors, BadRates) {
  // {key, value, message}: the error points at the value.
  for (const auto& [key, value, expected] :
       {std::tuple{"gbit_per_s", "0", "gbit_per_s must be positive, got 0"},
        std::tuple{"gbit_per_s", "-200", "gbit_per_s must be positive, got -200"},
        std::tuple{"gbit_per_s", ".nan", "gbit_per_s: expected a number, got '.nan'"},
        std::tuple{"gbit_per_s", "1e999", "gbit_per_s: expected a number, got '1e999'"},
        std::tuple{"latency_us", "-1", "latency_us must not be negative, got -1"}}) {
    const std::string rate = std::string(key) == "gbit_per_s" ? value : "10";
    const std::string latency = std::string(key) == "latency_us" ? value : "2";
    const std::string link =
        "  ib: {fabric: ib, gbit_per_s: " + rate + ", latency_us: " + latency + "}";
    EXPECT_EQ(
        error_of("link_classes:\n" + link + "\n"),
        "t.yaml:2:" + std::to_string(link.find(std::string(key) + ": ") + std::strlen(key) + 3) +
            ": link class 'ib': " + expected);
  }
  EXPECT_EQ(error_of("emulation_scale: 0.5\n"),
            "t.yaml:1:18: emulation_scale must be at least 1, got 0.5");
}

TEST(TopologyFileErrors, DuplicatesAreNamed) {
  const std::string first =
      "  - {name: a, fabric: ib, link_class: ib, hosts: [{name: h, gpus: 1}]}";
  const std::string second =
      "  - {name: b, fabric: ib, link_class: ib, hosts: [{name: h, gpus: 1}]}";
  EXPECT_EQ(error_of(kHeader + first + "\n" + second + "\n"),
            at(8, second, "{name: h") + ": host 'h' is declared twice (first at line 7)");
  // A range that runs into a host declared by name.
  EXPECT_EQ(error_of(std::string(kHeader) +
                     "  - name: a\n    fabric: ib\n    link_class: ib\n    hosts:\n"
                     "      - {name: n2, gpus: 1}\n"
                     "      - {name_prefix: n, first: 1, count: 3, gpus: 1}\n"),
            "t.yaml:12:9: host 'n2' is declared twice (first at line 11)");
  const std::string again =
      "  - {name: a, fabric: ib, link_class: ib, hosts: [{name: g, gpus: 1}]}";
  EXPECT_EQ(error_of(kHeader + first + "\n" + again + "\n"),
            at(8, again, "a,") + ": island 'a' is declared twice");
  EXPECT_EQ(error_of("link_classes:\n  ib: {fabric: ib, gbit_per_s: 1, latency_us: 2}\n"
                     "  ib: {fabric: ib, gbit_per_s: 2, latency_us: 2}\n"),
            "t.yaml:3:3: link class 'ib' is declared twice");
  EXPECT_EQ(error_of("name: a\nname: b\n"), "t.yaml:2:1: topology: key 'name' is given twice");
  const std::string nics =
      "  - {name: a, fabric: ib, link_class: ib, hosts: [{name: h, gpus: 1, nics: [{name: m}, "
      "{name: m}]}]}";
  EXPECT_EQ(island_error(nics),
            at(7, nics, "{name: m}", 1) + ": host 'h': NIC 'm' is declared twice");
}

TEST(TopologyFileErrors, UnknownNamesAreNamed) {
  std::string island = "  - {name: a, fabric: ib, link_class: ib-hdr, hosts: [{name: h, gpus: 1}]}";
  EXPECT_EQ(island_error(island), at(7, island, "ib-hdr") +
                                      ": island 'a': link_class: unknown link class 'ib-hdr'; "
                                      "declared: eth, ib, nvlink");
  const std::string intra = "intra_host_link: nvlnk";
  EXPECT_EQ(error_of(kHeader +
                     std::string("  - {name: a, fabric: ib, link_class: ib, hosts: "
                                 "[{name: h, gpus: 1}]}\n") +
                     intra + "\n"),
            at(8, intra, "nvlnk") +
                ": intra_host_link: unknown link class 'nvlnk' (did you mean "
                "'nvlink'?); declared: eth, ib, nvlink");
  island = "  - {name: a, fabric: infiniband, link_class: ib, hosts: [{name: h, gpus: 1}]}";
  EXPECT_EQ(island_error(island), at(7, island, "infiniband") +
                                      ": island 'a': fabric: unknown fabric 'infiniband'; "
                                      "expected ib, roce, ethernet");
  island = "  - {name: a, fabric: nvlink, link_class: ib, hosts: [{name: h, gpus: 1}]}";
  EXPECT_EQ(island_error(island), at(7, island, "nvlink") +
                                      ": island 'a': fabric: unknown fabric 'nvlink'; expected "
                                      "ib, roce, ethernet");
  island =
      "  - {name: a, fabric: ib, link_class: ib, hosts: [{name: h, gpus: 1, nics: [{name: m, "
      "link_class: roce}]}]}";
  EXPECT_EQ(island_error(island), at(7, island, "roce") +
                                      ": host 'h': NIC 'm': link_class: unknown link class "
                                      "'roce'; declared: eth, ib, nvlink");
  EXPECT_EQ(error_of("link_classes:\n  nvlink: {fabric: nvlink, gbit_per_s: 1, latency_us: 1}\n"
                     "inter_island_link: nvlink\n"),
            "t.yaml:3:20: inter_island_link: link class 'nvlink' has fabric nvlink; islands "
            "are joined by ethernet");
  island = "  - {name: a, fabric: roce, link_class: ib, hosts: [{name: h, gpus: 1}]}";
  EXPECT_EQ(island_error(island),
            at(7, island, "ib,") +
                ": island 'a': link class 'ib' has fabric ib but the island's fabric is roce");
}

TEST(TopologyFileErrors, RangesAreChecked) {
  std::string island =
      "  - {name: a, fabric: ib, link_class: ib, hosts: [{name_prefix: h, count: 0, gpus: 1}]}";
  EXPECT_EQ(island_error(island),
            at(7, island, "0,") +
                ": island 'a': hosts 'h*': count: must be between 1 and 1000000, got 0");
  island = "  - {name: a, fabric: ib, link_class: ib, hosts: [{name: h, count: 2, gpus: 1}]}";
  EXPECT_EQ(island_error(island), at(7, island, "2,") +
                                      ": island 'a': 'count' belongs to a host range "
                                      "(name_prefix), not to a named host");
  island = "  - {name: a, fabric: ib, link_class: ib, hosts: [{name: h, name_prefix: g, gpus: 1}]}";
  EXPECT_EQ(island_error(island),
            at(7, island, "{name: h") +
                ": island 'a': a host needs either 'name' or 'name_prefix' with 'count'");
  island = "  - {name: a, fabric: ib, link_class: ib, hosts: [{name: h, gpus: -1}]}";
  EXPECT_EQ(island_error(island),
            at(7, island, "-1") + ": host 'h': gpus: must be between 0 and 4096, got -1");
}

TEST(TopologyFileErrors, MissingFileIsNamed) {
  try {
    load_topology_file("/nonexistent/holmes/topology.yaml");
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "/nonexistent/holmes/topology.yaml: cannot open the topology file");
  }
}

// Parses `text`; a failure must be a holmes::Error naming the source with a position.
void parse_or_clean_error(const std::string& text) {
  try {
    parse_topology_yaml(text, "fuzz.yaml");
  } catch (const Error& e) {
    ASSERT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(std::string(e.what()).rfind("fuzz.yaml:", 0), 0u) << e.what();
  }
  // Anything else escapes and fails the test.
}

TEST(TopologyFileFuzz, EveryTruncationFailsCleanly) {
  for (const char* file : {"paper-gpt-7.5b.yaml", "three-fabrics.yaml"}) {
    const std::string text = read_file(std::string(HOLMES_EXAMPLE_TOPOLOGIES) + "/" + file);
    ASSERT_GT(text.size(), 500u);
    for (std::size_t length = 0; length <= text.size(); ++length) {
      SCOPED_TRACE(length);
      parse_or_clean_error(text.substr(0, length));
    }
  }
}

TEST(TopologyFileFuzz, DamagedBytesFailCleanly) {
  const std::string text =
      read_file(std::string(HOLMES_EXAMPLE_TOPOLOGIES) + "/paper-gpt-39.1b.yaml");
  for (std::size_t at = 0; at < text.size(); ++at) {
    for (char replacement : {'{', ':', '-', '\t', '"', '&', '\0'}) {
      std::string damaged = text;
      damaged[at] = replacement;
      SCOPED_TRACE(at);
      parse_or_clean_error(damaged);
    }
  }
}

}  // namespace
}  // namespace holmes::topology

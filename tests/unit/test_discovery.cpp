// Discovery on fake sysfs/procfs trees and on this machine, and its merge with a topology file
// (conflicts, environment overrides, locality from the file).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/settings.hpp"
#include "core/status.hpp"
#include "topology/discovery.hpp"
#include "topology/locality.hpp"
#include "topology/merge.hpp"
#include "topology/topology_file.hpp"

namespace holmes::topology {
namespace {

namespace fs = std::filesystem;

bool has_note(const Discovery& d, const std::string& text) {
  return std::any_of(d.notes.begin(), d.notes.end(),
                     [&](const std::string& note) { return note == text; });
}

class DiscoveryFakeTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("holmes-discovery-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::create_directories(sys());
    fs::create_directories(proc());
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path sys() const { return root_ / "sys"; }
  fs::path proc() const { return root_ / "proc"; }

  static void write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text << "\n";
  }
  // A PCI function under sys/devices with its NUMA node; returns its path.
  fs::path pci(const std::string& address, int numa_node) {
    const fs::path dir = sys() / "devices" / "pci0000:00" / address;
    write(dir / "numa_node", std::to_string(numa_node));
    return dir;
  }
  // class/<cls>/<name>/device -> `target`, relative as the kernel makes it.
  void link_device(const std::string& cls, const std::string& name, const fs::path& target) {
    const fs::path dir = sys() / "class" / cls / name;
    fs::create_directories(dir);
    fs::create_symlink(fs::relative(target, dir), dir / "device");
  }
  void rdma_port(const std::string& device, int port, const std::string& state,
                 const std::string& layer, const std::string& rate, const std::string& gid) {
    const fs::path dir = sys() / "class" / "infiniband" / device / "ports" / std::to_string(port);
    write(dir / "state", state);
    write(dir / "link_layer", layer);
    write(dir / "rate", rate);
    write(dir / "gids" / "0", gid);
  }
  void net(const std::string& name, const std::string& speed, int mtu, const std::string& state) {
    const fs::path dir = sys() / "class" / "net" / name;
    if (!speed.empty()) write(dir / "speed", speed);
    write(dir / "mtu", std::to_string(mtu));
    write(dir / "operstate", state);
  }
  void gpu(const std::string& bus, const std::string& model) {
    write(proc() / "driver" / "nvidia" / "gpus" / bus / "information",
          "Model: \t\t " + model + "\nIRQ:   \t\t 42");
  }
  DiscoveryOptions options() const {
    DiscoveryOptions o;
    o.sysfs_root = sys().string();
    o.procfs_root = proc().string();
    o.host_name = "node-a";
    return o;
  }

  // An IB port, a RoCE port, a down port, an ethernet NIC, a veth with speed -1, lo, and two
  // GPUs.
  void build_cluster_node() {
    rdma_port("mlx5_0", 1, "4: ACTIVE", "InfiniBand", "200 Gb/sec (4X HDR)",
              "fe80:0000:0000:0001:0002:c903:00a0:1234");
    link_device("infiniband", "mlx5_0", pci("0000:3b:00.0", 0));
    rdma_port("mlx5_1", 1, "4: ACTIVE", "Ethernet", "100 Gb/sec (4X EDR)",
              "fe80:0000:0000:0000:0a00:0002:0000:0001");
    link_device("infiniband", "mlx5_1", pci("0000:86:00.0", 1));
    rdma_port("mlx5_2", 1, "1: DOWN", "InfiniBand", "10 Gb/sec (4X SDR)",
              "fe80:0000:0000:0000:0000:0000:0000:0000");
    net("eth0", "25000", 9000, "up");
    link_device("net", "eth0", pci("0000:5e:00.0", 1));
    net("veth1", "-1", 1500, "up");
    net("lo", "", 65536, "unknown");
    gpu("0000:07:00.0", "NVIDIA A100-SXM4-80GB");
    gpu("0000:0f:00.0", "NVIDIA A100-SXM4-80GB");
  }

  fs::path root_;
  static inline int counter_ = 0;
};

TEST_F(DiscoveryFakeTree, ClusterNodeGivesExactResults) {
  build_cluster_node();
  const Discovery d = discover_host(options());
  EXPECT_EQ(d.host.name, "node-a");
  EXPECT_EQ(d.host.gpus, 2);
  EXPECT_EQ(d.host.gpu_model, "A100-SXM4-80GB");
  EXPECT_EQ(d.fabric, Fabric::kIb);
  EXPECT_EQ(d.subnet, "fe80:0000:0000:0001");
  EXPECT_EQ(d.host.island, "ib:fe80:0000:0000:0001");

  ASSERT_EQ(d.host.nics.size(), 5u);
  const Nic& ib = d.host.nics[0];
  EXPECT_EQ(ib.name, "mlx5_0");
  EXPECT_EQ(ib.link_class, "discovered-ib-200");
  EXPECT_EQ(ib.state, "ACTIVE");
  EXPECT_EQ(ib.subnet, "fe80:0000:0000:0001");
  EXPECT_EQ(ib.pci_bus, "0000:3b:00.0");
  EXPECT_EQ(ib.numa_node, 0);
  const Nic& roce = d.host.nics[1];
  EXPECT_EQ(roce.name, "mlx5_1");
  EXPECT_EQ(roce.link_class, "discovered-roce-100");
  EXPECT_EQ(roce.pci_bus, "0000:86:00.0");
  EXPECT_EQ(roce.numa_node, 1);
  const Nic& down = d.host.nics[2];
  EXPECT_EQ(down.name, "mlx5_2");
  EXPECT_EQ(down.state, "DOWN");
  EXPECT_EQ(down.link_class, "discovered-ib-10");
  EXPECT_EQ(down.pci_bus, "");
  EXPECT_EQ(down.numa_node, -1);
  const Nic& eth = d.host.nics[3];
  EXPECT_EQ(eth.name, "eth0");
  EXPECT_EQ(eth.link_class, "discovered-ethernet-25");
  EXPECT_EQ(eth.state, "up");
  EXPECT_EQ(eth.mtu, 9000);
  EXPECT_EQ(eth.pci_bus, "0000:5e:00.0");
  EXPECT_EQ(eth.numa_node, 1);
  const Nic& veth = d.host.nics[4];
  EXPECT_EQ(veth.name, "veth1");
  EXPECT_EQ(veth.link_class, "discovered-ethernet-unknown");
  EXPECT_EQ(veth.mtu, 1500);
  EXPECT_EQ(veth.pci_bus, "");

  ASSERT_EQ(d.link_classes.size(), 5u);
  const LinkClass& ib_class = d.link_classes.at("discovered-ib-200");
  EXPECT_EQ(ib_class.fabric, Fabric::kIb);
  EXPECT_EQ(ib_class.gbit_per_s, 200.0);
  EXPECT_EQ(ib_class.latency_us, 2.0);
  EXPECT_EQ(d.link_classes.at("discovered-roce-100").fabric, Fabric::kRoce);
  EXPECT_EQ(d.link_classes.at("discovered-ethernet-25").gbit_per_s, 25.0);
  EXPECT_EQ(d.link_classes.at("discovered-ethernet-unknown").gbit_per_s, 0.0);

  EXPECT_TRUE(has_note(d, "mlx5_2 port 1 is DOWN: not used"));
  EXPECT_TRUE(has_note(d, "veth1: speed not reported (virtual NIC?): rate unknown"));
  EXPECT_EQ(d.notes.size(), 2u);
  EXPECT_TRUE(d.addresses.empty());  // getifaddrs only for the real /sys

  // Locality's fabric hint is the same implementation.
  const DiscoveredFabric hint = discover_fabric(sys().string());
  EXPECT_EQ(hint.fabric, "ib");
  EXPECT_EQ(hint.subnet, "fe80:0000:0000:0001");
}

TEST_F(DiscoveryFakeTree, NoRdmaMeansEthernetAndSaysSo) {
  net("eth0", "10000", 1500, "up");
  const Discovery d = discover_host(options());
  EXPECT_EQ(d.fabric, Fabric::kEthernet);
  EXPECT_EQ(d.host.island, "node-a");
  EXPECT_EQ(d.host.gpus, 0);
  ASSERT_EQ(d.host.nics.size(), 1u);
  EXPECT_EQ(d.host.nics[0].link_class, "discovered-ethernet-10");
  EXPECT_TRUE(has_note(d, "no RDMA device: the kernel has no " +
                              (sys() / "class" / "infiniband").string() + "; only ethernet NICs"));
  EXPECT_TRUE(has_note(d, "no NVIDIA GPU: " + (proc() / "driver" / "nvidia" / "gpus").string() +
                              " is absent or empty"));
}

TEST_F(DiscoveryFakeTree, OnlyDownRdmaPortsMeansEthernet) {
  rdma_port("mlx5_0", 1, "1: DOWN", "InfiniBand", "200 Gb/sec (4X HDR)", "fe80::1");
  const Discovery d = discover_host(options());
  EXPECT_EQ(d.fabric, Fabric::kEthernet);
  EXPECT_TRUE(has_note(d, "no active RDMA port: only ethernet NICs carry traffic"));
  EXPECT_EQ(discover_fabric(sys().string()).fabric, "ethernet");
}

TEST_F(DiscoveryFakeTree, RoceOnlyAndMultiPortDevices) {
  rdma_port("mlx5_0", 1, "4: ACTIVE", "Ethernet", "25 Gb/sec (1X EDR)", "fe80::a");
  rdma_port("mlx5_0", 2, "4: ACTIVE", "Ethernet", "25 Gb/sec (1X EDR)", "fe80::b");
  rdma_port("mlx5_0", 10, "1: DOWN", "Ethernet", "", "");
  const Discovery d = discover_host(options());
  EXPECT_EQ(d.fabric, Fabric::kRoce);
  EXPECT_EQ(d.subnet, "fe80::a");
  ASSERT_EQ(d.host.nics.size(), 3u);
  EXPECT_EQ(d.host.nics[0].name, "mlx5_0:1");
  EXPECT_EQ(d.host.nics[1].name, "mlx5_0:2");
  EXPECT_EQ(d.host.nics[2].name, "mlx5_0:10");  // by number, not text order
  EXPECT_EQ(d.host.nics[2].link_class, "discovered-roce-unknown");
}

TEST(DiscoveryRate, ParsesSysfsRates) {
  EXPECT_EQ(parse_rdma_rate("200 Gb/sec (4X HDR)"), 200.0);
  EXPECT_EQ(parse_rdma_rate("2.5 Gb/sec (1X SDR)"), 2.5);
  EXPECT_EQ(parse_rdma_rate("400 Gb/sec (4X NDR)"), 400.0);
  EXPECT_EQ(parse_rdma_rate(""), 0.0);
  EXPECT_EQ(parse_rdma_rate("fast"), 0.0);
}

// This machine: no RDMA device, at least one ethernet NIC other than lo.
TEST(DiscoveryReal, FindsAnEthernetNic) {
  DiscoveryOptions options;
  options.host_name = "this-host";
  const Discovery d = discover_host(options);
  EXPECT_EQ(d.host.name, "this-host");
  int ethernet = 0;
  for (const Nic& nic : d.host.nics) {
    EXPECT_NE(nic.name, "lo");
    if (d.link_classes.at(nic.link_class).fabric == Fabric::kEthernet) ++ethernet;
  }
  EXPECT_GE(ethernet, 1);
  if (!fs::exists("/sys/class/infiniband")) {
    EXPECT_EQ(d.fabric, Fabric::kEthernet);
    EXPECT_TRUE(has_note(d,
                         "no RDMA device: the kernel has no /sys/class/infiniband; only "
                         "ethernet NICs"));
  }
  if (fs::exists("/sys/class/net/eth0")) {
    const auto eth0 = std::find_if(d.host.nics.begin(), d.host.nics.end(),
                                   [](const Nic& nic) { return nic.name == "eth0"; });
    ASSERT_NE(eth0, d.host.nics.end());
    std::ifstream mtu("/sys/class/net/eth0/mtu");
    int expected = 0;
    mtu >> expected;
    EXPECT_EQ(eth0->mtu, expected);
  }
}

// ---- merge -----------------------------------------------------------------------------------

const char* const kFile = R"(
link_classes:
  nvlink: {fabric: nvlink, gbit_per_s: 2400, latency_us: 2}
  ib-hdr: {fabric: ib, gbit_per_s: 200, latency_us: 2}
  roce-100: {fabric: roce, gbit_per_s: 100, latency_us: 4}
  eth-25: {fabric: ethernet, gbit_per_s: 25, latency_us: 30}
inter_island_link: eth-25
islands:
  - name: ib
    fabric: ib
    link_class: ib-hdr
    hosts:
      - {name_prefix: ib-, count: 2, gpus: 8, gpu_model: A100, nics: {count: 2, name_prefix: mlx5_}}
  - name: roce
    fabric: roce
    link_class: roce-100
    hosts:
      - {name: roce-0, gpus: 8, nics: [{name: mlx5_0}]}
)";

// What host `name` would discover: 4 GPUs, mlx5_0 at 100 Gbit/s (file: 200), no mlx5_1, an
// extra active mlx5_2, and eth0.
Discovery discovered_ib_host(const std::string& name) {
  Discovery d;
  d.host.name = name;
  d.host.gpus = 4;
  d.host.gpu_model = "A100-SXM4-40GB";
  d.fabric = Fabric::kIb;
  d.link_classes["discovered-ib-100"] = {"discovered-ib-100", Fabric::kIb, 100, 2};
  d.link_classes["discovered-ethernet-25"] = {"discovered-ethernet-25", Fabric::kEthernet, 25, 30};
  Nic m0;
  m0.name = "mlx5_0";
  m0.link_class = "discovered-ib-100";
  m0.state = "ACTIVE";
  m0.pci_bus = "0000:3b:00.0";
  m0.numa_node = 1;
  m0.subnet = "fe80:0000:0000:0001";
  Nic m2 = m0;
  m2.name = "mlx5_2";
  Nic eth;
  eth.name = "eth0";
  eth.link_class = "discovered-ethernet-25";
  eth.state = "up";
  d.host.nics = {m0, m2, eth};
  return d;
}

TEST(Merge, ConflictsAreNamedAndTheFileWins) {
  const Topology file = parse_topology_yaml(kFile, "t.yaml");
  const MergeResult m = merge_discovery(file, discovered_ib_host("ib-1"));
  EXPECT_EQ(m.host, "ib-1");
  EXPECT_TRUE(m.host_in_topology);
  ASSERT_EQ(m.conflicts.size(), 4u);
  EXPECT_EQ(m.conflicts[0].field, "gpus");
  EXPECT_EQ(m.conflicts[0].file_value, "8");
  EXPECT_EQ(m.conflicts[0].discovered_value, "4");
  EXPECT_EQ(m.conflicts[0].message(),
            "host 'ib-1': gpus: the file says 8, discovery found 4 (the file's value is used)");
  EXPECT_EQ(m.conflicts[1].field, "nic mlx5_0 rate");
  EXPECT_EQ(m.conflicts[1].file_value, "200 Gbit/s");
  EXPECT_EQ(m.conflicts[1].discovered_value, "100 Gbit/s");
  EXPECT_EQ(m.conflicts[2].field, "nic mlx5_1");
  EXPECT_EQ(m.conflicts[2].file_value, "ib 200 Gbit/s (ib-hdr)");
  EXPECT_EQ(m.conflicts[2].discovered_value, "(absent)");
  EXPECT_EQ(m.conflicts[3].field, "nic mlx5_2");
  EXPECT_EQ(m.conflicts[3].file_value, "(absent)");
  EXPECT_EQ(m.conflicts[3].discovered_value, "ib 100 Gbit/s (discovered-ib-100)");
  for (const Conflict& c : m.conflicts) EXPECT_EQ(c.host, "ib-1");

  // The file's values stay; discovery fills in what the file leaves open.
  const Host* host = m.topology.find_host("ib-1");
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->gpus, 8);
  EXPECT_EQ(host->gpu_model, "A100");  // "A100" and "A100-SXM4-40GB" agree
  ASSERT_EQ(host->nics.size(), 2u);
  EXPECT_EQ(host->nics[0].link_class, "ib-hdr");
  EXPECT_EQ(host->nics[0].pci_bus, "0000:3b:00.0");
  EXPECT_EQ(host->nics[0].numa_node, 1);
  EXPECT_EQ(host->nics[0].state, "ACTIVE");
  EXPECT_EQ(host->nics[1].pci_bus, "");
  EXPECT_EQ(m.topology.hosts.size(), 3u);
  EXPECT_TRUE(m.overrides.empty());
}

TEST(Merge, FabricAndModelDisagreements) {
  const Topology file = parse_topology_yaml(kFile, "t.yaml");
  Discovery d = discovered_ib_host("roce-0");
  d.host.gpus = 8;
  d.host.gpu_model = "H100";
  d.host.nics.resize(1);  // mlx5_0, an IB port where the file has a RoCE NIC
  d.host.nics[0].link_class = "discovered-ib-100";
  const MergeResult m = merge_discovery(file, d);
  ASSERT_EQ(m.conflicts.size(), 2u);
  EXPECT_EQ(m.topology.find_host("roce-0")->gpu_model, "H100");  // undeclared: discovery fills
  EXPECT_EQ(m.conflicts[0].field, "fabric");
  EXPECT_EQ(m.conflicts[0].file_value, "roce (island 'roce')");
  EXPECT_EQ(m.conflicts[0].discovered_value, "ib");
  EXPECT_EQ(m.conflicts[1].field, "nic mlx5_0 fabric");
  EXPECT_EQ(m.conflicts[1].file_value, "roce");
  EXPECT_EQ(m.conflicts[1].discovered_value, "ib");

  // A declared model that names another part is a conflict.
  const MergeResult ib = merge_discovery(file, [] {
    Discovery h100 = discovered_ib_host("ib-0");
    h100.host.gpu_model = "H100";
    return h100;
  }());
  ASSERT_GE(ib.conflicts.size(), 2u);
  EXPECT_EQ(ib.conflicts[1].field, "gpu_model");
  EXPECT_EQ(ib.conflicts[1].file_value, "A100");
  EXPECT_EQ(ib.conflicts[1].discovered_value, "H100");
  EXPECT_EQ(ib.topology.find_host("ib-0")->gpu_model, "A100");
}

TEST(Merge, HostAbsentFromTheFile) {
  const Topology file = parse_topology_yaml(kFile, "t.yaml");
  LocalOverrides env;
  env.island = "ib";
  const MergeResult m = merge_discovery(file, discovered_ib_host("stranger"), env);
  EXPECT_FALSE(m.host_in_topology);
  ASSERT_EQ(m.conflicts.size(), 1u);
  EXPECT_EQ(m.conflicts[0].field, "host");
  EXPECT_EQ(m.conflicts[0].message(),
            "host 'stranger' is not in the topology file (discovered 4 GPUs, 3 NICs)");
  EXPECT_EQ(m.overrides,
            std::vector<std::string>{
                "HOLMES_ISLAND=ib not applied: host 'stranger' is not in the topology"});
  EXPECT_EQ(m.topology.hosts.size(), 3u);
}

TEST(Merge, EnvironmentNamesAndMovesTheHost) {
  const Topology file = parse_topology_yaml(kFile, "t.yaml");
  LocalOverrides env;
  env.host = "ib-0";
  env.island = "roce";
  const MergeResult m = merge_discovery(file, discovered_ib_host("whatever"), env);
  EXPECT_EQ(m.host, "ib-0");
  EXPECT_TRUE(m.host_in_topology);
  EXPECT_EQ(m.topology.find_host("ib-0")->island, "roce");
  EXPECT_EQ(m.topology.islands.at("roce").hosts, (std::vector<std::string>{"ib-0", "roce-0"}));
  EXPECT_EQ(m.topology.islands.at("ib").hosts, std::vector<std::string>{"ib-1"});
  EXPECT_EQ(m.overrides,
            std::vector<std::string>{"HOLMES_ISLAND=roce: host 'ib-0' moves from island 'ib'"});
  const Locality l = locality_in_topology(m.topology, "ib-0");
  EXPECT_EQ(l.island, "roce");
  EXPECT_EQ(l.fabric, "roce");
}

TEST(Merge, EnvironmentCreatesAnIsland) {
  const Topology file = parse_topology_yaml(kFile, "t.yaml");
  LocalOverrides env;
  env.island = "roce-west";
  env.fabric = "roce";
  const MergeResult m = merge_discovery(file, discovered_ib_host("ib-1"), env);
  const Island& created = m.topology.islands.at("roce-west");
  EXPECT_EQ(created.fabric, Fabric::kRoce);
  EXPECT_EQ(created.link_class, "roce-100");
  EXPECT_EQ(created.hosts, std::vector<std::string>{"ib-1"});
  EXPECT_EQ(m.overrides.size(), 2u);

  // The last host of an island moving away removes the island.
  LocalOverrides solo;
  solo.host = "roce-0";
  solo.island = "ib";
  const MergeResult moved = merge_discovery(file, discovered_ib_host("x"), solo);
  EXPECT_EQ(moved.topology.islands.count("roce"), 0u);
  EXPECT_EQ(moved.topology.islands.at("ib").hosts,
            (std::vector<std::string>{"ib-0", "ib-1", "roce-0"}));
}

TEST(Merge, ContradictoryFabricIsRefused) {
  const Topology file = parse_topology_yaml(kFile, "t.yaml");
  LocalOverrides env;
  env.fabric = "roce";
  try {
    merge_discovery(file, discovered_ib_host("ib-0"), env);
    ADD_FAILURE() << "merged";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(e.what()),
              "HOLMES_FABRIC=roce but host 'ib-0' is in island 'ib' (fabric ib) in the "
              "topology; an island has one fabric: set HOLMES_ISLAND to a roce island (or a new "
              "name)");
  }
  LocalOverrides same;
  same.fabric = "ib";  // agrees with the file: nothing changes
  EXPECT_TRUE(merge_discovery(file, discovered_ib_host("ib-0"), same).overrides.empty());
}

TEST(Merge, OverridesFromTheEnvironment) {
  ::setenv("HOLMES_HOST", "h", 1);
  ::setenv("HOLMES_ISLAND", "i", 1);
  ::setenv("HOLMES_FABRIC", "ethernet", 1);
  const LocalOverrides env = LocalOverrides::from_settings(Settings::from_environment());
  EXPECT_EQ(env.host, "h");
  EXPECT_EQ(env.island, "i");
  EXPECT_EQ(env.fabric, "ethernet");
  ::setenv("HOLMES_FABRIC", "nvlink", 1);
  EXPECT_THROW(LocalOverrides::from_settings(Settings::from_environment()), Error);
  for (const char* v : {"HOLMES_HOST", "HOLMES_ISLAND", "HOLMES_FABRIC"}) ::unsetenv(v);
  const LocalOverrides none = LocalOverrides::from_settings(Settings::from_environment());
  EXPECT_FALSE(none.host || none.island || none.fabric);
}

TEST(Merge, LocalityFromTheFile) {
  const Topology file = parse_topology_yaml(kFile, "t.yaml");
  const Locality l = locality_in_topology(file, "roce-0");
  EXPECT_EQ(l.host, "roce-0");
  EXPECT_EQ(l.island, "roce");
  EXPECT_EQ(l.fabric, "roce");
  EXPECT_TRUE(l.rdma());
  EXPECT_EQ(locality_in_topology(file, "ib-1").fabric, "ib");
  try {
    locality_in_topology(file, "nowhere");
    ADD_FAILURE() << "found";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "host 'nowhere' is not in the topology (3 hosts)");
  }
}

}  // namespace
}  // namespace holmes::topology

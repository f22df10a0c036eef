#include "topology/topology_file.hpp"

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.hpp"

namespace holmes::topology {
namespace {

// Bounds that catch a typo (count: 1000000000) before it allocates the machine away.
constexpr long long kMaxHostsPerRange = 1'000'000;
constexpr long long kMaxGpusPerHost = 4096;
constexpr long long kMaxNicsPerHost = 1024;
constexpr long long kMaxRangeWidth = 12;

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " (did you mean 'x'?)" when one known word is close to `word`, else "".
std::string suggestion(std::string_view word, const std::vector<std::string>& known) {
  const std::string* best = nullptr;
  std::size_t best_distance = 0;
  for (const std::string& candidate : known) {
    const std::size_t distance = edit_distance(word, candidate);
    if (best == nullptr || distance < best_distance) {
      best = &candidate;
      best_distance = distance;
    }
  }
  const std::size_t tolerance = std::max<std::size_t>(2, word.size() / 3);
  if (best == nullptr || best_distance > tolerance) return "";
  return fmt::format(" (did you mean '{}'?)", *best);
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Scalar:
      return fmt::format("'{}'", node.Scalar());
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

// Turns a YAML document into a Topology, failing at the first problem with its position.
class FileParser {
 public:
  explicit FileParser(std::string_view source) : source_(source) {}

  template <typename... Args>
  [[noreturn]] void fail_at(const YAML::Mark& mark, fmt::format_string<Args...> format,
                            Args&&... args) const {
    fail(HM_ERR_INVALID_ARGUMENT, "{}: {}", where(mark),
         fmt::format(format, std::forward<Args>(args)...));
  }

  std::string where(const YAML::Mark& mark) const {
    // Errors that carry no position (an empty document) point at the start of the file.
    if (mark.is_null() || mark.line < 0) return fmt::format("{}:1:1", source_);
    return fmt::format("{}:{}:{}", source_, mark.line + 1, mark.column + 1);
  }

  Topology parse(const YAML::Node& root);

 private:
  // The entries of one YAML map, checked once against the keys it may have.
  class Fields {
   public:
    Fields(const FileParser& parser, const YAML::Node& node, std::string what,
           std::initializer_list<std::string_view> allowed)
        : parser_(parser), node_(node), what_(std::move(what)) {
      if (!node.IsMap())
        parser.fail_at(node.Mark(), "{}: expected a map, got {}", what_, describe(node));
      std::vector<std::string> known(allowed.begin(), allowed.end());
      // Range-for keeps each entry alive; `it->first` would point into a dead proxy.
      for (const auto& entry : node) {
        const YAML::Node& key = entry.first;
        if (!key.IsScalar()) parser.fail_at(key.Mark(), "{}: a key must be a name", what_);
        const std::string& name = key.Scalar();
        if (std::find(known.begin(), known.end(), name) == known.end()) {
          std::string list;
          for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
          parser.fail_at(key.Mark(), "{}: unknown key '{}'{}; expected one of: {}", what_, name,
                         suggestion(name, known), list);
        }
        for (const auto& [seen, unused] : entries_) {
          if (seen == name) parser.fail_at(key.Mark(), "{}: key '{}' is given twice", what_, name);
        }
        entries_.emplace_back(name, entry.second);
      }
    }

    const YAML::Node* find(std::string_view key) const {
      for (const auto& [name, value] : entries_) {
        if (name == key) return &value;
      }
      return nullptr;
    }
    const YAML::Node& need(std::string_view key, std::string_view why = "") const {
      const YAML::Node* value = find(key);
      if (value == nullptr) {
        parser_.fail_at(node_.Mark(), "{}: missing key '{}'{}", what_, key, why);
      }
      return *value;
    }
    const std::string& what() const { return what_; }
    void rename(std::string what) { what_ = std::move(what); }  // once the map's name is known
    YAML::Mark mark() const { return node_.Mark(); }

   private:
    const FileParser& parser_;
    YAML::Node node_;  // a handle: iterator proxies die at the end of their expression
    std::string what_;
    std::vector<std::pair<std::string, YAML::Node>> entries_;
  };

  std::string text(const YAML::Node& node, std::string_view what) const {
    if (!node.IsScalar() || node.Scalar().empty()) {
      fail_at(node.Mark(), "{}: expected a name, got {}", what, describe(node));
    }
    return node.Scalar();
  }

  double number(const YAML::Node& node, std::string_view what) const {
    if (!node.IsScalar())
      fail_at(node.Mark(), "{}: expected a number, got {}", what, describe(node));
    const std::string& s = node.Scalar();
    double value = 0;
    const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (error != std::errc() || end != s.data() + s.size() || !std::isfinite(value)) {
      fail_at(node.Mark(), "{}: expected a number, got '{}'", what, s);
    }
    return value;
  }

  long long whole(const YAML::Node& node, std::string_view what, long long min,
                  long long max) const {
    if (!node.IsScalar()) {
      fail_at(node.Mark(), "{}: expected a whole number, got {}", what, describe(node));
    }
    const std::string& s = node.Scalar();
    long long value = 0;
    const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (error != std::errc() || end != s.data() + s.size()) {
      fail_at(node.Mark(), "{}: expected a whole number, got '{}'", what, s);
    }
    if (value < min || value > max) {
      fail_at(node.Mark(), "{}: must be between {} and {}, got {}", what, min, max, value);
    }
    return value;
  }

  Fabric fabric(const YAML::Node& node, std::string_view what, bool allow_nvlink) const {
    const std::string name = text(node, what);
    Fabric out{};
    if (!parse_fabric(name, &out) || (!allow_nvlink && out == Fabric::kNvlink)) {
      std::vector<std::string> known = {"ib", "roce", "ethernet"};
      if (allow_nvlink) known.push_back("nvlink");
      fail_at(node.Mark(), "{}: unknown fabric '{}'{}; expected {}", what, name,
              suggestion(name, known), fmt::join(known, ", "));
    }
    return out;
  }

  // The name of a declared link class, or an error at `node` listing the declared ones.
  std::string link_class_ref(const YAML::Node& node, std::string_view what) const {
    const std::string name = text(node, what);
    if (topology_.link_classes.count(name) == 0) {
      std::vector<std::string> known;
      for (const auto& [declared, unused] : topology_.link_classes) known.push_back(declared);
      fail_at(node.Mark(), "{}: unknown link class '{}'{}; declared: {}", what, name,
              suggestion(name, known), fmt::join(known, ", "));
    }
    return name;
  }

  void parse_link_classes(const YAML::Node& node);
  void parse_island(const YAML::Node& node, std::optional<std::string> inter_island);
  void parse_host_entry(const YAML::Node& node, Island& island);
  std::vector<Nic> parse_nics(const YAML::Node& node, const std::string& host,
                              const std::string& default_class) const;
  void add_host(Host host, Island& island, const YAML::Mark& mark);

  std::string_view source_;
  Topology topology_;
  std::unordered_map<std::string, YAML::Mark> host_marks_;  // where each host was declared
};

void FileParser::parse_link_classes(const YAML::Node& node) {
  if (!node.IsMap() || node.size() == 0) {
    fail_at(node.Mark(), "link_classes: expected a map of link classes, got {}", describe(node));
  }
  for (const auto& entry : node) {
    const std::string name = text(entry.first, "link_classes: a link class");
    if (topology_.link_classes.count(name) != 0) {
      fail_at(entry.first.Mark(), "link class '{}' is declared twice", name);
    }
    const std::string what = fmt::format("link class '{}'", name);
    const Fields fields(*this, entry.second, what, {"fabric", "gbit_per_s", "latency_us"});
    LinkClass link;
    link.name = name;
    link.fabric = fabric(fields.need("fabric"), what + ": fabric", true);
    const YAML::Node& rate = fields.need("gbit_per_s");
    link.gbit_per_s = number(rate, what + ": gbit_per_s");
    if (link.gbit_per_s <= 0) {
      fail_at(rate.Mark(), "{}: gbit_per_s must be positive, got {}", what, rate.Scalar());
    }
    const YAML::Node& latency = fields.need("latency_us");
    link.latency_us = number(latency, what + ": latency_us");
    if (link.latency_us < 0) {
      fail_at(latency.Mark(), "{}: latency_us must not be negative, got {}", what,
              latency.Scalar());
    }
    topology_.link_classes.emplace(name, std::move(link));
  }
}

std::vector<Nic> FileParser::parse_nics(const YAML::Node& node, const std::string& host,
                                        const std::string& default_class) const {
  std::vector<Nic> nics;
  const std::string what = fmt::format("host '{}': nics", host);
  if (node.IsMap()) {  // shorthand: {count, name_prefix, first, link_class}
    const Fields fields(*this, node, what, {"count", "name_prefix", "first", "link_class"});
    const long long count = whole(fields.need("count"), what + ": count", 1, kMaxNicsPerHost);
    const std::string prefix = text(fields.need("name_prefix"), what + ": name_prefix");
    const YAML::Node* first_node = fields.find("first");
    const long long first = first_node ? whole(*first_node, what + ": first", 0, 1'000'000) : 0;
    const YAML::Node* class_node = fields.find("link_class");
    const std::string link =
        class_node ? link_class_ref(*class_node, what + ": link_class") : default_class;
    for (long long i = 0; i < count; ++i) {
      Nic nic;
      nic.name = prefix + std::to_string(first + i);
      nic.link_class = link;
      nics.push_back(std::move(nic));
    }
    return nics;
  }
  if (!node.IsSequence()) {
    fail_at(node.Mark(),
            "{}: expected a list of NICs or {{count, name_prefix, link_class}}, got {}", what,
            describe(node));
  }
  if (node.size() > static_cast<std::size_t>(kMaxNicsPerHost)) {
    fail_at(node.Mark(), "{}: more than {} NICs", what, kMaxNicsPerHost);
  }
  for (const YAML::Node& entry : node) {
    const Fields fields(*this, entry, what + ": a NIC", {"name", "link_class"});
    Nic nic;
    nic.name = text(fields.need("name"), what + ": name");
    for (const Nic& earlier : nics) {
      if (earlier.name == nic.name) {
        fail_at(entry.Mark(), "host '{}': NIC '{}' is declared twice", host, nic.name);
      }
    }
    const YAML::Node* class_node = fields.find("link_class");
    nic.link_class =
        class_node ? link_class_ref(*class_node,
                                    fmt::format("host '{}': NIC '{}': link_class", host, nic.name))
                   : default_class;
    nics.push_back(std::move(nic));
  }
  return nics;
}

void FileParser::add_host(Host host, Island& island, const YAML::Mark& mark) {
  const auto [it, inserted] = host_marks_.emplace(host.name, mark);
  if (!inserted) {
    fail_at(mark, "host '{}' is declared twice (first at line {})", host.name, it->second.line + 1);
  }
  island.hosts.push_back(host.name);
  topology_.hosts.push_back(std::move(host));
}

void FileParser::parse_host_entry(const YAML::Node& node, Island& island) {
  const std::string where_island = fmt::format("island '{}'", island.name);
  const Fields fields(
      *this, node, where_island + ": a host",
      {"name", "name_prefix", "first", "count", "width", "gpus", "gpu_model", "nics"});
  const YAML::Node* name_node = fields.find("name");
  const YAML::Node* prefix_node = fields.find("name_prefix");
  if ((name_node == nullptr) == (prefix_node == nullptr)) {
    fail_at(node.Mark(), "{}: a host needs either 'name' or 'name_prefix' with 'count'",
            where_island);
  }
  std::vector<std::string> names;
  if (name_node != nullptr) {
    for (const char* range_key : {"first", "count", "width"}) {
      if (const YAML::Node* extra = fields.find(range_key)) {
        fail_at(extra->Mark(),
                "{}: '{}' belongs to a host range (name_prefix), not to a named host", where_island,
                range_key);
      }
    }
    names.push_back(text(*name_node, where_island + ": host name"));
  } else {
    const std::string prefix = text(*prefix_node, where_island + ": name_prefix");
    const std::string what = fmt::format("{}: hosts '{}*'", where_island, prefix);
    const long long count = whole(fields.need("count", " (how many hosts the range has)"),
                                  what + ": count", 1, kMaxHostsPerRange);
    const YAML::Node* first_node = fields.find("first");
    const long long first = first_node ? whole(*first_node, what + ": first", 0, 1'000'000'000) : 0;
    const YAML::Node* width_node = fields.find("width");
    const long long width =
        width_node ? whole(*width_node, what + ": width", 0, kMaxRangeWidth) : 0;
    names.reserve(static_cast<std::size_t>(count));
    for (long long i = 0; i < count; ++i) {
      names.push_back(fmt::format("{}{:0{}}", prefix, first + i, width));
    }
  }
  const std::string what = fmt::format("host '{}'", names.front());
  Host host;
  host.island = island.name;
  host.gpus = static_cast<int>(whole(fields.need("gpus"), what + ": gpus", 0, kMaxGpusPerHost));
  if (const YAML::Node* model = fields.find("gpu_model")) {
    host.gpu_model = text(*model, what + ": gpu_model");
  }
  if (const YAML::Node* nics = fields.find("nics")) {
    host.nics = parse_nics(*nics, names.front(), island.link_class);
  }
  for (std::string& name : names) {
    Host copy = host;
    copy.name = std::move(name);
    add_host(std::move(copy), island, node.Mark());
  }
}

void FileParser::parse_island(const YAML::Node& node, std::optional<std::string> inter_island) {
  Fields fields(*this, node, "an island", {"name", "fabric", "link_class", "hosts"});
  Island island;
  island.name = text(fields.need("name"), "island: name");
  const std::string what = fmt::format("island '{}'", island.name);
  fields.rename(what);
  if (topology_.islands.count(island.name) != 0) {
    fail_at(fields.need("name").Mark(), "{} is declared twice", what);
  }
  const YAML::Node& fabric_node = fields.need("fabric");
  island.fabric = fabric(fabric_node, what + ": fabric", false);
  const YAML::Node* class_node = fields.find("link_class");
  if (class_node != nullptr) {
    island.link_class = link_class_ref(*class_node, what + ": link_class");
    const Fabric declared = topology_.link_classes.at(island.link_class).fabric;
    if (declared != island.fabric) {
      fail_at(class_node->Mark(), "{}: link class '{}' has fabric {} but the island's fabric is {}",
              what, island.link_class, fabric_name(declared), fabric_name(island.fabric));
    }
  } else if (island.fabric != Fabric::kEthernet) {
    fields.need("link_class", " (required unless the fabric is ethernet)");
  } else if (inter_island) {
    island.link_class = *inter_island;  // hosts of an ethernet island talk over the TCP tier
  } else {
    fail_at(fabric_node.Mark(),
            "{}: an ethernet island needs 'link_class' or a top-level 'inter_island_link'", what);
  }
  const YAML::Node& hosts = fields.need("hosts");
  if (!hosts.IsSequence() || hosts.size() == 0) {
    fail_at(hosts.Mark(), "{}: hosts: expected a non-empty list of hosts, got {}", what,
            describe(hosts));
  }
  for (const YAML::Node& entry : hosts) parse_host_entry(entry, island);
  topology_.islands.emplace(island.name, std::move(island));
}

Topology FileParser::parse(const YAML::Node& root) {
  if (!root.IsMap()) {
    fail_at(root.Mark(), "expected a map with link_classes and islands at the top, got {}",
            describe(root));
  }
  const Fields fields(*this, root, "topology",
                      {"name", "emulation_scale", "link_classes", "intra_host_link",
                       "inter_island_link", "islands"});
  if (const YAML::Node* name = fields.find("name")) topology_.name = text(*name, "name");
  if (const YAML::Node* scale = fields.find("emulation_scale")) {
    topology_.emulation_scale = number(*scale, "emulation_scale");
    if (topology_.emulation_scale < 1) {
      fail_at(scale->Mark(), "emulation_scale must be at least 1, got {}", scale->Scalar());
    }
  }
  parse_link_classes(fields.need("link_classes"));

  if (const YAML::Node* intra = fields.find("intra_host_link")) {
    topology_.intra_host_link = link_class_ref(*intra, "intra_host_link");
  } else if (topology_.link_classes.count("nvlink") != 0) {
    topology_.intra_host_link = "nvlink";
  } else {
    fields.need("intra_host_link", " (no link class is named 'nvlink')");
  }

  std::optional<std::string> inter_island;
  const YAML::Node* inter_node = fields.find("inter_island_link");
  if (inter_node != nullptr) {
    inter_island = link_class_ref(*inter_node, "inter_island_link");
    const Fabric declared = topology_.link_classes.at(*inter_island).fabric;
    if (declared != Fabric::kEthernet) {
      fail_at(inter_node->Mark(),
              "inter_island_link: link class '{}' has fabric {}; islands are joined by ethernet",
              *inter_island, fabric_name(declared));
    }
  }

  const YAML::Node& islands = fields.need("islands");
  if (!islands.IsSequence() || islands.size() == 0) {
    fail_at(islands.Mark(), "islands: expected a non-empty list of islands, got {}",
            describe(islands));
  }
  for (const YAML::Node& island : islands) parse_island(island, inter_island);
  if (inter_island) {
    topology_.inter_island_link = *inter_island;
  } else if (topology_.islands.size() > 1) {
    fields.need("inter_island_link", " (required with more than one island)");
  } else {
    // One RDMA island: no traffic crosses islands; the island's class stands in so that the
    // topology stays complete.
    topology_.inter_island_link = topology_.islands.begin()->second.link_class;
  }
  try {
    topology_.validate();
  } catch (const Error& e) {
    fail(e.status(), "{}: {}", source_, e.what());
  }
  return std::move(topology_);
}

// Where each YAML document starts; every other event is ignored.
class DocumentMarks : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  std::vector<YAML::Mark> starts;
};

}  // namespace

Topology parse_topology_yaml(std::string_view text, std::string_view source_name) {
  FileParser parser(source_name);
  try {
    // Count the documents without YAML::LoadAll: on some malformed input (a ',' at the top
    // level) yaml-cpp 0.7 yields empty documents forever, and LoadAll collects them until memory
    // runs out. Two are enough to know the file is wrong.
    std::istringstream stream{std::string(text)};
    YAML::Parser documents(stream);
    DocumentMarks marks;
    while (marks.starts.size() < 2 && documents.HandleNextDocument(marks)) {
    }
    if (marks.starts.empty()) parser.fail_at(YAML::Mark::null_mark(), "the file is empty");
    if (marks.starts.size() > 1) {
      parser.fail_at(marks.starts[1], "expected one YAML document, found more");
    }
    return parser.parse(YAML::Load(std::string(text)));
  } catch (const YAML::Exception& e) {
    // e.msg is yaml-cpp's text without its own position prefix.
    parser.fail_at(e.mark, "invalid YAML: {}", e.msg);
  }
}

Topology load_topology_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(HM_ERR_INVALID_ARGUMENT, "{}: cannot open the topology file", path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(HM_ERR_INVALID_ARGUMENT, "{}: cannot read the topology file", path);
  return parse_topology_yaml(text.str(), path);
}

}  // namespace holmes::topology

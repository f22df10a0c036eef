#include "planner/calibration.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/status.hpp"

namespace holmes::planner {

LinkFit fit_link(const std::vector<std::pair<double, double>>& points) {
  std::set<double> sizes;
  for (const auto& [bytes, seconds] : points) {
    require(bytes >= 0 && seconds > 0 && std::isfinite(bytes) && std::isfinite(seconds),
            "calibration point ({} bytes, {} s) is not a measurement", bytes, seconds);
    sizes.insert(bytes);
  }
  require(sizes.size() >= 2, "calibration needs at least two message sizes, got {}", sizes.size());
  const double n = static_cast<double>(points.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);  // seconds per byte
  const double intercept = (sy - slope * sx) / n;
  require(slope > 0, "calibration points do not grow with size: no bandwidth can be fitted");
  LinkFit fit;
  fit.gbit_per_s = 8 / slope / 1e9;
  fit.latency_us = std::max(0.0, intercept) * 1e6;
  fit.points = static_cast<int>(points.size());
  return fit;
}

void write_calibration(const std::string& path, const std::string& link_class, const LinkFit& fit,
                       int ranks) {
  require(!link_class.empty(), "calibration needs a link class name");
  nlohmann::json doc = nlohmann::json::object();
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    std::ifstream in(path);
    try {
      doc = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail(HM_ERR_INVALID_ARGUMENT, "calibration file '{}' exists but is not JSON: {}", path,
           e.what());
    }
  }
  doc["link_classes"][link_class] = {{"gbit_per_s", fit.gbit_per_s},
                                     {"latency_us", fit.latency_us},
                                     {"points", fit.points},
                                     {"ranks", ranks}};
  std::ofstream out(path);
  require(out.good(), "calibration file '{}' cannot be written", path);
  out << doc.dump(2) << "\n";
}

std::vector<std::string> apply_calibration(topology::Topology& topo, const std::string& path) {
  std::ifstream in(path);
  require(in.good(), "calibration file '{}' cannot be read", path);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(HM_ERR_INVALID_ARGUMENT, "calibration file '{}' is not JSON: {}", path, e.what());
  }
  require(doc.is_object() && doc.contains("link_classes") && doc["link_classes"].is_object(),
          "calibration file '{}' has no \"link_classes\" object", path);
  std::vector<std::string> changes;
  // Named copies rather than a structured binding: Clang before 16 cannot capture a binding in
  // the lambda below.
  for (const auto& item : doc["link_classes"].items()) {
    const std::string& name = item.key();
    const auto& entry = item.value();
    auto it = topo.link_classes.find(name);
    require(it != topo.link_classes.end(),
            "calibration file '{}' names link class '{}', which the topology does not declare",
            path, name);
    const auto number = [&](const char* key) {
      require(entry.contains(key) && entry[key].is_number() && entry[key].get<double>() >= 0 &&
                  std::isfinite(entry[key].get<double>()),
              "calibration file '{}': link class '{}' needs a non-negative number '{}'", path, name,
              key);
      return entry[key].get<double>();
    };
    const double gbit = number("gbit_per_s");
    const double latency = number("latency_us");
    require(gbit > 0, "calibration file '{}': link class '{}' has zero bandwidth", path, name);
    changes.push_back(fmt::format("{}: {} -> {:.3g} Gbit/s, {} -> {:.3g} us", name,
                                  it->second.gbit_per_s, gbit, it->second.latency_us, latency));
    it->second.gbit_per_s = gbit;
    it->second.latency_us = latency;
  }
  return changes;
}

}  // namespace holmes::planner

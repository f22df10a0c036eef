#include "core/settings.hpp"

#include <cmath>
#include <cstdlib>

#include "core/status.hpp"

namespace holmes {
namespace {

// The only reader of the process's environment in Holmes: every setting goes through here.
// The variable's value, or nullopt when it is unset or empty.
std::optional<std::string> env_string(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

const char* const kSourceNames[] = {"default", "environment", "hm_config_t", "topology file"};

// "a, b or c"
std::string list_choices(const SettingSpec& spec, const char* last_separator) {
  std::string out;
  for (std::size_t i = 0; i < spec.choices.size(); ++i) {
    if (i > 0) out += i + 1 == spec.choices.size() ? last_separator : ", ";
    out += spec.choices[i];
  }
  return out;
}

// A finite number filling all of `text`, or nullopt.
std::optional<double> parse_double(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<LinkSetting> parse_link(const std::string& text) {
  const auto comma = text.find(',');
  if (comma == std::string::npos) return std::nullopt;
  const auto latency = parse_double(text.substr(0, comma));
  const auto bandwidth = parse_double(text.substr(comma + 1));
  if (!latency || !bandwidth || *latency < 0 || *bandwidth <= 0) return std::nullopt;
  return LinkSetting{*latency, *bandwidth};
}

const SettingSpec& typed(Setting id, SettingType type) {
  const SettingSpec& spec = setting_spec(id);
  if (spec.type != type) {
    fail(HM_ERR_INTERNAL, "setting {} is a {}, read as a {}", spec.name,
         setting_type_name(spec.type), setting_type_name(type));
  }
  return spec;
}

// The value to parse: the given text, else the registered default.
std::optional<std::string> effective(const Settings& settings, Setting id) {
  const auto& v = settings.value(id);
  if (!v.problem.empty()) throw Error(HM_ERR_INVALID_ARGUMENT, v.problem);
  if (v.text) return v.text;
  const auto& spec = setting_spec(id);
  if (spec.default_value.empty()) return std::nullopt;
  return std::string(spec.default_value);
}

std::string required_default(const Settings& settings, Setting id) {
  auto text = effective(settings, id);
  if (!text) fail(HM_ERR_INTERNAL, "setting {} has no default", setting_spec(id).name);
  return *text;
}

std::string integer_label(const std::string& label, SettingSource source) {
  return source == SettingSource::kEnvironment ? "environment variable " + label : label;
}

}  // namespace

const char* setting_source_name(SettingSource source) {
  return kSourceNames[static_cast<std::size_t>(source)];
}

void check_setting(const SettingSpec& spec, const std::string& text, const std::string& label,
                   SettingSource source) {
  switch (spec.type) {
    case SettingType::kFlag:
    case SettingType::kInteger:
      parse_int(text, spec.min, spec.max, integer_label(label, source));
      return;
    case SettingType::kChoice:
      for (const auto choice : spec.choices) {
        if (choice == text) return;
      }
      fail(HM_ERR_INVALID_ARGUMENT, "{} is '{}': expected {}", label, text,
           list_choices(spec, " or "));
    case SettingType::kText:
      return;
    case SettingType::kAddress:
      parse_host_port(text, fmt::format("{}='{}'", label, text));
      return;
    case SettingType::kLink:
      if (!parse_link(text)) {
        fail(HM_ERR_INVALID_ARGUMENT,
             "{}='{}': expected latency_us,GB/s with a latency >= 0 and a bandwidth > 0 (e.g. "
             "100,1.25)",
             label, text);
      }
      return;
    case SettingType::kRate: {
      const auto rate = parse_double(text);
      if (!rate || *rate <= 0) {
        fail(HM_ERR_INVALID_ARGUMENT, "{}='{}': expected a speed in GB/s > 0 (e.g. 3.5)", label,
             text);
      }
      return;
    }
  }
}

Settings Settings::from_environment() {
  Settings out;
  for (const auto& spec : all_settings()) {
    Value& v = out.values_[static_cast<std::size_t>(spec.id)];
    auto read = [&](std::string_view name) {
      if (auto text = env_string(std::string(name).c_str())) {
        v.text = std::move(text);
        v.source = SettingSource::kEnvironment;
        v.origin = std::string(name);
        return true;
      }
      return false;
    };
    if (read(spec.name)) continue;
    for (const auto alias : spec.aliases) {
      if (read(alias)) break;
    }
    if (spec.id == Setting::kStore && !v.text) {
      // torchrun's pair, read as one address.
      const auto addr = env_string("MASTER_ADDR");
      const auto port = env_string("MASTER_PORT");
      if (addr && port) {
        v.source = SettingSource::kEnvironment;
        v.origin = "MASTER_ADDR/MASTER_PORT";
        try {
          parse_int(*port, 1, 65535, "environment variable MASTER_PORT");
          const bool v6 = addr->find(':') != std::string::npos;
          v.text = (v6 ? "[" + *addr + "]" : *addr) + ":" + *port;
        } catch (const Error& e) {
          v.problem = e.what();
        }
      } else if (addr || port) {
        v.source = SettingSource::kEnvironment;
        v.problem =
            fmt::format("{} is set but {} is not: torchrun sets both",
                        addr ? "MASTER_ADDR" : "MASTER_PORT", addr ? "MASTER_PORT" : "MASTER_ADDR");
      }
    }
  }
  return out;
}

void Settings::set(std::string_view name, const std::string& text, SettingSource source,
                   const std::string& origin) {
  const SettingSpec* spec = find_setting(name);
  if (spec == nullptr) {
    fail(HM_ERR_INVALID_ARGUMENT,
         "unknown setting '{}' (holmes-run --print-settings lists every setting)", name);
  }
  set(spec->id, text, source, origin);
}

void Settings::set(Setting id, const std::string& text, SettingSource source,
                   const std::string& origin) {
  Value candidate;
  candidate.text = text;
  candidate.source = source;
  candidate.origin = origin;
  Value& slot = values_[static_cast<std::size_t>(id)];
  std::swap(slot, candidate);
  try {
    check_setting(setting_spec(id), text, label(id), source);
  } catch (...) {
    std::swap(slot, candidate);  // a refused value changes nothing
    throw;
  }
}

std::string Settings::label(Setting id) const {
  const auto& spec = setting_spec(id);
  const auto& v = value(id);
  switch (v.source) {
    case SettingSource::kEnvironment:
      return v.origin.empty() ? std::string(spec.name) : v.origin;
    case SettingSource::kConfig:
      return fmt::format("{} (hm_config_t)", spec.name);
    case SettingSource::kTopologyFile:
      return fmt::format("{} (topology file {})", spec.name, v.origin);
    case SettingSource::kDefault:
      break;
  }
  return std::string(spec.name);
}

std::optional<std::int64_t> Settings::integer_if_given(Setting id) const {
  const auto& spec = typed(id, SettingType::kInteger);
  if (!given(id)) return std::nullopt;
  const auto text = effective(*this, id);
  return parse_int(*text, spec.min, spec.max, integer_label(label(id), value(id).source));
}

std::int64_t Settings::integer(Setting id) const {
  const auto& spec = typed(id, SettingType::kInteger);
  if (auto given_value = integer_if_given(id)) return *given_value;
  return parse_int(required_default(*this, id), spec.min, spec.max, std::string(spec.name));
}

std::optional<bool> Settings::flag_if_given(Setting id) const {
  typed(id, SettingType::kFlag);
  if (!given(id)) return std::nullopt;
  return parse_int(*effective(*this, id), 0, 1, integer_label(label(id), value(id).source)) == 1;
}

bool Settings::flag(Setting id) const {
  if (auto given_value = flag_if_given(id)) return *given_value;
  return required_default(*this, id) == "1";
}

std::optional<std::string> Settings::text_if_given(Setting id) const {
  if (!given(id)) return std::nullopt;
  const auto text = effective(*this, id);
  check_setting(setting_spec(id), *text, label(id), value(id).source);
  return text;
}

std::string Settings::text(Setting id) const {
  if (auto given_value = text_if_given(id)) return *given_value;
  return std::string(setting_spec(id).default_value);
}

std::optional<LinkSetting> Settings::link_if_given(Setting id) const {
  typed(id, SettingType::kLink);
  const auto text = text_if_given(id);
  if (!text) return std::nullopt;
  return parse_link(*text);
}

std::optional<double> Settings::rate_if_given(Setting id) const {
  typed(id, SettingType::kRate);
  const auto text = text_if_given(id);
  if (!text) return std::nullopt;
  return parse_double(*text);
}

std::optional<HostPort> Settings::address_if_given(Setting id) const {
  typed(id, SettingType::kAddress);
  if (!given(id)) return std::nullopt;
  const auto text = effective(*this, id);
  return parse_host_port(*text, fmt::format("{}='{}'", label(id), *text));
}

void Settings::check() const {
  for (const auto& spec : all_settings()) {
    if (!given(spec.id)) continue;
    check_setting(spec, *effective(*this, spec.id), label(spec.id), value(spec.id).source);
  }
}

std::string Settings::dump() const {
  std::string out;
  for (const auto& spec : all_settings()) {
    const auto& v = value(spec.id);
    std::string shown;
    if (!v.problem.empty()) {
      shown = "(invalid)";
    } else if (v.text && spec.id == Setting::kToken) {
      shown = "(hidden)";
    } else if (v.text) {
      shown = *v.text;
    } else if (!spec.default_value.empty()) {
      shown = std::string(spec.default_value);
    } else {
      shown = "(unset)";
    }
    std::string source = setting_source_name(v.source);
    if (!v.origin.empty() && v.origin != spec.name) source += fmt::format(": {}", v.origin);
    if (!v.problem.empty()) source += fmt::format("; {}", v.problem);
    out += fmt::format("{:<25} {:<12} # {}\n", spec.name, shown, source);
  }
  return out;
}

std::string Settings::markdown_table() {
  auto code = [](std::string_view text) { return fmt::format("`{}`", text); };
  std::string out = "| setting | type | default | scope | meaning |\n|---|---|---|---|---|\n";
  for (const auto& spec : all_settings()) {
    std::string type;
    switch (spec.type) {
      case SettingType::kFlag:
        type = "`0`/`1`";
        break;
      case SettingType::kInteger:
        type = fmt::format("integer {}..{}", spec.min, spec.max);
        break;
      case SettingType::kChoice:
        for (const auto choice : spec.choices) type += (type.empty() ? "" : ", ") + code(choice);
        break;
      default:
        type = setting_type_name(spec.type);
        if (spec.type == SettingType::kAddress || spec.type == SettingType::kLink) {
          type = code(type);
        }
        break;
    }
    std::string names = code(spec.name);
    const std::string default_value =
        spec.default_value.empty() ? "unset" : code(spec.default_value);
    const std::string scope = spec.scope == SettingScope::kTransport
                                  ? std::string(spec.owner)
                                  : std::string(setting_scope_name(spec.scope));
    std::string doc(spec.doc);
    for (std::size_t at = doc.find('|'); at != std::string::npos; at = doc.find('|', at + 2)) {
      doc.replace(at, 1, "\\|");
    }
    out += fmt::format("| {} | {} | {} | {} | {} |\n", names, type, default_value, scope, doc);
  }
  return out;
}

const Settings& process_settings() {
  // Part of the process-wide runtime: read once, never changed.
  static const Settings instance = Settings::from_environment();
  return instance;
}

}  // namespace holmes

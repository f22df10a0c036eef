// The values of the registered settings (setting_registry.hpp) a communicator is configured
// with, each with where it came from: the default, the environment, hm_config_t (hm_config_set,
// holmes::Config) or the topology file. The communicator reads them once, when it is configured
// (communicator/config.cpp), and hands each layer the typed slice it needs (TransportOptions,
// ShmTuning, CostModel, ...); nothing below the communicator reads the environment.
//
// Values are kept as the text given and checked by type and range when they are set through the
// API (so hm_config_set refuses a bad value at once), and when they are read (so a bad variable
// fails init on every rank at once, through the wiring exchanges, naming it and its value).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/parse.hpp"
#include "core/setting_registry.hpp"

namespace holmes {

enum class SettingSource : std::uint8_t { kDefault, kEnvironment, kConfig, kTopologyFile };
// "default", "environment", "hm_config_t", "topology file".
const char* setting_source_name(SettingSource source);

// A kLink value: a latency per message and a bandwidth.
struct LinkSetting {
  double latency_us = 0;
  double gbytes_per_s = 0;
};

class Settings {
 public:
  struct Value {
    std::optional<std::string> text;  // nullopt: not given, the default applies
    SettingSource source = SettingSource::kDefault;
    // The variable it was read from ("SLURM_PROCID", "MASTER_ADDR/MASTER_PORT") or the file.
    std::string origin;
    // A reading that failed as such (MASTER_ADDR without MASTER_PORT): thrown when it is used.
    std::string problem;
  };

  // Every setting at its default.
  Settings() = default;
  // Every setting from the environment (the variable, else its aliases in order), else the
  // default. Reads only; checks happen when a value is used (or by check()).
  static Settings from_environment();

  // Sets a value; throws HM_ERR_INVALID_ARGUMENT naming the setting and the value when it is not
  // of the setting's type or range, or when `name` is no setting.
  void set(std::string_view name, const std::string& text, SettingSource source,
           const std::string& origin = {});
  void set(Setting id, const std::string& text, SettingSource source,
           const std::string& origin = {});

  const Value& value(Setting id) const { return values_[static_cast<std::size_t>(id)]; }
  // Set by something other than the default.
  bool given(Setting id) const { return value(id).text.has_value() || !value(id).problem.empty(); }
  // What error messages call the value's origin: the variable ("HOLMES_SOCKETS", "RANK"), or
  // "HOLMES_SOCKETS (hm_config_t)".
  std::string label(Setting id) const;

  // Typed readers. They throw HM_ERR_INVALID_ARGUMENT naming where a bad value came from.
  // `*_if_given` give nullopt when the setting is not given; the others fall back to the
  // registered default (which such a setting has).
  std::optional<std::int64_t> integer_if_given(Setting id) const;
  std::int64_t integer(Setting id) const;
  std::optional<bool> flag_if_given(Setting id) const;
  bool flag(Setting id) const;
  std::optional<std::string> text_if_given(Setting id) const;
  std::string text(Setting id) const;
  std::optional<LinkSetting> link_if_given(Setting id) const;
  std::optional<double> rate_if_given(Setting id) const;
  std::optional<HostPort> address_if_given(Setting id) const;

  // Checks every given value by type and range; throws the first problem.
  void check() const;

  // Every setting in effect, one a line: name, value ("(unset)" for none; the token hidden) and
  // where it came from.
  std::string dump() const;
  // The registry as a Markdown table (the README's): setting, type, default, scope, meaning.
  static std::string markdown_table();

 private:
  std::array<Value, kSettingCount> values_;
};

// Checks `text` as a value of `spec` given by `label`; throws HM_ERR_INVALID_ARGUMENT naming it.
void check_setting(const SettingSpec& spec, const std::string& text, const std::string& label,
                   SettingSource source);

// The settings the process itself runs with (logging, which exists before any communicator),
// from the environment, read on first use.
const Settings& process_settings();

}  // namespace holmes

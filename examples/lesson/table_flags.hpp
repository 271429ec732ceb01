#pragma once
// Command-line flags made from options tables (core/settings.hpp): one flag per field (lr -> --lr,
// weight_decay -> --weight-decay) with the field's help, checked against the field's type and bounds as
// the command line is parsed, so a table's fields are spelled out nowhere else. What was given is
// collected as settings that override an options struct's to_settings, which lists every field (a field
// whose absence means its default too: AdamOptions' decay_on has its --decay-on).
//
//   TableFlags flags(app);
//   flags.add<SgdOptions>("Optimizer");  flags.add<AdamOptions>("Optimizer");  // shared fields once
//   CLI11_PARSE(app, argc, argv);
//   Settings chosen = with_overrides(to_settings(SgdOptions{}), flags.given_in("Optimizer", "sgd",
//                                    to_settings(SgdOptions{})), "sgd");
//
// Header-only: programs that use it link CLI11 themselves (the library does not depend on it).

#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "command_line.hpp"
#include "tapegrad/core/settings.hpp"

namespace tapegrad::lesson {

class TableFlags {
 public:
  explicit TableFlags(CLI::App& app) : app_(app) {}

  // Registers a flag for each field of Options, under the --help section `group`, its default shown as
  // the program's `defaults` hold it. A field that a table registered before (the same name) is shared.
  template <class Options>
  void add(const std::string& group, const Options& defaults = {}) {
    Options::fields(defaults, [&](const char* name, const auto& value, const char* help, Bounds bounds = {}) {
      if (flags_.contains(name)) {
        flags_[name].groups.push_back(group);
        return;
      }
      Flag& f = flags_[name];
      f.groups.push_back(group);
      f.name = "--" + dashed(name);
      using V = std::remove_cvref_t<decltype(value)>;
      if constexpr (std::is_same_v<V, bool>) {
        app_.add_flag(f.name, f.on, help)->group(group);
      } else {
        app_.add_option(f.name, f.text, fmt::format("{} ({})", help, kind_of_value<V>()))
            ->group(group)
            ->default_str(to_text(value))
            ->check(validator<V>(bounds));
      }
    });
  }

  // The settings given on the command line that `of` (one table's settings) has. NameError, naming the
  // flag and `what`, for a flag of `group` that was given but is not in `of`: "--beta1 is not a setting of
  // sgd".
  Settings given_in(const std::string& group, std::string_view what, const Settings& of) const {
    Settings out;
    for (const auto& [name, f] : flags_) {
      if (!was_given(f)) continue;
      const bool in_group = std::find(f.groups.begin(), f.groups.end(), group) != f.groups.end();
      if (find_setting(of, name))
        out.push_back({name, f.text.empty() && f.on ? "true" : f.text});
      else if (in_group)
        fail<NameError>("{} is not a setting of {} (it has {})", f.name, what, names_of(of));
    }
    return out;
  }

  bool was_given(std::string_view name) const {
    const auto it = flags_.find(std::string(name));
    return it != flags_.end() && was_given(it->second);
  }

 private:
  struct Flag {
    std::string name;  // "--weight-decay"
    std::vector<std::string> groups;
    std::string text;  // the value given
    bool on = false;   // a bool field's flag
  };

  bool was_given(const Flag& f) const { return app_.count(f.name) > 0; }

  static std::string dashed(std::string s) {
    std::replace(s.begin(), s.end(), '_', '-');
    return s;
  }

  static std::string names_of(const Settings& s) {
    std::string out;
    for (const auto& x : s) out += (out.empty() ? "--" : ", --") + dashed(x.name);
    return out.empty() ? "none" : out;
  }

  // The value must read as a V within the field's bounds, refused in the programs' one wording
  // (examples::must_be): "must be finite and >= 0, got '-1'". The capture is [=]: an enum's validator reads
  // no bounds, and clang warns of an explicit capture that one instantiation does not use.
  template <class V>
  static CLI::Validator validator(Bounds bounds) {
    return CLI::Validator(
        [=](std::string& text) -> std::string {
          V v{};
          if (!from_text(text, v)) {
            if constexpr (std::is_integral_v<V> && !std::is_same_v<V, bool>)
              return examples::must_be(std::isfinite(bounds.lo) && std::isfinite(bounds.hi)
                                           ? "a whole number " + bounds.describe()
                                           : examples::whole_numbers<V>(),
                                       text);
            return examples::must_be(kind_of_value<V>(), text);
          }
          if constexpr (std::is_arithmetic_v<V>)
            if (!bounds.contains(static_cast<double>(v))) return examples::must_be(bounds.describe(), text);
          return {};
        },
        "");
  }

  CLI::App& app_;
  std::map<std::string, Flag> flags_;
};

}  // namespace tapegrad::lesson

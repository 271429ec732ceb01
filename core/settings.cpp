#include "tapegrad/core/settings.hpp"

namespace tapegrad {

const std::string* find_setting(const Settings& settings, std::string_view name) {
  const auto it = std::ranges::find(settings, name, &Setting::name);
  return it == settings.end() ? nullptr : &it->value;
}

std::string describe_settings(const Settings& settings) {
  std::string out;
  for (const auto& s : settings) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", s.name, s.value);
  return out;
}

Settings with_overrides(Settings settings, const Settings& overrides, std::string_view what) {
  std::vector<std::string> unknown;
  for (const auto& o : overrides) {
    const auto it = std::ranges::find(settings, o.name, &Setting::name);
    if (it == settings.end())
      unknown.push_back(o.name);
    else
      it->value = o.value;
  }
  if (!unknown.empty()) {
    std::vector<std::string> known;
    for (const auto& s : settings) known.push_back(s.name);
    fail<NameError>("{}: has no setting {} (it has {})", what, quoted_list(unknown),
                    known.empty() ? std::string("none") : fmt::format("{}", fmt::join(known, ", ")));
  }
  return settings;
}

std::string Bounds::describe() const {
  const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi)
    return fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", to_text(lo), to_text(hi), hi_open ? ")" : "]");
  if (has_lo) return fmt::format("finite and {} {}", lo_open ? ">" : ">=", to_text(lo));
  if (has_hi) return fmt::format("finite and {} {}", hi_open ? "<" : "<=", to_text(hi));
  return "finite";
}

}  // namespace tapegrad

#include "tapegrad/train/plot/plot.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <iterator>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "tapegrad/core/error.hpp"
#include "tapegrad/core/escape.hpp"

namespace tapegrad {
namespace {

constexpr double kPad = 12;   // outer margin of every document
constexpr double kFont = 12;  // labels, ticks, legend
constexpr double kTitleFont = 15;

template <class... Args>
void put(std::string& out, fmt::format_string<Args...> format, Args&&... args) {
  fmt::format_to(std::back_inserter(out), format, std::forward<Args>(args)...);
}

// A tenth of a pixel is below what any screen shows, and keeps long series short.
std::string px(double v) { return fmt::format("{:.1f}", v); }

bool is_utf8_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

std::size_t code_points(std::string_view text) {
  return static_cast<std::size_t>(std::ranges::count_if(text, [](char c) { return !is_utf8_continuation(c); }));
}

// The renderer's font is unknown, so layout assumes 0.62 em per character: wide enough for the
// digits and lower case of DejaVu Sans, the usual sans-serif on Linux.
double text_width(std::string_view text, double font_size) {
  return 0.62 * font_size * static_cast<double>(code_points(text));
}

// The width of the widest of `texts`.
double widest(const std::vector<std::string>& texts, double font_size) {
  double w = 0;
  for (const auto& t : texts) w = std::max(w, text_width(t, font_size));
  return w;
}

// At most `max_chars` code points, the last one an ellipsis when cut: one long token must not push
// the grid off the page (the cell tooltips keep the full text).
std::string shorten(std::string_view text, std::size_t max_chars) {
  if (code_points(text) <= max_chars) return std::string(text);
  std::size_t end = 0;  // the start of code point max_chars - 1, which the ellipsis replaces
  for (std::size_t chars = 0; chars < max_chars; ++end)
    if (!is_utf8_continuation(text[end])) ++chars;
  return std::string(text.substr(0, end - 1)) + "\u2026";
}

// v with `decimals` digits after the point, and no sign when it rounds to zero ("0.00", not "-0.00"):
// a rounded-away sign is noise.
std::string fixed(double v, int decimals) {
  auto s = fmt::format("{:.{}f}", v, decimals);
  if (s.front() == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

// The document: the root element, a white background (so the plot reads the same in a dark-themed
// viewer), then `body`.
std::string svg_document(double width, double height, std::string_view title, std::string_view body) {
  const auto w = std::ceil(width), h = std::ceil(height);
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"{2}\">\n",
      w, h, kFont);
  if (!title.empty()) put(out, "<title>{}</title>\n", xml_escaped(title));
  put(out, "<rect width=\"{}\" height=\"{}\" fill=\"white\"/>\n{}</svg>\n", w, h, body);
  return out;
}

// A one-line text; `extra` holds further attributes (anchor, weight, transform).
void text(std::string& out, double x, double y, std::string_view content, std::string_view extra = {}) {
  put(out, "<text x=\"{}\" y=\"{}\"{}{}>{}</text>\n", px(x), px(y), extra.empty() ? "" : " ", extra,
      xml_escaped(content));
}

// Text turned `degrees` to the left about its anchor (x, y): an axis title (90, read from the bottom
// up), a column label too long for its cell (45, running up to the right).
void turned_text(std::string& out, double x, double y, std::string_view content, int degrees,
                 std::string_view extra = {}) {
  const auto turn = fmt::format("transform=\"rotate(-{} {} {})\"", degrees, px(x), px(y));
  text(out, x, y, content, extra.empty() ? turn : fmt::format("{} {}", extra, turn));
}

void title_text(std::string& out, double x, double y, std::string_view title) {
  text(out, x, y, title, fmt::format("text-anchor=\"middle\" font-size=\"{}\" font-weight=\"bold\"", kTitleFont));
}

// ---- colours ----

struct Rgb {
  double r, g, b;
};

// a + f (b - a), channel by channel.
Rgb mix(Rgb a, Rgb b, double f) { return {a.r + f * (b.r - a.r), a.g + f * (b.g - a.g), a.b + f * (b.b - a.b)}; }

// ColorBrewer "Blues", 9 classes, white to dark blue: sequential, and still ordered in grey-scale print.
constexpr std::array<Rgb, 9> kBlues = {{{247, 251, 255},
                                        {222, 235, 247},
                                        {198, 219, 239},
                                        {158, 202, 225},
                                        {107, 174, 214},
                                        {66, 146, 198},
                                        {33, 113, 181},
                                        {8, 81, 156},
                                        {8, 48, 107}}};

// t in [0, 1], linear between the stops.
Rgb blues(double t) {
  const double pos = std::clamp(t, 0.0, 1.0) * static_cast<double>(kBlues.size() - 1);
  const auto i = std::min(static_cast<std::size_t>(pos), kBlues.size() - 2);
  return mix(kBlues[i], kBlues[i + 1], pos - static_cast<double>(i));
}

std::string hex(Rgb c) {
  const auto byte = [](double v) { return static_cast<unsigned>(std::lround(std::clamp(v, 0.0, 255.0))); };
  return fmt::format("#{:02x}{:02x}{:02x}", byte(c.r), byte(c.g), byte(c.b));
}

// Luma below one half: white text reads better than black on it.
bool is_dark(Rgb c) { return 0.299 * c.r + 0.587 * c.g + 0.114 * c.b < 0.5 * 255; }

constexpr const char* kMarkColour = "#e8590c";  // orange: marked rows and cells on the blue scale

// Tableau 10: distinct hues for the first ten series; later ones repeat them dashed.
constexpr std::array<const char*, 10> kPalette = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                                  "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

const char* series_colour(std::size_t i) { return kPalette[i % kPalette.size()]; }

std::string series_style(std::size_t i) {
  return fmt::format("stroke=\"{}\"{}", series_colour(i), i < kPalette.size() ? "" : " stroke-dasharray=\"6 3\"");
}

// ---- heatmap ----

constexpr std::size_t kMaxLabelChars = 16;

struct HeatmapLayout {
  std::vector<std::string> rows, cols;  // shortened labels
  double cell = 0;                      // side of a square cell
  bool rotate_cols = false;             // column labels at 45 degrees when wider than a cell
  double left = 0, top = 0;             // the grid's top-left corner
  double grid_w = 0, grid_h = 0;
  double bar_x = 0, bar_h = 0, bar_label_w = 0;  // colour bar, and its widest label
  double width = 0, height = 0;
};

constexpr double kMarkerWidth = 12;  // the arrow before a marked row's label
constexpr double kNoteLine = kFont + 5;

std::string scale_label(double v) { return fmt::format("{:.3g}", v); }

HeatmapLayout heatmap_layout(const Heatmap& map) {
  HeatmapLayout l;
  for (const auto& s : map.row_labels) l.rows.push_back(shorten(s, kMaxLabelChars));
  for (const auto& s : map.col_labels) l.cols.push_back(shorten(s, kMaxLabelChars));
  const double row_w = widest(l.rows, kFont), col_w = widest(l.cols, kFont);
  l.cell = map.show_values ? 40 : 24;
  l.rotate_cols = col_w > l.cell - 4;
  const double diag = std::sqrt(0.5);
  const double col_h = l.rotate_cols ? col_w * diag + kFont : kFont + 4;
  const double col_overhang = l.rotate_cols ? col_w * diag - l.cell / 2 : 0;  // past the last column

  const double marker_w = map.marked_rows.empty() ? 0 : kMarkerWidth;
  l.left = kPad + (map.row_title.empty() ? 0 : kFont + 8) + marker_w + row_w + 8;
  l.top = kPad + (map.title.empty() ? 0 : kTitleFont + 10) + (map.col_title.empty() ? 0 : kFont + 8) + col_h + 6;
  l.grid_w = l.cell * static_cast<double>(l.cols.size());
  l.grid_h = l.cell * static_cast<double>(l.rows.size());
  l.bar_x = l.left + l.grid_w + 16;
  l.bar_h = std::max(l.grid_h, 100.0);
  l.bar_label_w = std::max(text_width(scale_label(map.vmin), kFont), text_width(scale_label(map.vmax), kFont));
  const double bar_title_w = map.value_title.empty() ? 0 : kFont + 10;
  const double right = std::max(l.bar_x + 14 + 6 + l.bar_label_w + bar_title_w, l.left + l.grid_w + col_overhang);
  l.width = std::max({right + kPad, text_width(map.title, kTitleFont) + 2 * kPad, widest(map.notes, kFont) + 2 * kPad});
  l.height = l.top + l.bar_h + kPad + kNoteLine * static_cast<double>(map.notes.size()) + (map.notes.empty() ? 0 : 6);
  return l;
}

// Diagonal hatching clipped to the cell by construction (lines x + y = c inside the square), which
// needs no <pattern> id that would clash when documents are nested.
void nan_cell(std::string& out, double x, double y, double side) {
  put(out, "<path d=\"");
  for (double c = side / 4; c < 2 * side; c += side / 4) {
    const double x0 = std::max(0.0, c - side), x1 = std::min(c, side);
    put(out, "M{} {}L{} {}", px(x + x0), px(y + c - x0), px(x + x1), px(y + c - x1));
  }
  put(out, "\" stroke=\"#a0a0a0\" stroke-width=\"1\"/>\n");
}

void heatmap_cells(std::string& out, const Heatmap& map, const HeatmapLayout& l) {
  const std::size_t n_cols = l.cols.size();
  for (std::size_t r = 0; r < l.rows.size(); ++r) {
    for (std::size_t c = 0; c < n_cols; ++c) {
      const double v = map.values[r * n_cols + c];
      const double x = l.left + l.cell * static_cast<double>(c), y = l.top + l.cell * static_cast<double>(r);
      const Rgb colour = std::isnan(v) ? Rgb{224, 224, 224} : blues((v - map.vmin) / (map.vmax - map.vmin));
      // The tooltip (hover in a browser) keeps the full labels and more digits.
      put(out, "<rect class=\"cell\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"white\">", px(x),
          px(y), l.cell, l.cell, hex(colour));
      put(out, "<title>{} {} / {} {}: {}</title></rect>\n", xml_escaped(map.row_title), xml_escaped(map.row_labels[r]),
          xml_escaped(map.col_title), xml_escaped(map.col_labels[c]), fmt::format("{:.4g}", v));
      if (std::isnan(v)) nan_cell(out, x, y, l.cell);
      if (!map.show_values && !std::isnan(v)) continue;
      const std::string label = std::isnan(v) ? "nan" : fixed(v, 2);
      const double size = std::min(11.0, (l.cell - 6) / (0.62 * static_cast<double>(label.size())));
      const char* fill = std::isnan(v) ? "#444444" : is_dark(colour) ? "white" : "#222222";
      text(out, x + l.cell / 2, y + l.cell / 2 + 0.35 * size, label,
           fmt::format("text-anchor=\"middle\" font-size=\"{}\" fill=\"{}\"", px(size), fill));
    }
  }
}

void heatmap_labels(std::string& out, const Heatmap& map, const HeatmapLayout& l) {
  if (!map.title.empty()) title_text(out, l.width / 2, kPad + kTitleFont, map.title);
  const double y = kPad + (map.title.empty() ? 0 : kTitleFont + 10);
  if (!map.col_title.empty())
    text(out, l.left + l.grid_w / 2, y + kFont, map.col_title,
         "text-anchor=\"middle\" font-style=\"italic\" fill=\"#555555\"");
  for (std::size_t r = 0; r < l.rows.size(); ++r) {
    const double yc = l.top + l.cell * (static_cast<double>(r) + 0.5);
    const bool marked = std::find(map.marked_rows.begin(), map.marked_rows.end(), r) != map.marked_rows.end();
    text(out, l.left - 6, yc + 0.35 * kFont, l.rows[r],
         marked ? "text-anchor=\"end\" font-weight=\"bold\"" : "text-anchor=\"end\"");
    if (!marked) continue;
    const double tip = l.left - 6 - text_width(l.rows[r], kFont) - 3;  // a triangle pointing at the label
    put(out, "<path class=\"marked-row\" d=\"M{} {}L{} {}L{} {}Z\" fill=\"{}\"/>\n", px(tip), px(yc), px(tip - 8),
        px(yc - 5), px(tip - 8), px(yc + 5), kMarkColour);
  }
  for (std::size_t c = 0; c < l.cols.size(); ++c) {
    const double x = l.left + l.cell * (static_cast<double>(c) + 0.5);
    if (l.rotate_cols)  // the glyphs sit up-left of the baseline, so start right
      turned_text(out, x + 0.25 * kFont, l.top - 6, l.cols[c], 45);
    else
      text(out, x, l.top - 6, l.cols[c], "text-anchor=\"middle\"");
  }
  if (!map.row_title.empty())
    turned_text(out, kPad + kFont, l.top + l.grid_h / 2, map.row_title, 90,
                "text-anchor=\"middle\" font-style=\"italic\" fill=\"#555555\"");
  for (const auto& [r, c] : map.marked_cells)  // drawn over the cells, inside their edges
    put(out,
        "<rect class=\"marked-cell\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"{}\" "
        "stroke-width=\"3\"/>\n",
        px(l.left + l.cell * static_cast<double>(c) + 1.5), px(l.top + l.cell * static_cast<double>(r) + 1.5),
        px(l.cell - 3), px(l.cell - 3), kMarkColour);
  for (std::size_t i = 0; i < map.notes.size(); ++i)
    text(out, kPad, l.top + l.bar_h + 10 + kFont + kNoteLine * static_cast<double>(i), map.notes[i]);
}

// A vertical bar from vmin (bottom) to vmax (top), drawn as thin bands: a <linearGradient> would
// need an id.
void colour_bar(std::string& out, const Heatmap& map, const HeatmapLayout& l) {
  constexpr int kBands = 50;
  const double band = l.bar_h / kBands;
  for (int i = 0; i < kBands; ++i) {
    const double t = (i + 0.5) / kBands;
    // Each band overlaps the next by half a pixel, so anti-aliasing leaves no seams.
    put(out, "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"{}\" fill=\"{}\"/>\n", px(l.bar_x),
        px(l.top + l.bar_h - (i + 1) * band), px(band + 0.5), hex(blues(t)));
  }
  put(out, "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"{}\" fill=\"none\" stroke=\"#888888\"/>\n", px(l.bar_x),
      px(l.top), px(l.bar_h));
  text(out, l.bar_x + 20, l.top + kFont * 0.8, scale_label(map.vmax));
  text(out, l.bar_x + 20, l.top + l.bar_h, scale_label(map.vmin));
  if (map.value_title.empty()) return;
  turned_text(out, l.bar_x + 20 + l.bar_label_w + 6 + kFont, l.top + l.bar_h / 2, map.value_title, 90,
              "class=\"value-title\" text-anchor=\"middle\" fill=\"#555555\"");
}

// ---- line chart ----

// 10^k as the double nearest the decimal: for k < 0, 1 / 10^-k rounds once (10^-k is exact up to
// 10^22), where pow(10, k) may round differently.
double pow10(int k) { return k >= 0 ? std::pow(10.0, k) : 1.0 / std::pow(10.0, -k); }

// About `target` round tick values (1, 2 or 5 times a power of ten apart) that cover [lo, hi]: the
// first is <= lo and the last >= hi. nice_ticks(0.03, 0.97) is 0, 0.2, 0.4, 0.6, 0.8, 1. A single
// tick when lo == hi. Throws ValueError for non-finite bounds, lo > hi, or target < 1.
std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(hi - lo) || lo > hi || target < 1)  // hi - lo: finite bounds, and no overflow
    fail<ValueError>("nice_ticks: need finite lo <= hi and target >= 1, got lo {}, hi {}, target {}", lo, hi, target);
  if (lo == hi) return {lo};
  // Step = 1, 2, 5 or 10 times 10^k, the nearest to (hi - lo) / target.
  const double raw = (hi - lo) / target;
  const int k = static_cast<int>(std::floor(std::log10(raw)));
  const double norm = raw / pow10(k);
  const double mult = norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10;
  const double step = mult * pow10(k);
  // Tick i is i * mult * 10^k, computed as (i * mult) / 10^-k for k < 0: an integer over an exact
  // power of ten is the double nearest the decimal, so 3 * 0.2 prints as 0.6, not 0.6000000000000001.
  const auto tick = [&](long long i) {
    const double n = static_cast<double>(i) * mult;
    return k >= 0 ? n * pow10(k) : n / pow10(-k);
  };
  const auto first = static_cast<long long>(std::floor(lo / step + 1e-9));
  const auto last = static_cast<long long>(std::ceil(hi / step - 1e-9));
  std::vector<double> ticks;
  for (long long i = first; i <= last; ++i) ticks.push_back(tick(i));
  ticks.erase(std::unique(ticks.begin(), ticks.end()), ticks.end());  // steps below double precision
  return ticks;
}

// Powers of ten covering [lo, hi] (lo > 0), every stride-th decade so that about `target` remain,
// with 2 and 5 in between when the range spans at most two decades.
std::vector<double> log_ticks(double lo, double hi, int target) {
  const int k0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  int k1 = std::max(k0 + 1, static_cast<int>(std::ceil(std::log10(hi) - 1e-9)));
  const int stride = std::max(1, (k1 - k0 + target - 1) / target);
  k1 = k0 + (k1 - k0 + stride - 1) / stride * stride;
  std::vector<double> ticks;
  for (int k = k0; k <= k1; k += stride) {
    ticks.push_back(pow10(k));
    if (k1 - k0 <= 2 && k < k1) {
      ticks.push_back(2 * pow10(k));
      ticks.push_back(5 * pow10(k));
    }
  }
  return ticks;
}

// One axis in data units: [lo, hi], the ticks inside it and their labels.
struct Axis {
  double lo = 0, hi = 1;
  std::vector<double> ticks;
  bool log = false;
  std::vector<std::string> labels = {};

  // Position in [0, 1] along the axis.
  double unit(double v) const {
    return log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) : (v - lo) / (hi - lo);
  }
};

// As many decimals as the tick step needs: step 0.2 -> "0.4", step 5 -> "10", step 0.05 -> "0.15".
// On a log axis one notation for every tick: decimals (0.001 ... 1000) when they all have a short
// one, else mantissa and exponent ("1e-05" beside "0.001" reads as two scales).
std::string tick_label(const Axis& axis, double v) {
  const double largest = std::max(std::abs(axis.ticks.front()), std::abs(axis.ticks.back()));
  if (axis.log ? axis.ticks.front() >= 1e-4 && axis.ticks.back() < 1e5 : largest >= 1e6) return fmt::format("{:g}", v);
  if (axis.log) {
    const int k = static_cast<int>(std::floor(std::log10(v) + 1e-9));
    return fmt::format("{:g}e{}", std::round(v / pow10(k)), k);
  }
  const double step = axis.ticks.size() > 1 ? axis.ticks[1] - axis.ticks[0] : 1;
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-6));
  return fixed(v, decimals);
}

// The axis for data in [lo, hi] (lo > hi when there is none) and the caller's fixed bounds: free
// bounds end on ticks; a single value or no data gets a range around it.
Axis make_axis(double lo, double hi, std::optional<double> fixed_lo, std::optional<double> fixed_hi, bool log) {
  if (fixed_lo) lo = *fixed_lo;
  if (fixed_hi) hi = *fixed_hi;
  const auto up = [log](double v) { return log ? v * 10 : v + (v == 0 ? 1 : std::abs(v) * 0.1); };
  const auto down = [log](double v) { return log ? v / 10 : v - (v == 0 ? 1 : std::abs(v) * 0.1); };
  if (!(lo < hi)) {
    if (fixed_lo)
      hi = up(lo);
    else if (fixed_hi)
      lo = down(hi);
    else if (lo > hi) {  // no data
      lo = log ? 1 : 0;
      hi = log ? 10 : 1;
    } else {
      lo = down(lo);
      hi = up(hi);
    }
  }
  Axis axis{.lo = lo, .hi = hi, .ticks = log ? log_ticks(lo, hi, 5) : nice_ticks(lo, hi, 5), .log = log};
  if (!fixed_lo) axis.lo = axis.ticks.front();
  if (!fixed_hi) axis.hi = axis.ticks.back();
  const double eps = 1e-9 * (axis.hi - axis.lo);
  std::erase_if(axis.ticks, [&](double t) { return t < axis.lo - eps || t > axis.hi + eps; });
  for (double t : axis.ticks) axis.labels.push_back(tick_label(axis, t));
  return axis;
}

bool drawable(double x, double y, bool log_y) { return std::isfinite(x) && std::isfinite(y) && (!log_y || y > 0); }

struct ChartLayout {
  Axis x, y;
  double left = 0, top = 0, plot_w = 480, plot_h = 300;
  double legend_x = 0, width = 0, height = 0;
  std::vector<std::string> legend;  // the series' names as the legend shows them

  // Where (x, y) is drawn in the plot area inset by `inset`. Points far outside a fixed y range are
  // pulled in to 1e5 px, so their coordinates stay short.
  std::pair<double, double> at(double xv, double yv, double inset) const {
    return {inset + x.unit(xv) * plot_w, std::clamp(inset + (1 - y.unit(yv)) * plot_h, -1e5, 1e5)};
  }
};

// The series' sizes, and each axis' fixed bounds: finite (positive on a log axis) and ordered.
void check_chart(const LineChart& chart, std::string_view op) {
  for (const Series& s : chart.series)
    if (s.x.size() != s.y.size())
      fail<ShapeError>("{}: series '{}' has {} x values but {} y values", op, s.name, s.x.size(), s.y.size());
  const std::tuple<char, std::optional<double>, std::optional<double>, bool> axes[] = {
      {'x', chart.x_min, chart.x_max, false}, {'y', chart.y_min, chart.y_max, chart.log_y}};
  for (const auto& [axis, lo, hi, log] : axes) {
    for (const auto& [end, bound] : {std::pair("min", lo), std::pair("max", hi)})
      if (bound && (!std::isfinite(*bound) || (log && *bound <= 0)))
        fail<ValueError>("{}: {}_{} {} is not {}", op, axis, end, *bound,
                         log ? "finite and positive on a log axis" : "finite");
    if (lo && hi && !(*lo < *hi)) fail<ValueError>("{}: {}_min {} must be below {}_max {}", op, axis, *lo, axis, *hi);
  }
}

ChartLayout chart_layout(const LineChart& chart) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  double x_lo = inf, x_hi = -inf, y_lo = inf, y_hi = -inf;
  for (const Series& s : chart.series)
    for (std::size_t i = 0; i < s.x.size(); ++i)
      if (drawable(s.x[i], s.y[i], chart.log_y)) {
        x_lo = std::min(x_lo, s.x[i]);
        x_hi = std::max(x_hi, s.x[i]);
        y_lo = std::min(y_lo, s.y[i]);
        y_hi = std::max(y_hi, s.y[i]);
      }
  ChartLayout l;
  l.x = make_axis(x_lo, x_hi, chart.x_min, chart.x_max, false);
  l.y = make_axis(y_lo, y_hi, chart.y_min, chart.y_max, chart.log_y);
  l.left = kPad + (chart.y_label.empty() ? 0 : kFont + 10) + widest(l.y.labels, kFont) + 8;
  l.top = kPad + (chart.title.empty() ? 0 : kTitleFont + 14) + 6;  // room for the top tick's label
  for (std::size_t i = 0; i < chart.series.size(); ++i)            // "series <n>" for a series without a name
    l.legend.push_back(chart.series[i].name.empty() ? fmt::format("series {}", i + 1) : chart.series[i].name);
  const double legend_w = l.legend.empty() ? 0 : 30 + widest(l.legend, kFont);
  l.legend_x = l.left + l.plot_w + 20;
  // The last x tick label is centred on the right edge of the plot.
  const double x_overhang = l.x.labels.empty() ? 0 : text_width(l.x.labels.back(), kFont) / 2;
  const double right = std::max(l.left + l.plot_w + x_overhang, legend_w > 0 ? l.legend_x + legend_w : 0);
  l.width = std::max(right + kPad, text_width(chart.title, kTitleFont) + 2 * kPad);
  const double bottom = 8 + kFont + (chart.x_label.empty() ? 0 : kFont + 10) + kPad;
  l.height = std::max(l.top + l.plot_h + bottom, l.top + 18 * static_cast<double>(chart.series.size()) + kPad);
  return l;
}

void chart_axes(std::string& out, const LineChart& chart, const ChartLayout& l) {
  const double bottom = l.top + l.plot_h;
  for (std::size_t i = 0; i < l.y.ticks.size(); ++i) {
    const double y = bottom - l.y.unit(l.y.ticks[i]) * l.plot_h;
    put(out, "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#e6e6e6\"/>\n", px(l.left), px(y),
        px(l.left + l.plot_w));
    text(out, l.left - 6, y + 0.35 * kFont, l.y.labels[i], "text-anchor=\"end\" fill=\"#444444\"");
  }
  for (std::size_t i = 0; i < l.x.ticks.size(); ++i) {
    const double x = l.left + l.x.unit(l.x.ticks[i]) * l.plot_w;
    put(out, "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#e6e6e6\"/>\n", px(x), px(l.top), px(bottom));
    text(out, x, bottom + 6 + kFont, l.x.labels[i], "text-anchor=\"middle\" fill=\"#444444\"");
  }
  put(out, "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888888\"/>\n", px(l.left),
      px(l.top), l.plot_w, l.plot_h);
  if (!chart.title.empty()) title_text(out, l.width / 2, kPad + kTitleFont, chart.title);
  if (!chart.x_label.empty())
    text(out, l.left + l.plot_w / 2, bottom + 8 + 2 * kFont + 6, chart.x_label, "text-anchor=\"middle\"");
  if (!chart.y_label.empty())
    turned_text(out, kPad + kFont, l.top + l.plot_h / 2, chart.y_label, 90, "text-anchor=\"middle\"");
}

// One <path class="series"> per series with a drawable point: a skipped point starts a new subpath
// (M), so it leaves a gap; a point alone between gaps gets a dot, as a one-point subpath draws nothing.
// A scatter plot's series are dots only. Coordinates are relative to the plot area inset by `inset`.
void chart_series(std::string& out, const LineChart& chart, const ChartLayout& l, double inset, bool scatter) {
  for (std::size_t s = 0; s < chart.series.size(); ++s) {
    const Series& series = chart.series[s];
    std::string d, dots;
    std::size_t run = 0;  // points in the current subpath
    for (std::size_t i = 0; i <= series.x.size(); ++i) {
      const bool ok = i < series.x.size() && drawable(series.x[i], series.y[i], chart.log_y);
      if (!ok && run == 1 && !scatter) {  // the previous point was alone
        const auto [x, y] = l.at(series.x[i - 1], series.y[i - 1], inset);
        put(dots, "<circle cx=\"{}\" cy=\"{}\" r=\"2.5\" fill=\"{}\"/>\n", px(x), px(y), series_colour(s));
      }
      if (!ok) {
        run = 0;
        continue;
      }
      const auto [x, y] = l.at(series.x[i], series.y[i], inset);
      if (scatter)
        put(dots, "<circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{}\" stroke=\"white\" stroke-width=\"0.7\"/>\n", px(x),
            px(y), series_colour(s));
      else
        put(d, "{}{} {}", run == 0 ? "M" : run == 1 ? "L" : " ", px(x), px(y));
      ++run;
    }
    if (!d.empty())
      put(out, "<path class=\"series\" d=\"{}\" fill=\"none\" {} stroke-width=\"2\" stroke-linejoin=\"round\"/>\n", d,
          series_style(s));
    out += dots;
  }
}

// A line per series, or a dot for a scatter plot's.
void chart_legend(std::string& out, const LineChart& chart, const ChartLayout& l, bool dots) {
  for (std::size_t s = 0; s < chart.series.size(); ++s) {
    const double y = l.top + 9 + 18 * static_cast<double>(s);
    if (dots)
      put(out, "<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{}\"/>\n", px(l.legend_x + 11), px(y), series_colour(s));
    else
      put(out, "<line x1=\"{0}\" y1=\"{2}\" x2=\"{1}\" y2=\"{2}\" {3} stroke-width=\"2\"/>\n", px(l.legend_x),
          px(l.legend_x + 22), px(y), series_style(s));
    text(out, l.legend_x + 28, y + 0.35 * kFont, l.legend[s]);
  }
}

// ---- scatter plot ----

// The field's colour: the first palette colour at 0, white at 0.5, the second at 1, paler than the dots.
std::string field_colour(double v) {
  const Rgb a{0x4e, 0x79, 0xa7}, b{0xf2, 0x8e, 0x2b};
  const double t = std::clamp(v, 0.0, 1.0);
  return hex(mix({255, 255, 255}, t < 0.5 ? a : b, 0.55 * std::abs(2 * t - 1)));  // at most 55% of the way
}

// The cells, and the 0.5 contour by marching squares over the cell centres: each square of four
// neighbouring centres that the level crosses gets a segment between the crossings on its edges,
// placed by linear interpolation.
void scatter_field(std::string& out, const ScatterPlot& plot, const ChartLayout& l, double inset) {
  const std::size_t rows = plot.field_rows, cols = plot.field_cols;
  const double cw = l.plot_w / static_cast<double>(cols), ch = l.plot_h / static_cast<double>(rows);
  const auto value = [&](std::size_t r, std::size_t c) { return plot.field[r * cols + c]; };
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c)  // half a pixel of overlap, so anti-aliasing leaves no seams
      put(out, "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n",
          px(inset + cw * static_cast<double>(c)), px(inset + l.plot_h - ch * static_cast<double>(r + 1)), px(cw + 0.5),
          px(ch + 0.5), field_colour(value(r, c)));
  // Centre of cell (r, c) in pixels; (r, c) fractional along an edge.
  const auto at = [&](double r, double c) {
    return std::pair(inset + cw * (c + 0.5), inset + l.plot_h - ch * (r + 0.5));
  };
  std::string d;
  for (std::size_t r = 0; r + 1 < rows; ++r)
    for (std::size_t c = 0; c + 1 < cols; ++c) {
      // The corners counter-clockwise from (r, c), as offsets; an edge is crossed when its ends lie on both
      // sides of 0.5.
      constexpr std::array<std::pair<int, int>, 4> k = {{{0, 0}, {0, 1}, {1, 1}, {1, 0}}};
      std::vector<std::pair<double, double>> hits;
      for (std::size_t e = 0; e < 4; ++e) {
        const auto [r0, c0] = k[e];
        const auto [r1, c1] = k[(e + 1) % 4];
        const double v0 = value(r + r0, c + c0) - 0.5, v1 = value(r + r1, c + c1) - 0.5;
        if ((v0 < 0) == (v1 < 0) || !std::isfinite(v0) || !std::isfinite(v1)) continue;
        const double f = v0 / (v0 - v1);
        hits.push_back(at(static_cast<double>(r) + r0 + f * (r1 - r0), static_cast<double>(c) + c0 + f * (c1 - c0)));
      }
      for (std::size_t h = 0; h + 1 < hits.size(); h += 2)  // 2 crossings, or 4 at a saddle: pair them in order
        put(d, "M{} {}L{} {}", px(hits[h].first), px(hits[h].second), px(hits[h + 1].first), px(hits[h + 1].second));
    }
  if (!d.empty())
    put(out, "<path class=\"boundary\" d=\"{}\" fill=\"none\" stroke=\"#333333\" stroke-width=\"1.5\"/>\n", d);
}

// A line chart's document, or a scatter plot's when `scatter` is given. The plot area is a nested <svg>,
// which clips what it holds (overflow is hidden on inner svg elements) without a <clipPath> id; inset by
// the stroke width (a line chart's) or a dot's radius (a scatter plot's), so a line or dot on an edge is
// drawn whole. A scatter plot's field goes under its axes and grid, a line chart's lines over them; its
// legend shows dots.
std::string chart_svg(const LineChart& chart, std::string_view op, const ScatterPlot* scatter) {
  check_chart(chart, op);
  const ChartLayout layout = chart_layout(chart);
  std::string body;
  if (!scatter) chart_axes(body, chart, layout);
  const double inset = scatter ? 4 : 3;
  put(body, "<svg x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\">\n", px(layout.left - inset), px(layout.top - inset),
      layout.plot_w + 2 * inset, layout.plot_h + 2 * inset);
  if (scatter && !scatter->field.empty()) scatter_field(body, *scatter, layout, inset);
  chart_series(body, chart, layout, inset, scatter);
  body += "</svg>\n";
  if (scatter) chart_axes(body, chart, layout);
  chart_legend(body, chart, layout, scatter);
  return svg_document(layout.width, layout.height, chart.title, body);
}

// The value of attribute `name` in an <svg> start tag, when it is in pixels ("640" or "640px").
std::optional<double> pixel_attribute(std::string_view tag, std::string_view name) {
  const std::string key = fmt::format(" {}=\"", name);
  const auto at = tag.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  const char* end = tag.data() + tag.size();
  double v = 0;
  const auto [rest, ec] = std::from_chars(tag.data() + at + key.size(), end, v);
  const std::string_view unit(rest, static_cast<std::size_t>(end - rest));  // then the closing quote
  if (ec != std::errc() || !(v >= 0) || !(unit.starts_with("\"") || unit.starts_with("px\""))) return std::nullopt;
  return v;
}

}  // namespace

std::string heatmap_svg(const Heatmap& map) {
  const std::size_t rows = map.row_labels.size(), cols = map.col_labels.size();
  if (rows == 0 || cols == 0 || map.values.size() != rows * cols)
    fail<ShapeError>("heatmap_svg: {} values for {} row labels x {} column labels ({} cells)", map.values.size(), rows,
                     cols, rows * cols);
  if (!std::isfinite(map.vmin) || !std::isfinite(map.vmax) || !(map.vmin < map.vmax))
    fail<ValueError>("heatmap_svg: vmin {} must be below vmax {}, both finite", map.vmin, map.vmax);
  for (std::size_t r : map.marked_rows)
    if (r >= rows) fail<ShapeError>("heatmap_svg: marked row {} is outside the {} rows", r, rows);
  for (const auto& [r, c] : map.marked_cells)
    if (r >= rows || c >= cols)
      fail<ShapeError>("heatmap_svg: marked cell ({}, {}) is outside the {} x {} grid", r, c, rows, cols);
  const HeatmapLayout layout = heatmap_layout(map);
  std::string body;
  heatmap_cells(body, map, layout);
  heatmap_labels(body, map, layout);
  colour_bar(body, map, layout);
  return svg_document(layout.width, layout.height, map.title, body);
}

std::string line_chart_svg(const LineChart& chart) { return chart_svg(chart, "line_chart_svg", nullptr); }

std::string scatter_svg(const ScatterPlot& plot) {
  if (!plot.field.empty() &&
      (plot.field.size() != plot.field_rows * plot.field_cols || plot.field_rows < 2 || plot.field_cols < 2))
    fail<ShapeError>("scatter_svg: the field has {} values for {} x {} cells (at least 2 x 2)", plot.field.size(),
                     plot.field_rows, plot.field_cols);
  // The axes, labels and legend of a line chart over the fixed range.
  const LineChart chart{.title = plot.title,
                        .x_label = plot.x_label,
                        .y_label = plot.y_label,
                        .series = plot.series,
                        .y_min = plot.y_min,
                        .y_max = plot.y_max,
                        .x_min = plot.x_min,
                        .x_max = plot.x_max};
  return chart_svg(chart, "scatter_svg", &plot);
}

std::string svg_row(const std::vector<std::string>& svgs, double gap) {
  if (svgs.empty()) fail<ValueError>("svg_row: no documents to place side by side");
  if (!std::isfinite(gap) || gap < 0) fail<ValueError>("svg_row: gap {} must be finite and >= 0", gap);
  // Each document from its <svg> on (no XML declaration), in a translated group, which moves it without
  // touching its root tag's attributes.
  std::string groups;
  double x = 0, width = gap * static_cast<double>(svgs.size() - 1), height = 0;
  for (std::size_t i = 0; i < svgs.size(); ++i) {
    const std::string_view doc = svgs[i];
    const auto start = doc.find("<svg");
    const auto tag_end = start == std::string_view::npos ? start : doc.find('>', start);
    const auto tag = tag_end == std::string_view::npos ? std::string_view() : doc.substr(start, tag_end - start);
    const auto w = pixel_attribute(tag, "width"), h = pixel_attribute(tag, "height");
    if (!w || !h) fail<ValueError>("svg_row: document {} has no <svg> root with a width and height in pixels", i);
    put(groups, "<g transform=\"translate({} 0)\">\n{}</g>\n", px(x), doc.substr(start));
    x += *w + gap;
    width += *w;
    height = std::max(height, *h);
  }
  return svg_document(width, height, {}, groups);
}

}  // namespace tapegrad

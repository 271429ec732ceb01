// train/plot: SVG heatmaps, line charts, svg_row and write_file.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "tapegrad/core/error.hpp"
#include "tapegrad/train/plot/plot.hpp"
#include "helpers.hpp"

using namespace tapegrad;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Empty when `svg` is well-formed as far as these plots go, else what is wrong: tags balance (a stack
// of open tags; self-closing ones pushed and popped at once), every '&' starts an entity, attribute
// quotes pair up, and there is exactly one root element, an <svg> with the SVG namespace and an
// explicit width, height and viewBox.
std::string well_formed(std::string_view svg) {
  std::vector<std::string> open;
  int roots = 0;
  for (std::size_t i = 0; (i = svg.find('&', i)) != std::string_view::npos; ++i) {
    const std::string_view rest = svg.substr(i);
    if (!rest.starts_with("&amp;") && !rest.starts_with("&lt;") && !rest.starts_with("&gt;") &&
        !rest.starts_with("&quot;") && !rest.starts_with("&#39;"))
      return fmt::format("a bare '&' at offset {}", i);
  }
  for (std::size_t i = 0; (i = svg.find('<', i)) != std::string_view::npos;) {
    const auto end = svg.find('>', i);  // '>' inside attribute values is escaped, so it ends the tag
    if (end == std::string_view::npos) return fmt::format("the tag at offset {} never ends", i);
    const std::string_view tag = svg.substr(i + 1, end - i - 1);
    i = end + 1;
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return fmt::format("unpaired quote in <{}>", tag);
    if (tag.starts_with('/')) {
      if (open.empty() || open.back() != tag.substr(1))
        return fmt::format("</{}> closes <{}>", tag.substr(1), open.empty() ? "nothing" : open.back());
      open.pop_back();
      continue;
    }
    const std::string name(tag.substr(0, tag.find_first_of(" \t\n/")));
    if (open.empty()) {
      ++roots;
      for (const char* required : {"xmlns=\"http://www.w3.org/2000/svg\"", " width=\"", " height=\"", " viewBox=\""})
        if (name != "svg" || tag.find(required) == std::string_view::npos)
          return fmt::format("root <{}> lacks {}", name, required);
    }
    if (!tag.ends_with('/')) open.push_back(name);
  }
  if (!open.empty()) return fmt::format("<{}> is never closed", open.back());
  if (roots != 1) return fmt::format("{} root elements", roots);
  return {};
}

// Every document a test produces goes through the well-formedness check.
std::string checked(std::string svg) {
  const std::string problem = well_formed(svg);
  CHECK_MESSAGE(problem.empty(), problem);
  return svg;
}

using test::count;

bool contains(std::string_view text, std::string_view needle) { return text.find(needle) != std::string_view::npos; }

// The value of attribute `name` in the start tag `tag`, empty when it has none.
std::string attribute(std::string_view tag, std::string_view name) {
  const std::string key = fmt::format(" {}=\"", name);
  const auto at = tag.find(key);
  if (at == std::string_view::npos) return {};
  const auto begin = at + key.size();
  return std::string(tag.substr(begin, tag.find('"', begin) - begin));
}

std::string_view root_tag(std::string_view svg) { return svg.substr(0, svg.find('>')); }

// The start tags of every element that starts with `prefix` ("<rect class=\"cell\""), in order.
std::vector<std::string> tags(std::string_view svg, std::string_view prefix) {
  std::vector<std::string> out;
  for (auto i = svg.find(prefix); i != std::string_view::npos; i = svg.find(prefix, i + 1))
    out.emplace_back(svg.substr(i, svg.find('>', i) - i));
  return out;
}

// The start tag of the <text> element whose content is exactly `content`.
std::string text_tag(std::string_view svg, std::string_view content) {
  const auto at = svg.find(fmt::format(">{}</text>", content));
  if (at == std::string_view::npos) return {};
  const auto start = svg.rfind("<text", at);
  return std::string(svg.substr(start, at - start));
}

// The labels of the y axis's ticks, bottom to top.
std::vector<std::string> y_tick_labels(std::string_view svg) {
  constexpr std::string_view key = " text-anchor=\"end\" fill=\"#444444\">";
  std::vector<std::string> out;
  for (auto i = svg.find(key); i != std::string_view::npos; i = svg.find(key, i + 1))
    out.emplace_back(svg.substr(i + key.size(), svg.find('<', i) - i - key.size()));
  return out;
}

Heatmap small_heatmap() {
  // (3, 4): vmin and vmax cells, values beyond both ends, a NaN.
  return Heatmap{.title = "head 0",
                 .row_labels = {"<b>&", "cat", "sat"},
                 .col_labels = {"<b>&", "cat", "sat", "on"},
                 .values = {1.0, 0.0, 0.25, 0.126, 0.5, 1.7, -0.3, kNaN, 0.333, 0.333, 0.004, 0.33}};
}

}  // namespace

TEST_CASE("plot: the well-formedness check itself rejects broken documents") {
  const std::string root = R"(<svg xmlns="http://www.w3.org/2000/svg" width="4" height="3" viewBox="0 0 4 3">)";
  CHECK(well_formed(root + "<g><rect/></g></svg>").empty());
  CHECK(well_formed(root + "<g></svg>") == "</svg> closes <g>");
  CHECK(well_formed(root + "<g>") == "<g> is never closed");
  CHECK(well_formed(root + "</svg>" + root + "</svg>") == "2 root elements");
  CHECK(well_formed(root + "<text>a & b</text></svg>") == "a bare '&' at offset 87");
  CHECK(well_formed(R"(<svg width="4" height="3" viewBox="0 0 4 3"></svg>)") ==
        R"(root <svg> lacks xmlns="http://www.w3.org/2000/svg")");
  CHECK(well_formed(root + R"(<rect fill="red/></svg>)") == R"(unpaired quote in <rect fill="red/>)");
}

TEST_CASE("plot: heatmap draws one cell per value with escaped labels, values and a colour scale") {
  const std::string svg = checked(heatmap_svg(small_heatmap()));
  const auto cells = tags(svg, "<rect class=\"cell\"");
  REQUIRE(cells.size() == 12);
  CHECK(count(svg, "&lt;b&gt;&amp;") >= 2);  // row and column label
  CHECK_FALSE(contains(svg, "<b>"));
  for (const char* value : {"1.00", "0.00", "0.25", "0.13", "0.50", "1.70", "-0.30", "0.33"})
    CHECK_MESSAGE(!text_tag(svg, value).empty(), value);
  // White at vmin, dark blue at vmax; beyond them the ends of the scale.
  CHECK(attribute(cells[1], "fill") == "#f7fbff");
  CHECK(attribute(cells[0], "fill") == "#08306b");
  CHECK(attribute(cells[5], "fill") == attribute(cells[0], "fill"));
  CHECK(attribute(cells[6], "fill") == attribute(cells[1], "fill"));
  CHECK(attribute(cells[4], "fill") != attribute(cells[0], "fill"));
  // Text switches to white on the dark cells only.
  CHECK(attribute(text_tag(svg, "1.00"), "fill") == "white");
  CHECK(attribute(text_tag(svg, "0.00"), "fill") != "white");
  CHECK(count(svg, ">nan</text>") == 1);
  CHECK(contains(svg, "<title>query sat / key on: 0.33</title>"));  // hover tooltip
  CHECK(contains(svg, ">0</text>"));                                 // colour bar ends
  CHECK(contains(svg, ">1</text>"));
}

TEST_CASE("plot: heatmap without values still labels NaN cells") {
  Heatmap map = small_heatmap();
  map.show_values = false;
  map.row_title = map.col_title = "";
  const std::string svg = checked(heatmap_svg(map));
  CHECK(tags(svg, "<rect class=\"cell\"").size() == 12);
  CHECK(text_tag(svg, "0.25").empty());
  CHECK(count(svg, ">nan</text>") == 1);
  CHECK_FALSE(contains(svg, "italic"));  // no axis titles
}

TEST_CASE("plot: heatmap rotates long column labels and shortens very long ones") {
  Heatmap map{.row_labels = {"a", "line\nbreak"},
              .col_labels = {"attention", "an_extremely_long_token_name"},
              .values = {0.1, 0.2, 0.3, 0.4}};
  const std::string svg = checked(heatmap_svg(map));
  CHECK(contains(svg, "rotate(-45"));
  CHECK(contains(svg, ">an_extremely_lo\u2026</text>"));                // 16 code points
  CHECK(contains(svg, "key an_extremely_long_token_name: 0.2</title>"));  // tooltip keeps it whole
  CHECK(contains(svg, ">line\\nbreak</text>"));  // a newline token stays visible

  map.col_labels = {"a", "b"};
  CHECK_FALSE(contains(checked(heatmap_svg(map)), "rotate(-45"));
}

TEST_CASE("plot: heatmap size mismatches and a bad scale are errors naming the counts") {
  Heatmap map{.row_labels = {"a", "b", "c"}, .col_labels = {"v", "w", "x", "y", "z"}};
  map.values.resize(12);
  CHECK_THROWS_WITH_AS(heatmap_svg(map), "heatmap_svg: 12 values for 3 row labels x 5 column labels (15 cells)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(heatmap_svg(Heatmap{}), "heatmap_svg: 0 values for 0 row labels x 0 column labels (0 cells)",
                       ShapeError);
  map.values.resize(15);
  map.vmin = 1;
  CHECK_THROWS_WITH_AS(heatmap_svg(map), "heatmap_svg: vmin 1 must be below vmax 1, both finite", ValueError);
}

TEST_CASE("plot: heatmap marks rows and cells, titles its colour bar and writes notes under the grid") {
  Heatmap map = small_heatmap();
  CHECK(tags(checked(heatmap_svg(map)), "class=\"marked").empty());  // nothing marked by default
  map.value_title = "attention weight";
  map.marked_rows = {2};
  map.marked_cells = {{2, 0}, {1, 3}};
  map.notes = {"orange: the key that holds the answer", "query 2 puts 0.33 on it"};
  const std::string svg = checked(heatmap_svg(map));
  CHECK(tags(svg, "<path class=\"marked-row\"").size() == 1);
  CHECK(attribute(text_tag(svg, "sat"), "font-weight") == "bold");  // the marked row's label
  CHECK(attribute(text_tag(svg, "cat"), "font-weight").empty());
  const auto cells = tags(svg, "<rect class=\"marked-cell\"");
  REQUIRE(cells.size() == 2);
  const auto grid = tags(svg, "<rect class=\"cell\"");  // the outline sits inside its cell: row 2, column 0
  CHECK(std::stod(attribute(cells[0], "x")) == doctest::Approx(std::stod(attribute(grid[8], "x")) + 1.5));
  CHECK(std::stod(attribute(cells[0], "y")) == doctest::Approx(std::stod(attribute(grid[8], "y")) + 1.5));
  CHECK(std::stod(attribute(cells[1], "x")) == doctest::Approx(std::stod(attribute(grid[7], "x")) + 1.5));
  CHECK(contains(text_tag(svg, "attention weight"), "rotate(-90"));
  // The notes sit below the grid, one line each, inside the document.
  const double note_y = std::stod(attribute(text_tag(svg, "query 2 puts 0.33 on it"), "y"));
  CHECK(note_y > std::stod(attribute(grid[11], "y")) + std::stod(attribute(grid[11], "height")));
  CHECK(note_y < std::stod(attribute(root_tag(svg), "height")));
  CHECK(note_y > std::stod(attribute(text_tag(svg, "orange: the key that holds the answer"), "y")));

  map.marked_rows = {3};
  CHECK_THROWS_WITH_AS(heatmap_svg(map), "heatmap_svg: marked row 3 is outside the 3 rows", ShapeError);
  map.marked_rows = {};
  map.marked_cells = {{0, 4}};
  CHECK_THROWS_WITH_AS(heatmap_svg(map), "heatmap_svg: marked cell (0, 4) is outside the 3 x 4 grid", ShapeError);
}

TEST_CASE("plot: a value axis has ticks 1, 2 or 5 times a power of ten apart that cover the data") {
  using V = std::vector<std::string>;
  const auto ticks = [](double lo, double hi) {
    return y_tick_labels(checked(line_chart_svg(LineChart{.series = {Series{.x = {0, 1}, .y = {lo, hi}}}})));
  };
  CHECK(ticks(0.03, 0.97) == V{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"});
  CHECK(ticks(0, 100) == V{"0", "20", "40", "60", "80", "100"});
  CHECK(ticks(1, 50) == V{"0", "10", "20", "30", "40", "50"});
  CHECK(ticks(2.3, 4.1) == V{"2.0", "2.5", "3.0", "3.5", "4.0", "4.5"});
  CHECK(ticks(-0.7, 0.2) == V{"-0.8", "-0.6", "-0.4", "-0.2", "0.0", "0.2"});
  CHECK(ticks(0.001, 0.0042) == V{"0.0010", "0.0015", "0.0020", "0.0025", "0.0030", "0.0035", "0.0040", "0.0045"});
  // Data a double cannot span is refused, not drawn with garbage ticks.
  CHECK_THROWS_WITH_AS(line_chart_svg(LineChart{.series = {Series{.x = {-1e308, 1e308}, .y = {0, 1}}}}),
                       "nice_ticks: need finite lo <= hi and target >= 1, got lo -1e+308, hi 1e+308, target 5",
                       ValueError);
}

TEST_CASE("plot: line chart draws one path per non-empty series, a legend and nice ticks") {
  Series train{.name = "train loss"}, val{.name = "val <loss>"};
  for (int i = 0; i <= 10; ++i) {
    train.x.push_back(i);
    train.y.push_back(0.97 - 0.094 * i);  // 0.97 down to 0.03
    val.x.push_back(i);
    val.y.push_back(0.9 - 0.05 * i);
  }
  LineChart chart{.title = "loss", .x_label = "epoch", .y_label = "cross-entropy",
                  .series = {train, val, Series{.name = "nothing yet"}}};
  const std::string svg = checked(line_chart_svg(chart));
  const auto paths = tags(svg, "<path class=\"series\"");
  REQUIRE(paths.size() == 2);
  CHECK(attribute(paths[0], "stroke") != attribute(paths[1], "stroke"));
  CHECK(count(attribute(paths[0], "d"), "M") == 1);
  for (const char* name : {"train loss", "val &lt;loss&gt;", "nothing yet", "loss", "epoch", "cross-entropy"})
    CHECK_MESSAGE(!text_tag(svg, name).empty(), name);
  for (const char* tick : {"0.0", "0.2", "0.4", "0.6", "0.8", "1.0", "0", "2", "10"})
    CHECK_MESSAGE(!text_tag(svg, tick).empty(), tick);
  CHECK(text_tag(svg, "1.2").empty());
}

TEST_CASE("plot: log axis and non-finite values leave gaps instead of garbage") {
  Series s{.name = "loss", .x = {0, 1, 2, 3, 4, 5, 6}, .y = {1, 0, -1, 10, 100, kNaN, 1000}};
  const std::string svg = checked(line_chart_svg(LineChart{.series = {s}, .log_y = true}));
  const auto paths = tags(svg, "<path class=\"series\"");
  REQUIRE(paths.size() == 1);
  // Drawable: points 0, 3-4 and 6, so three subpaths, one segment, and dots for the lone points.
  const std::string d = attribute(paths[0], "d");
  CHECK(count(d, "M") == 3);
  CHECK(count(d, "L") == 1);
  CHECK(count(svg, "<circle") == 2);
  for (const char* tick : {"1", "10", "100", "1000"}) CHECK_MESSAGE(!text_tag(svg, tick).empty(), tick);
  CHECK_FALSE(contains(svg, "nan"));
  CHECK_FALSE(contains(svg, "inf"));

  // Over a small range a log axis also gets 2 and 5 ticks.
  s = Series{.name = "lr", .x = {100, 200}, .y = {0.3, 4}};
  const std::string small = checked(line_chart_svg(LineChart{.series = {s}, .log_y = true}));
  for (const char* tick : {"0.1", "0.2", "0.5", "1", "2", "5", "10"})
    CHECK_MESSAGE(!text_tag(small, tick).empty(), tick);

  // One notation per axis: a loss falling to 1e-5 is labelled 1e-5 ... 1e0, never 0.001 beside 1e-05.
  s = Series{.name = "loss", .x = {0, 1, 2}, .y = {0.5, 0.01, 2e-5}};
  const std::string wide = checked(line_chart_svg(LineChart{.series = {s}, .log_y = true}));
  for (const char* tick : {"1e-5", "1e-4", "1e-3", "1e-2", "1e-1", "1e0"})
    CHECK_MESSAGE(!text_tag(wide, tick).empty(), tick);
  for (const char* plain : {"0.001", "1e-05", "1", "10"}) CHECK_MESSAGE(text_tag(wide, plain).empty(), plain);
}

TEST_CASE("plot: line chart with no data is an empty chart with axes, bad input an error") {
  for (const LineChart& chart : {LineChart{}, LineChart{.series = {Series{.name = "a"}}},
                                 LineChart{.series = {Series{.name = "b", .x = {1}, .y = {kNaN}}}, .log_y = true}}) {
    const std::string svg = checked(line_chart_svg(chart));
    CHECK_FALSE(contains(svg, "class=\"series\""));
    CHECK(count(svg, "stroke=\"#e6e6e6\"") >= 4);  // grid lines at the ticks
  }
  // Fixed bounds: the axis ends there, even when the data does not reach them.
  const Series acc{.name = "accuracy", .x = {0, 1, 2}, .y = {0.4, 0.6, 0.7}};
  const std::string fixed = checked(line_chart_svg(LineChart{.series = {acc}, .y_min = 0, .y_max = 1}));
  CHECK(!text_tag(fixed, "0.0").empty());
  CHECK(!text_tag(fixed, "1.0").empty());

  const Series bad{.name = "val", .x = {1, 2, 3}, .y = {1, 2}};
  CHECK_THROWS_WITH_AS(line_chart_svg(LineChart{.series = {acc, bad}}),
                       "line_chart_svg: series 'val' has 3 x values but 2 y values", ShapeError);
  CHECK_THROWS_WITH_AS(line_chart_svg(LineChart{.series = {acc}, .log_y = true, .y_min = 0}),
                       "line_chart_svg: y_min 0 is not finite and positive on a log axis", ValueError);
  CHECK_THROWS_WITH_AS(line_chart_svg(LineChart{.y_min = 2, .y_max = 1}),
                       "line_chart_svg: y_min 2 must be below y_max 1", ValueError);
}

TEST_CASE("plot: scatter plot draws its field's boundary and dots, and names itself in its refusals") {
  const Series a{.name = "a", .x = {0.2, 0.3}, .y = {0.5, 0.6}}, b{.name = "b", .x = {0.8}, .y = {0.5}};
  const std::string svg = checked(
      scatter_svg(ScatterPlot{.series = {a, b}, .field = {0, 1, 0, 1}, .field_rows = 2, .field_cols = 2}));
  CHECK(tags(svg, "<path class=\"boundary\"").size() == 1);  // the 0.5 contour between the two columns
  CHECK(count(svg, "r=\"3\"") == 3);                         // one dot per point

  // Each axis' fixed bounds are checked alike, and a scatter plot's refusals name scatter_svg.
  const Series bad{.name = "val", .x = {1, 2, 3}, .y = {1, 2}};
  CHECK_THROWS_WITH_AS(scatter_svg(ScatterPlot{.series = {bad}}),
                       "scatter_svg: series 'val' has 3 x values but 2 y values", ShapeError);
  CHECK_THROWS_WITH_AS(scatter_svg(ScatterPlot{.x_min = 2, .x_max = 1}), "scatter_svg: x_min 2 must be below x_max 1",
                       ValueError);
  CHECK_THROWS_WITH_AS(scatter_svg(ScatterPlot{.y_max = kNaN}), "scatter_svg: y_max nan is not finite", ValueError);
  CHECK_THROWS_WITH_AS(line_chart_svg(LineChart{.x_min = std::numeric_limits<double>::infinity()}),
                       "line_chart_svg: x_min inf is not finite", ValueError);
  CHECK_THROWS_WITH_AS(scatter_svg(ScatterPlot{.field = {0, 1, 0}, .field_rows = 2, .field_cols = 2}),
                       "scatter_svg: the field has 3 values for 2 x 2 cells (at least 2 x 2)", ShapeError);
}

TEST_CASE("plot: svg_row puts documents side by side, as wide as all of them") {
  const std::string a = checked(heatmap_svg(small_heatmap()));
  const std::string b = checked(line_chart_svg(LineChart{.title = "empty"}));
  const std::string row = checked(svg_row({a, b}, 16));
  const double wa = std::stod(attribute(root_tag(a), "width")), wb = std::stod(attribute(root_tag(b), "width"));
  const double ha = std::stod(attribute(root_tag(a), "height")), hb = std::stod(attribute(root_tag(b), "height"));
  CHECK(std::stod(attribute(root_tag(row), "width")) == wa + wb + 16);
  CHECK(std::stod(attribute(root_tag(row), "height")) == std::max(ha, hb));
  CHECK(contains(row, "translate(0.0 0)"));
  CHECK(contains(row, fmt::format("translate({:.1f} 0)", wa + 16)));
  CHECK(count(row, "<svg ") == count(a, "<svg ") + count(b, "<svg ") + 1);

  CHECK_THROWS_WITH_AS(svg_row({}), "svg_row: no documents to place side by side", ValueError);
  CHECK_THROWS_WITH_AS(svg_row({a, "<p>not a plot</p>"}),
                       "svg_row: document 1 has no <svg> root with a width and height in pixels", ValueError);
}

TEST_CASE("plot: write_file creates folders and leaves no temporary file behind") {
  namespace fs = std::filesystem;
  const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
  const fs::path dir = fs::temp_directory_path() / fmt::format("tapegrad_plot_test_{}", stamp);
  const fs::path path = dir / "report" / "charts" / "loss.svg";
  const std::string svg = checked(line_chart_svg(LineChart{.title = "loss"}));
  write_file(path, svg);
  CHECK(test::slurp(path) == svg);
  write_file(path, "replaced");
  CHECK(test::slurp(path) == "replaced");
  CHECK_FALSE(fs::exists(fs::path(path) += ".tmp"));
  CHECK(std::distance(fs::directory_iterator(path.parent_path()), fs::directory_iterator()) == 1);

  // A regular file where a folder should be.
  write_file(dir / "file", "x");
  const fs::path blocked = dir / "file" / "loss.svg";
  std::string message;
  try {
    write_file(blocked, svg);
  } catch (const Error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.starts_with("write_file: "));
  CHECK(contains(message, blocked.string()));
  fs::remove_all(dir);
}

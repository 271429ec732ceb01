#pragma once
// SVG plots for training reports: attention heatmaps with the tokens on the axes, loss and accuracy
// line charts, scatter plots over a classifier's field (decision boundaries), and a row that puts
// finished plots side by side (two models' attention, say).
//
// Every function returns one complete SVG 1.1 document (xmlns, width, height, viewBox in pixels) that
// a browser opens as it is. Text is XML-escaped, so tokens such as "<b>&" are safe; numbers go
// through fmt, so the output is the same in every locale. The documents use no element ids, so any
// number of them can be nested in one svg_row without clashing.
//
//   Heatmap map{.title = "head 0", .row_labels = tokens, .col_labels = tokens, .values = weights};
//   write_file("report/attention.svg", heatmap_svg(map));

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/core/file_io.hpp"  // write_file: a report open in a browser never sees half a file

namespace tapegrad {

// A rows x cols grid of values, one coloured cell each: attention weights with the query tokens as
// rows and the key tokens as columns.
// Every member has a default initializer, so designated initializers that leave some out do not
// trip GCC's -Wmissing-field-initializers.
struct Heatmap {
  std::string title = {};
  std::vector<std::string> row_labels = {};
  std::vector<std::string> col_labels = {};
  std::vector<double> values = {};  // (rows, cols), row-major
  std::string row_title = "query";
  std::string col_title = "key";
  bool show_values = true;  // print each value (2 decimals) in its cell
  // The colour scale runs from white at vmin to dark blue at vmax (ColorBrewer "Blues"); values
  // outside clamp to the ends. NaN cells are grey, hatched and labelled "nan".
  double vmin = 0, vmax = 1;
  std::string value_title = {};  // what the colours are ("attention weight"), written along the colour bar
  // Rows to point out (an arrow before the label, the label in bold: the queries that are labelled,
  // say) and cells to outline in orange (row, col: the keys that hold the answer).
  std::vector<std::size_t> marked_rows = {};
  std::vector<std::pair<std::size_t, std::size_t>> marked_cells = {};
  std::vector<std::string> notes = {};  // lines of text under the grid: what the marks mean, a reading
};

// Throws ShapeError when values.size() != rows * cols or the grid is empty, or a marked row or cell lies
// outside the grid (naming it), ValueError unless vmin < vmax (both finite).
std::string heatmap_svg(const Heatmap& map);

// One line of a chart: y[i] at x[i]. Points that are not finite (or not positive on a log axis) are
// skipped and leave a gap in the line.
struct Series {
  std::string name = {};
  std::vector<double> x = {}, y = {};
};

struct LineChart {
  std::string title = {}, x_label = {}, y_label = {};
  std::vector<Series> series = {};  // coloured in order from a fixed palette
  bool log_y = false;
  // Fixed bounds; a free bound ends on the first tick beyond the data.
  std::optional<double> y_min = {}, y_max = {};
  std::optional<double> x_min = {}, x_max = {};
};

// Throws ShapeError naming the series when its x and y sizes differ, ValueError for y bounds that
// are not finite, not ordered, or not positive on a log axis. No series (or only empty ones) gives
// an empty chart with axes.
std::string line_chart_svg(const LineChart& chart);

// Points in the plane, one colour per series (a class), over an optional field: a two-class
// classifier's probability of the second class on a grid, shaded from the first series' colour (0)
// through white (0.5) to the second's (1), with its 0.5 contour (the decision boundary) drawn as a line.
struct ScatterPlot {
  std::string title = {}, x_label = {}, y_label = {};
  std::vector<Series> series = {};                    // points (x[i], y[i]), drawn as dots
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;  // the plotted range (fixed)
  // field_rows x field_cols values in [0, 1], row-major, cell (r, c) centred at x_min + (c + 0.5) dx,
  // y_min + (r + 0.5) dy (row 0 at the bottom); empty for no field.
  std::vector<double> field = {};
  std::size_t field_rows = 0, field_cols = 0;
};

// Throws ShapeError when a series' x and y sizes differ or the field's size is not rows x cols, ValueError
// for a range that is not finite and ordered.
std::string scatter_svg(const ScatterPlot& plot);

// Places complete SVG documents (from the functions above, or any SVG whose root has its width and
// height in pixels) left to right, `gap` pixels apart, in one document as wide as all of them.
// Throws ValueError for an empty list, a negative gap or a document without a pixel width/height.
std::string svg_row(const std::vector<std::string>& svgs, double gap = 16);

}  // namespace tapegrad

#pragma once
// safetensors: the format the PyTorch and Hugging Face world exchanges weights in, for any Module.
//
// File layout (https://github.com/huggingface/safetensors):
//   0   u64 (little-endian)  N, the header's length
//   8   N bytes              JSON: {"<tensor>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//                            ..., "__metadata__": {"<key>": "<value>", ...}}, starting with '{', maybe
//                            padded with spaces
//   8+N                      the data buffer: each tensor's bytes, little-endian, row-major, at
//                            [begin, end) of the buffer
//
// The reader enforces every rule of the reference reader and a few more, for every caller, before it
// allocates anything a file's numbers ask for: a header of at most kMaxSafetensorsHeader bytes and no
// more than the file holds, starting with '{', valid UTF-8 JSON with unique names, known dtypes, shapes
// whose element count and byte size do not overflow, data_offsets [begin, end] with end - begin the
// tensor's byte size, tensors that cover the buffer from 0 with no hole or overlap, no byte after the last
// tensor (so an archive appended to a file is refused), and __metadata__ a map of strings to strings. A
// refusal is one FormatError line naming the rule and the tensor. The bytes inside a tensor are data and
// are not inspected: a U8 tensor may hold a ZIP.
//
// Layouts: `tapegrad` keeps the library's names and (in, out) weights ("attn.wq"); `pytorch` writes each
// layer as its PyTorch twin's state_dict holds it (Module::torch_name: "self_attn.in_proj_weight", weights
// transposed to (out, in), a tied head's table once), so that
//   model.load_state_dict(safetensors.torch.load_file("model.safetensors"), strict=True)
// loads it into the twin. docs/safetensors.md has the table of names.
//
//   save_safetensors("model.safetensors", model, {.layout = WeightLayout::pytorch});   // atomic
//   load_safetensors("model.safetensors", model, {.layout = WeightLayout::pytorch});   // strict, all or nothing
//   LoadReport r = load_safetensors(path, model, {.strict = false});                   // what fits, with a report

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/core/enum_names.hpp"
#include "tapegrad/layers/module.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"  // LoadReport, tapegrad_version

namespace tapegrad {

// The element types of the format, spelled as files spell them. tapegrad loads the floating-point ones
// it can convert exactly or by rounding (F16, BF16, F32, F64) and writes F32 or F64; the reader knows the
// others so that a file holding, say, an I64 buffer still reads, and names that tensor if it is asked for.
enum class SafetensorsDtype { boolean, u8, i8, f8_e5m2, f8_e4m3, i16, u16, f16, bf16, i32, u32, f32, i64, u64, f64 };
template <>
struct EnumNames<SafetensorsDtype> {
  static constexpr std::string_view what = "safetensors dtype";
  static constexpr std::array<EnumName<SafetensorsDtype>, 15> names = {{
      {SafetensorsDtype::boolean, "BOOL"},
      {SafetensorsDtype::u8, "U8"},
      {SafetensorsDtype::i8, "I8"},
      {SafetensorsDtype::f8_e5m2, "F8_E5M2"},
      {SafetensorsDtype::f8_e4m3, "F8_E4M3"},
      {SafetensorsDtype::i16, "I16"},
      {SafetensorsDtype::u16, "U16"},
      {SafetensorsDtype::f16, "F16"},
      {SafetensorsDtype::bf16, "BF16"},
      {SafetensorsDtype::i32, "I32"},
      {SafetensorsDtype::u32, "U32"},
      {SafetensorsDtype::f32, "F32"},
      {SafetensorsDtype::i64, "I64"},
      {SafetensorsDtype::u64, "U64"},
      {SafetensorsDtype::f64, "F64"},
  }};
};
std::size_t element_bytes(SafetensorsDtype dtype);

// Names and layouts: tapegrad's own, or those of each layer's PyTorch twin (Module::torch_name).
enum class WeightLayout { tapegrad, pytorch };
template <>
struct EnumNames<WeightLayout> {
  static constexpr std::string_view what = "weight layout";
  static constexpr std::array<EnumName<WeightLayout>, 2> names = {{
      {WeightLayout::tapegrad, "tapegrad"},
      {WeightLayout::pytorch, "pytorch"},
  }};
};

// The reference reader's cap on the header's length.
inline constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;
// The largest file load_safetensors reads by default (a larger one is a LimitError, before it is read).
inline constexpr std::size_t kMaxSafetensorsBytes = std::size_t{4} << 30;  // 4 GiB

// ---- bytes --------------------------------------------------------------------------------------------

struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::f32;
  std::vector<std::uint64_t> shape;  // any rank, as the file has it ([] is a scalar)
  std::span<const std::byte> data;   // its bytes, little-endian, row-major: a view, not a copy
  std::uint64_t numel() const;       // the product of the shape (decode_safetensors checked it fits)
};

// A safetensors file's header, with views of its tensors' bytes.
struct SafetensorsView {
  std::map<std::string, std::string> metadata = {};
  std::vector<SafetensorsTensor> tensors;  // in the order of their bytes in the file
};

// Every rule above, or FormatError "safetensors '<source>': <rule>"; the tensors view `bytes`, which must
// outlive the result. Allocates only for the header: names, shapes and metadata, read as the JSON is parsed
// (no JSON tree of the header: one tensor's values at a time); time n log n in the number of entries.
SafetensorsView decode_safetensors(std::span<const std::byte> bytes, std::string_view source);
// The file: tensors' bytes in the order given, the header padded with spaces to a multiple of 8 bytes
// (so that the data is aligned, as the reference writer does). ValueError for what no reader would accept:
// a name twice, a name or metadata that is not UTF-8, a tensor named "__metadata__", bytes that do not fit
// a tensor's dtype and shape.
std::vector<std::byte> encode_safetensors(const SafetensorsView& file);

// ---- files --------------------------------------------------------------------------------------------

// A safetensors file read whole and checked (decode_safetensors): its names, dtypes, shapes and metadata,
// and each tensor's values on request. Copies share the bytes.
struct SafetensorsFile {
  std::string source;                        // the path, for errors
  std::shared_ptr<const std::string> bytes;  // the file; the view's tensors point into it
  SafetensorsView view;
  const std::vector<SafetensorsTensor>& tensors() const { return view.tensors; }
  // The tensor `name` converted to T from F16, BF16, F32 or F64 (exactly, or rounded to nearest for f64 to
  // float), in its shape: rank 0 to 3. NameError for a name the file lacks; FormatError naming it for
  // another dtype or a rank above 3.
  template <class T>
  TensorT<T> tensor(std::string_view name) const;
};
// FileError for a file that cannot be read, LimitError over max_bytes, FormatError as decode_safetensors.
//   for (const auto& t : f.tensors()) fmt::print("{} {} {}\n", t.name, to_string(t.dtype), t.shape.size());
SafetensorsFile read_safetensors(const std::filesystem::path& path, std::size_t max_bytes = kMaxSafetensorsBytes);

// ---- modules --------------------------------------------------------------------------------------------

struct SafetensorsSaveOptions {
  WeightLayout layout = WeightLayout::tapegrad;
  // F32 or F64 (ValueError for another); by default the module's own: F32 for float, F64 for double.
  std::optional<SafetensorsDtype> dtype = std::nullopt;
  // The program's own, beside what tapegrad writes: "producer" ("tapegrad <version>"), "tapegrad.layout",
  // with the pytorch layout "format" = "pt" (what Hugging Face's loaders look for), and when the model has
  // a record (Module::model_record) "tapegrad.model" (its kind) and "tapegrad.config.<setting>" for each
  // setting. A key of the program's that is one of those is a ValueError.
  std::map<std::string, std::string> metadata = {};
};

struct SafetensorsLoadOptions {
  WeightLayout layout = WeightLayout::tapegrad;
  bool strict = true;                            // false: load the tensors whose name and shape match, report the rest
  std::size_t max_bytes = kMaxSafetensorsBytes;  // the largest file load_safetensors(path, ...) reads
};

// The module's weights as a safetensors file, in the layout and dtype asked for. ValueError if the pytorch
// layout is asked of a layer with no PyTorch twin (naming it and why), or if two parameters map to one name.
template <class T>
std::vector<std::byte> encode_safetensors(const Module<T>& model, const SafetensorsSaveOptions& options = {});
template <class T>
void save_safetensors(const std::filesystem::path& path, const Module<T>& model,
                      const SafetensorsSaveOptions& options = {});  // atomic; IoError naming the reason

// Weights into an existing module, converted from the file's F16, BF16, F32 or F64 to the module's type
// (the report's `converted` names each conversion). A file whose tapegrad.layout metadata names another
// layout than options.layout is a FormatError naming both, strict or not (read in the other layout, a
// square weight would load transposed); a file that names none is read in options.layout. The report's
// `loaded` holds the module's parameter names; `missing`, `unexpected` and `mismatched` the file's names
// (the twin's, in the pytorch layout).
// Strict: every tensor the layout expects, with its shape, a dtype tapegrad reads and finite values, and
// no other; or a FormatError naming every problem, and the module is unchanged. Not strict: the tensors
// that fit are loaded, the rest reported.
template <class T>
LoadReport load_safetensors(const SafetensorsView& file, Module<T>& model, const SafetensorsLoadOptions& options = {});
// The file at `path` (FileError, LimitError over options.max_bytes, FormatError as decode_safetensors).
template <class T>
LoadReport load_safetensors(const std::filesystem::path& path, Module<T>& model,
                            const SafetensorsLoadOptions& options = {});

}  // namespace tapegrad

#include "plugin/loader.h"

#include <dlfcn.h>

#include <cctype>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "plugin/attnkit_plugin.h"
#include "runtime/accounting.h"
#include "runtime/attention_block.h"
#include "runtime/enum_table.h"
#include "runtime/problem.h"
#include "runtime/text.h"

namespace attnkit::plugin {
namespace {

// The C ABI's values are the C++ enums' values: the loader passes them
// through with a cast. Each ATTNKIT_PLUGIN_* constant is listed here under
// the name of the C++ enumerator it stands for, and MatchesByName ties the
// two tables together (a reordered or extended enum fails to compile
// instead of mislabelling problems).
constexpr auto kPluginDTypes = MakeEnumTable<attnkit_plugin_dtype>({
    {ATTNKIT_PLUGIN_F32, "f32"},
    {ATTNKIT_PLUGIN_BF16, "bf16"},
    {ATTNKIT_PLUGIN_I8, "i8"},
});
constexpr auto kPluginMasks = MakeEnumTable<attnkit_plugin_mask>({
    {ATTNKIT_PLUGIN_MASK_NONE, "none"},
    {ATTNKIT_PLUGIN_MASK_CAUSAL, "causal"},
    {ATTNKIT_PLUGIN_MASK_WINDOW, "window"},
    {ATTNKIT_PLUGIN_MASK_BIAS, "bias"},
});
constexpr auto kPluginLayouts = MakeEnumTable<attnkit_plugin_layout>({
    {ATTNKIT_PLUGIN_LAYOUT_BHSD, "bhsd"},
    {ATTNKIT_PLUGIN_LAYOUT_BSHD, "bshd"},
    {ATTNKIT_PLUGIN_LAYOUT_TRANSPOSED_V, "tv"},
});
// Each status a plug-in returns, by the StatusCode it becomes.
constexpr auto kPluginStatusCodes = MakeEnumTable<attnkit_plugin_status>({
    {ATTNKIT_PLUGIN_OK, "OK"},
    {ATTNKIT_PLUGIN_UNSUPPORTED, "UNIMPLEMENTED"},
    {ATTNKIT_PLUGIN_INVALID_ARGUMENT, "INVALID_ARGUMENT"},
    {ATTNKIT_PLUGIN_INTERNAL, "INTERNAL"},
});

// Both tables have the same entries, a C constant and the C++ enumerator of
// its name having the same value.
template <typename C, typename Cpp, size_t N, size_t M>
constexpr bool MatchesByName(const EnumTable<C, N>& c,
                             const EnumTable<Cpp, M>& cpp) {
  if (N != M || !c.RoundTrips()) return false;
  for (const auto& e : c) {
    const auto v = cpp.Parse(e.name);
    if (!v || static_cast<int>(*v) != static_cast<int>(e.value)) return false;
  }
  return true;
}
static_assert(MatchesByName(kPluginDTypes, kDTypeNames));
static_assert(MatchesByName(kPluginMasks, kMaskKindNames));
static_assert(MatchesByName(kPluginLayouts, kKvLayoutNames));
static_assert(kPluginStatusCodes.RoundTrips());
static_assert([] {
  for (const auto& e : kPluginStatusCodes) {
    if (!kStatusCodeNames.Parse(e.name)) return false;
  }
  return true;
}());

// Enough for any sensible message; the plug-in truncates to fit. It is told
// one byte less than the buffer holds, so the last byte stays the NUL even
// when it fills every byte it was given without terminating.
constexpr size_t kErrorCapacity = 1024;
constexpr size_t kErrorGiven = kErrorCapacity - 1;

// The plug-in's message, read up to the capacity it was given and made safe
// to print and to put in JSON (runtime/text.h: control characters, terminal
// escape sequences and stray bytes become \xNN).
std::string PluginMessage(const char* error) {
  const size_t n = strnlen(error, kErrorGiven);
  if (n == 0) return "(no message)";
  return TerminalSafe(std::string_view(error, n));
}

struct LibraryCloser {
  void operator()(void* handle) const {
    if (handle != nullptr) dlclose(handle);
  }
};
using Library = std::unique_ptr<void, LibraryCloser>;

attnkit_plugin_tensor ToC(const TensorView& t) {
  attnkit_plugin_tensor c{};
  c.data = t.data;
  c.dtype = static_cast<int32_t>(t.dtype);
  for (int i = 0; i < 4; ++i) {
    c.shape[i] = t.shape[i];
    c.strides[i] = t.strides[i];
  }
  return c;
}

attnkit_plugin_problem ToC(const AttentionProblem& p) {
  attnkit_plugin_problem c{};
  c.batch = p.batch;
  c.q_heads = p.q_heads;
  c.kv_heads = p.kv_heads;
  c.head_dim = p.head_dim;
  c.q_lens = p.q_lens.data();
  c.kv_lens = p.kv_lens.data();
  c.mask = static_cast<int32_t>(p.mask);
  c.dtype = static_cast<int32_t>(p.dtype);
  c.layout = static_cast<int32_t>(p.layout);
  c.window = p.window;
  c.scale = p.EffectiveScale();
  c.kv_dtype = static_cast<int32_t>(p.KvDType());
  return c;
}

// kv_dtype sits in what was the first v1 problem's tail padding: the
// struct, and so attnkit_plugin_block_problem's layout, must not change.
static_assert(sizeof(void*) != 8 ||
                  (sizeof(attnkit_plugin_problem) == 80 &&
                   offsetof(attnkit_plugin_problem, kv_dtype) == 76 &&
                   offsetof(attnkit_plugin_block_problem, hidden) == 80),
              "attnkit_plugin_problem's v1 layout changed");

Status FromC(attnkit_plugin_status s, std::string_view what,
             const std::string& name, const char* error) {
  // Every decode step passes through here: the OK path must not allocate
  // (the message is built only for an error).
  if (s == ATTNKIT_PLUGIN_OK) return Status::Ok();
  if (const auto code = kStatusCodeNames.Parse(kPluginStatusCodes.Name(s))) {
    return Status(*code, "plugin " + name + ": " + std::string(what) + ": " +
                             PluginMessage(error));
  }
  return Status::Internal(
      "plugin " + name + ": " + std::string(what) + " returned status " +
      std::to_string(static_cast<int>(s)) + ", not an attnkit_plugin_status");
}

attnkit_plugin_block_problem ToC(const AttentionBlockProblem& p) {
  attnkit_plugin_block_problem c{};
  c.attention = ToC(p.attention);
  c.hidden = p.hidden;
  c.weight_dtype = static_cast<int32_t>(p.weight_dtype);
  c.qkv_bias = p.qkv_bias ? 1 : 0;
  c.output_projection = p.output_projection ? 1 : 0;
  return c;
}

attnkit_plugin_block_args ToC(const AttentionBlockArgs& a) {
  return {ToC(a.x),    ToC(a.wq),      ToC(a.wk),      ToC(a.wv),
          ToC(a.bq),   ToC(a.bk),      ToC(a.bv),      ToC(a.wo),
          ToC(a.bias), ToC(a.k_cache), ToC(a.v_cache), ToC(a.out)};
}

using AppendKvFn = decltype(attnkit_plugin_v1_table::append_kv);
using KvDTypes = decltype(attnkit_plugin_v1_table::kv_dtypes);
using SupportsBlockFn = decltype(attnkit_plugin_v1_table::supports_block);
using AttentionBlockFn = decltype(attnkit_plugin_v1_table::attention_block);

// Whether the table the plug-in was built with (struct_size bytes) holds
// the appended field that ends at byte `end`. The bytes past a shorter table
// are not the plug-in's, so a field it does not cover is not even read.
constexpr bool Covers(const attnkit_plugin_v1_table* t, size_t end) {
  return t->struct_size >= end;
}
constexpr size_t kAppendKvEnd = offsetof(attnkit_plugin_v1_table, append_kv) +
                                sizeof(attnkit_plugin_v1_table::append_kv);
constexpr size_t kSupportsBlockEnd =
    offsetof(attnkit_plugin_v1_table, supports_block) +
    sizeof(attnkit_plugin_v1_table::supports_block);
constexpr size_t kAttentionBlockEnd =
    offsetof(attnkit_plugin_v1_table, attention_block) +
    sizeof(attnkit_plugin_v1_table::attention_block);
constexpr size_t kKvDTypesEnd = offsetof(attnkit_plugin_v1_table, kv_dtypes) +
                                sizeof(attnkit_plugin_v1_table::kv_dtypes);
// The kv_dtypes bits this loader knows.
constexpr KvDTypes kKnownKvDTypes = ATTNKIT_PLUGIN_KV_I8;

// The table's appended entries, or null when struct_size ends before them.
AppendKvFn AppendKvOf(const attnkit_plugin_v1_table* t) {
  return Covers(t, kAppendKvEnd) ? t->append_kv : nullptr;
}
SupportsBlockFn SupportsBlockOf(const attnkit_plugin_v1_table* t) {
  return Covers(t, kSupportsBlockEnd) ? t->supports_block : nullptr;
}
AttentionBlockFn AttentionBlockOf(const attnkit_plugin_v1_table* t) {
  return Covers(t, kAttentionBlockEnd) ? t->attention_block : nullptr;
}
// 0 for a table built before kv_dtypes: it would read int8 K/V as f32.
KvDTypes KvDTypesOf(const attnkit_plugin_v1_table* t) {
  return Covers(t, kKvDTypesEnd) ? t->kv_dtypes : 0;
}

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%x", v);
  return buf;
}

class PluginBackend final : public Backend {
 public:
  PluginBackend(Library lib, const attnkit_plugin_v1_table* table,
                void* instance)
      : lib_(std::move(lib)),
        table_(table),
        append_kv_(AppendKvOf(table)),
        supports_block_(SupportsBlockOf(table)),
        attention_block_(AttentionBlockOf(table)),
        takes_i8_((KvDTypesOf(table) & ATTNKIT_PLUGIN_KV_I8) != 0),
        instance_(instance),
        name_(table->name) {}
  ~PluginBackend() override { table_->destroy(instance_); }

  std::string_view name() const override { return name_; }

  Status Supports(const AttentionProblem& p) const override {
    if (p.quantized_kv() && !takes_i8_) return QuantizedKv();
    if (table_->supports == nullptr) return Status::Ok();
    char error[kErrorCapacity] = {};
    const attnkit_plugin_problem cp = ToC(p);
    return FromC(table_->supports(instance_, &cp, error, kErrorGiven),
                 "supports", name_, error);
  }

  Status Attention(const AttentionProblem& p,
                   const AttentionArgs& args) override {
    ATTNKIT_RETURN_IF_ERROR(ValidateArgs(p, args));
    if (p.quantized_kv() && !takes_i8_) return QuantizedKv();
    char error[kErrorCapacity] = {};
    const attnkit_plugin_problem cp = ToC(p);
    const attnkit_plugin_attention_args ca{
        ToC(args.q),   ToC(args.k),       ToC(args.v),      ToC(args.bias),
        ToC(args.out), ToC(args.k_scale), ToC(args.v_scale)};
    return FromC(table_->attention(instance_, &cp, &ca, error, kErrorGiven),
                 "attention", name_, error);
  }

  // The plug-in's attention_block when its table has one (UNIMPLEMENTED
  // otherwise: the tester skips block cases), behind its supports_block.
  Status SupportsBlock(const AttentionBlockProblem& p) const override {
    if (attention_block_ == nullptr) return NoBlock();
    // The C problem points into p's lengths: they must hold `batch` each.
    ATTNKIT_RETURN_IF_ERROR(p.Validate());
    if (supports_block_ == nullptr) return Status::Ok();
    char error[kErrorCapacity] = {};
    const attnkit_plugin_block_problem cp = ToC(p);
    return FromC(supports_block_(instance_, &cp, error, kErrorGiven),
                 "supports_block", name_, error);
  }

  Status AttentionBlock(const AttentionBlockProblem& p,
                        const AttentionBlockArgs& args) override {
    if (attention_block_ == nullptr) return NoBlock();
    ATTNKIT_RETURN_IF_ERROR(ValidateBlockArgs(p, args));
    char error[kErrorCapacity] = {};
    const attnkit_plugin_block_problem cp = ToC(p);
    const attnkit_plugin_block_args ca = ToC(args);
    return FromC(attention_block_(instance_, &cp, &ca, error, kErrorGiven),
                 "attention_block", name_, error);
  }

  // The plug-in's append_kv when it has one, else the portable append (an
  // i8 cache too when the table did not declare i8: its hook would copy
  // f32 tokens into int8 slots). The hook sees only validated arguments
  // (its contract lets it trust them); the bytes the contract lets it write
  // are what it is charged as copied.
  Status AppendKv(const KvAppendArgs& a) override {
    const bool quantized = a.k_cache.dtype == DType::kI8;
    if (append_kv_ == nullptr || (quantized && !takes_i8_)) {
      return Backend::AppendKv(a);
    }
    ATTNKIT_RETURN_IF_ERROR(ValidateAppend(a));
    char error[kErrorCapacity] = {};
    const attnkit_plugin_kv_append_args ca{
        ToC(a.k_cache),     ToC(a.v_cache),    ToC(a.new_k),   ToC(a.new_v),
        a.positions.data(), a.new_lens.data(), ToC(a.k_scale), ToC(a.v_scale)};
    ATTNKIT_RETURN_IF_ERROR(
        FromC(append_kv_(instance_, &ca, error, kErrorGiven), "append_kv",
              name_, error));
    accounting::RecordCopy(AppendedBytes(a));
    return Status::Ok();
  }

 private:
  // Why an i8 problem is skipped: the table never said it reads scales.
  Status QuantizedKv() const {
    return Status::Unimplemented(
        "plugin " + name_ + ": kv_dtype=i8 (quantized KV cache): " +
        (Covers(table_, kKvDTypesEnd)
             ? "its table's kv_dtypes=" + Hex(table_->kv_dtypes) +
                   " does not declare ATTNKIT_PLUGIN_KV_I8"
             : "struct_size=" + std::to_string(table_->struct_size) +
                   " ends before kv_dtypes: built against an older "
                   "attnkit_plugin.h"));
  }
  Status NoBlock() const {
    return Status::Unimplemented(
        "plugin " + name_ + ": no attention block (" +
        (Covers(table_, kAttentionBlockEnd)
             ? std::string("its attention_block entry is NULL")
             : "struct_size=" + std::to_string(table_->struct_size) +
                   " ends before attention_block: built against an older "
                   "attnkit_plugin.h") +
        ")");
  }

  Library lib_;  // declared first: destroyed (dlclose) after the instance
  const attnkit_plugin_v1_table* table_;
  AppendKvFn append_kv_;
  SupportsBlockFn supports_block_;
  AttentionBlockFn attention_block_;
  bool takes_i8_;  // kv_dtypes declares ATTNKIT_PLUGIN_KV_I8
  void* instance_;
  std::string name_;
};

}  // namespace

StatusOr<std::unique_ptr<Backend>> LoadPlugin(const std::string& path) {
  const std::string at = "plugin=" + path;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return Status::NotFound(at + ": no such file");
  }
  // RTLD_LOCAL: two plug-ins may define the same symbols; RTLD_NOW: a
  // missing dependency is reported here, not as a crash mid-campaign.
  // dlopen of a bare name searches the library path; "./" keeps it a file.
  const std::string open_path =
      path.find('/') == std::string::npos ? "./" + path : path;
  Library lib(dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (!lib) {
    const char* e = dlerror();
    return Status::InvalidArgument(at + ": cannot load it as a shared " +
                                   "library: " + (e ? e : "unknown error"));
  }
  dlerror();
  void* sym = dlsym(lib.get(), ATTNKIT_PLUGIN_ENTRY_V1);
  if (sym == nullptr) {
    return Status::InvalidArgument(
        at + ": does not export " + ATTNKIT_PLUGIN_ENTRY_V1 +
        " (not an attnkit plug-in, or built for another ABI version; see "
        "plugin/attnkit_plugin.h)");
  }
  auto entry = reinterpret_cast<attnkit_plugin_v1_fn>(sym);
  const attnkit_plugin_v1_table* t = entry();
  if (t == nullptr) {
    return Status::InvalidArgument(at + ": " + ATTNKIT_PLUGIN_ENTRY_V1 +
                                   "() returned NULL");
  }
  if (t->abi_version != ATTNKIT_PLUGIN_ABI_VERSION) {
    return Status::InvalidArgument(
        at + ": abi_version=" + std::to_string(t->abi_version) +
        ", this attnkit speaks " + std::to_string(ATTNKIT_PLUGIN_ABI_VERSION));
  }
  if (t->struct_size < ATTNKIT_PLUGIN_V1_BASE_SIZE) {
    return Status::InvalidArgument(
        at + ": struct_size=" + std::to_string(t->struct_size) +
        " is smaller than the first v1 table (" +
        std::to_string(ATTNKIT_PLUGIN_V1_BASE_SIZE) + " bytes)");
  }
  const char* missing = t->create == nullptr      ? "create"
                        : t->destroy == nullptr   ? "destroy"
                        : t->attention == nullptr ? "attention"
                                                  : nullptr;
  if (missing != nullptr) {
    return Status::InvalidArgument(at + ": the table's " + missing +
                                   " entry is NULL");
  }
  if (SupportsBlockOf(t) != nullptr && AttentionBlockOf(t) == nullptr) {
    return Status::InvalidArgument(
        at +
        ": the table's supports_block entry is set but its "
        "attention_block entry is " +
        (Covers(t, kAttentionBlockEnd)
             ? std::string("NULL")
             : "past struct_size=" + std::to_string(t->struct_size)));
  }
  if (const KvDTypes unknown = KvDTypesOf(t) & ~kKnownKvDTypes; unknown != 0) {
    return Status::InvalidArgument(
        at + ": kv_dtypes=" + Hex(t->kv_dtypes) + " has bits " + Hex(unknown) +
        " this attnkit does not know (it knows ATTNKIT_PLUGIN_KV_I8=" +
        Hex(kKnownKvDTypes) + ")");
  }
  const std::string_view name = t->name == nullptr ? "" : t->name;
  bool name_ok = !name.empty() && name.size() <= 64;
  for (char ch : name) {
    name_ok =
        name_ok && (std::islower(static_cast<unsigned char>(ch)) ||
                    std::isdigit(static_cast<unsigned char>(ch)) || ch == '_');
  }
  if (!name_ok) {
    return Status::InvalidArgument(at + ": name='" + std::string(name) +
                                   "' is not [a-z0-9_]{1,64}");
  }
  char error[kErrorCapacity] = {};
  void* instance = t->create(error, kErrorGiven);
  if (instance == nullptr) {
    return Status::Internal(at + ": create() failed: " + PluginMessage(error));
  }
  return std::unique_ptr<Backend>(
      std::make_unique<PluginBackend>(std::move(lib), t, instance));
}

}  // namespace attnkit::plugin

// Foreign checkpoint layouts read under myriad's names; see weight_layout.h for the forms recognised.
#include "infer/weight_layout.h"

#include <array>
#include <memory>
#include <vector>

#include "core/error.h"
#include "model/param_spec.h"
#include "quant/quant.h"

namespace myriad {

namespace {

constexpr const char* kQWeight = kQWeightSuffix;
constexpr const char* kQScale = kQScaleSuffix;
constexpr const char* kQuantKey = kQuantMetadataKey;
constexpr const char* kK3Prefix = "language_model.";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool replace_once(std::string& s, const std::string& from, const std::string& to) {
  const size_t i = s.find(from);
  if (i == std::string::npos) return false;
  s.replace(i, from.size(), to);
  return true;
}

// The names a myriad tensor may have elsewhere, myriad's own first, with the layout each belongs to.
struct Candidate {
  std::string name;
  const char* layout;  // "myriad", "K3", "DeepSeek-V3"
};

std::vector<Candidate> candidates(const std::string& name) {
  std::vector<Candidate> out;
  out.push_back({name, "myriad"});
  out.push_back({kK3Prefix + name, "K3"});
  std::string ds = name;
  if (replace_once(ds, ".block_sparse_moe.", ".mlp.")) {
    for (const auto& [from, to] :
         std::array<std::pair<const char*, const char*>, 3>{{{".w1.weight", ".gate_proj.weight"},
                                                             {".w3.weight", ".up_proj.weight"},
                                                             {".w2.weight", ".down_proj.weight"}}})
      if (name.find(".experts.") != std::string::npos && ends_with(ds, from)) {
        ds = ds.substr(0, ds.size() - std::string(from).size()) + to;
        break;
      }
    out.push_back({ds, "DeepSeek-V3"});
  }
  return out;
}

bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

// The same bytes as U8 (I8 codes, F8_E8M0 scales); a view, contiguous as stored.
Tensor bytes_as_u8(const Tensor& t) {
  if (t.dtype() == DType::kU8) return t;
  const Tensor c = t.contiguous();
  return Tensor::from_blob(c.raw_data(), c.shape(), DType::kU8, std::shared_ptr<const void>(c.storage()));
}

struct Adapted {
  std::vector<CheckpointView> views;
  bool changed = false;   // some tensor is renamed, reshaped, sliced or reinterpreted
  bool ct_mxfp4 = false;  // compressed-tensors MXFP4 pairs read as myriad's
  std::string layout;     // the first foreign layout seen
  int64_t reshaped = 0;
};

void note_layout(Adapted& a, const char* layout) {
  if (std::string(layout) != "myriad") {
    a.changed = true;
    if (a.layout.empty()) a.layout = layout;
  }
}

// A plain (unquantized) stored tensor for spec, in one of the shapes the releases use.
bool add_plain(Adapted& a, const Checkpoint& ck, const ParamSpec& spec, const ModelConfig& c) {
  for (const Candidate& cand : candidates(spec.name)) {
    if (!ck.contains(cand.name)) continue;
    const std::string src = cand.name;
    const Shape& s = ck.shape(src);
    const DType d = ck.dtype(src);
    MYRIAD_REQUIRE(is_float(d), kFormat, ck.path(), ": tensor ", src, " (for ", spec.name, ") is ", dtype_name(d),
                   "; expected F32, BF16 or F16");
    note_layout(a, cand.layout);
    const int64_t n = spec.numel();
    if (s == spec.shape) {
      a.views.push_back({spec.name, d, spec.shape, [src](const Checkpoint& b) { return b.tensor(src); }});
      return true;
    }
    const bool a_log = ends_with(spec.name, ".A_log");
    const bool conv = ends_with(spec.name, "_conv1d.weight") && spec.shape.size() == 3;
    if ((a_log || conv) && shape_numel(s) == n) {  // [1, 1, H, 1] -> [H]; [HK, W] -> [HK, 1, W]
      a.changed = true;
      ++a.reshaped;
      a.views.push_back({spec.name, d, spec.shape,
                         [src, shape = spec.shape](const Checkpoint& b) { return b.tensor(src).view(shape); }});
      return true;
    }
    if (a_log && s.size() == 1 && s[0] > n) {  // K3: a flat tensor padded past the heads
      a.changed = true;
      ++a.reshaped;
      a.views.push_back(
          {spec.name, d, spec.shape, [src, n](const Checkpoint& b) { return b.tensor(src).slice(0, 0, n); }});
      return true;
    }
    throw_error(ErrorKind::kFormat, ck.path(), ": tensor ", src, " is ", shape_str(s), "; the config (", c.source,
                ") needs ", spec.name, " ", shape_str(spec.shape));
  }
  return false;
}

// A quantized linear weight: myriad's pair, or compressed-tensors' MXFP4 pair.
bool add_quantized(Adapted& a, const Checkpoint& ck, const ParamSpec& spec) {
  if (!is_quantizable_linear(spec)) return false;
  for (const Candidate& cand : candidates(spec.name)) {
    const std::string qw = cand.name + kQWeight, qs = cand.name + kQScale;
    if (ck.contains(qw) && ck.contains(qs)) {
      note_layout(a, cand.layout);
      for (const auto& [from, to] : {std::pair{qw, spec.name + kQWeight}, std::pair{qs, spec.name + kQScale}})
        a.views.push_back({to, ck.dtype(from), ck.shape(from), [from](const Checkpoint& b) { return b.tensor(from); }});
      return true;
    }
    if (!ends_with(cand.name, ".weight")) continue;
    const std::string stem = cand.name.substr(0, cand.name.size() - 7);
    const std::string packed = stem + ".weight_packed", scale = stem + ".weight_scale";
    if (!ck.contains(packed) || !ck.contains(scale)) continue;
    const int64_t rows = spec.shape[0], cols = spec.shape[1];
    const Shape want_p{rows, cols / 2}, want_s{rows, cols / 32};
    const DType pd = ck.dtype(packed), sd = ck.dtype(scale);
    MYRIAD_REQUIRE((pd == DType::kU8 || pd == DType::kI8) && ck.shape(packed) == want_p, kFormat, ck.path(),
                   ": MXFP4 tensor ", packed, " is ", dtype_name(pd), " ", shape_str(ck.shape(packed)), "; ", spec.name,
                   " ", shape_str(spec.shape), " needs U8 or I8 ", shape_str(want_p), " (two E2M1 codes a byte)");
    MYRIAD_REQUIRE((sd == DType::kU8 || sd == DType::kF8E8M0) && ck.shape(scale) == want_s, kFormat, ck.path(),
                   ": MXFP4 tensor ", scale, " is ", dtype_name(sd), " ", shape_str(ck.shape(scale)), "; ", spec.name,
                   " ", shape_str(spec.shape), " needs U8 or F8_E8M0 ", shape_str(want_s), " (a scale per 32)");
    note_layout(a, cand.layout);
    a.changed = true;
    a.ct_mxfp4 = true;
    a.views.push_back({spec.name + kQWeight, DType::kU8, want_p,
                       [packed](const Checkpoint& b) { return bytes_as_u8(b.tensor(packed)); }});
    a.views.push_back({spec.name + kQScale, DType::kU8, want_s,
                       [scale](const Checkpoint& b) { return bytes_as_u8(b.tensor(scale)); }});
    return true;
  }
  return false;
}

}  // namespace

Checkpoint adapt_checkpoint(const Checkpoint& ck, const ModelConfig& c) {
  Adapted a;
  for (const ParamSpec& spec : model_param_specs(c)) {
    if (add_plain(a, ck, spec, c)) continue;
    add_quantized(a, ck, spec);  // absent in every form: left out, validation names it
  }
  if (!a.changed) return ck;
  std::map<std::string, std::string> meta;
  if (a.ct_mxfp4) {
    const auto it = ck.metadata().find(kQuantKey);
    MYRIAD_REQUIRE(it == ck.metadata().end() || it->second == "mxfp4", kFormat, ck.path(), ": metadata ", kQuantKey,
                   " = ", it == ck.metadata().end() ? "" : it->second,
                   " disagrees with the compressed-tensors MXFP4 experts it also holds");
    meta[kQuantKey] = "mxfp4";
  }
  std::string what = a.layout.empty() ? "myriad names" : a.layout;
  if (a.reshaped) what += ", " + std::to_string(a.reshaped) + " tensors reshaped";
  if (a.ct_mxfp4) what += ", MXFP4 experts as stored";
  meta["myriad.layout"] = what;
  return ck.with_views(std::move(a.views), meta);
}

Checkpoint open_model_checkpoint(const std::string& dir, const ModelConfig& c) {
  return adapt_checkpoint(Checkpoint::open(dir), c);
}

std::string describe_checkpoint_layout(const Checkpoint& ck) {
  if (!ck.is_view()) return "myriad";
  const auto it = ck.metadata().find("myriad.layout");
  return it == ck.metadata().end() ? "adapted" : it->second;
}

}  // namespace myriad

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
  // transformers 5's kimi_linear names for the KDA projections.
  for (const auto& [from, to] :
       std::array<std::pair<const char*, const char*>, 5>{{{".f_a_proj.", ".forget_gate_down."},
                                                           {".f_b_proj.", ".forget_gate_up."},
                                                           {".b_proj.", ".beta_proj."},
                                                           {".g_a_proj.", ".output_gate_down."},
                                                           {".g_b_proj.", ".output_gate_up."}}}) {
    std::string t = name;
    if (name.find(".self_attn.") != std::string::npos && replace_once(t, from, to))
      out.push_back({t, "transformers kimi_linear"});
  }
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
    const bool dt = ends_with(spec.name, ".dt_bias");
    // [1, 1, H, 1] or [H, 1] -> [H]; [HK, W] -> [HK, 1, W]; dt_bias [H, K] -> [HK]
    if ((a_log || conv || dt) && shape_numel(s) == n) {
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

// transformers 5's kimi_linear tensors that hold several of myriad's: the short convs fused into one conv1d
// [2 HK + HV, 1, W] (q | k | v), and the routed experts stacked as mlp.experts.gate_up_proj [E, 2F, L] (gate rows
// then up rows) and mlp.experts.down_proj [E, L, F]. Each of myriad's tensors is a slice of them.
bool add_fused(Adapted& a, const Checkpoint& ck, const ParamSpec& spec, const ModelConfig& c) {
  const std::string& n = spec.name;
  for (const char* prefix : {"", "language_model."}) {
    for (int which = 0; which < 3; ++which) {
      const std::string part = std::string(".") + "qkv"[which] + "_conv1d.weight";
      if (!ends_with(n, part)) continue;
      const std::string fused = prefix + n.substr(0, n.size() - part.size()) + ".conv1d.weight";
      if (!ck.contains(fused)) continue;
      const int64_t rows = spec.shape[0];
      const Shape& s = ck.shape(fused);
      MYRIAD_REQUIRE(s.size() == 3 && s[0] == 3 * rows && s[1] == 1 && s[2] == spec.shape[2], kFormat, ck.path(),
                     ": fused conv ", fused, " is ", shape_str(s), "; the config needs [", 3 * rows, ", 1, ",
                     spec.shape[2], "] (q | k | v)");
      a.changed = true;
      note_layout(a, "transformers kimi_linear");
      a.views.push_back({n, ck.dtype(fused), spec.shape, [fused, which, rows](const Checkpoint& b) {
                           return b.tensor(fused).slice(0, which * rows, (which + 1) * rows);
                         }});
      return true;
    }
    const size_t e_at = n.find(".block_sparse_moe.experts.");
    if (e_at == std::string::npos || c.num_experts <= 0) continue;
    const std::string base = prefix + n.substr(0, e_at) + ".mlp.experts.";
    const std::string rest = n.substr(e_at + std::string(".block_sparse_moe.experts.").size());  // "J.w1.weight"
    const int64_t e = std::stoll(rest.substr(0, rest.find('.')));
    const std::string w = rest.substr(rest.find('.') + 1);
    const bool down = w == "w2.weight";
    const std::string fused = base + (down ? "down_proj" : "gate_up_proj");
    if (!ck.contains(fused)) continue;
    const int64_t F = c.moe_intermediate_size, L = c.expert_width(), E = c.num_experts;
    const Shape want = down ? Shape{E, L, F} : Shape{E, 2 * F, L};
    MYRIAD_REQUIRE(ck.shape(fused) == want, kFormat, ck.path(), ": ", fused, " is ", shape_str(ck.shape(fused)),
                   "; the config needs ", shape_str(want));
    const int64_t r0 = w == "w3.weight" ? F : 0;  // up rows follow the gate rows
    a.changed = true;
    note_layout(a, "transformers kimi_linear");
    a.views.push_back({n, ck.dtype(fused), spec.shape, [fused, e, down, r0, F](const Checkpoint& b) {
                         const Tensor t = b.tensor(fused).select(0, e);
                         return down ? t : t.slice(0, r0, r0 + F);
                       }});
    return true;
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
        a.views.push_back(
            {to, ck.dtype(from), ck.shape(from), [src = from](const Checkpoint& b) { return b.tensor(src); }});
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
    if (add_plain(a, ck, spec, c) || add_fused(a, ck, spec, c)) continue;
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

}  // namespace myriad

// The vision tower and projector (see vision_tower.h; docs/vision.md for the formulas).
#include "model/vision_tower.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "autograd/functions.h"
#include "core/error.h"
#include "model/weights.h"

namespace myriad {

namespace {

using ag::Var;

// The tower's norms have no eps in the config: K3's reference builds them as nn.RMSNorm(D), whose eps defaults to
// float32's machine epsilon (2^-23), and the LayerNorm variant (Kimi-VL, K2.5) as nn.LayerNorm(D), 1e-5.
constexpr float kTowerLayerNormEps = 1e-5f;
constexpr float kTowerRmsNormEps = 1.1920929e-07f;

// LayerNorm over the last dim of x [n, D] as RMSNorm of the centred row (the same formula: the mean square of
// x - mean is the variance), so its backward is the existing ops'. The mean is x times a constant [D, 1] column.
Var layer_norm(const Var& x, const Var& w, const Var& b, float eps) {
  const int64_t D = x.shape()[1];
  const Var mean_col(Tensor::full({D, 1}, 1.0f / float(D)));
  const Var centred = ag::add(x, ag::scale(ag::matmul(x, mean_col), -1.0f));
  return ag::add(ag::rmsnorm(centred, w, eps), b);
}

class Tower {
 public:
  Tower(const VisionConfig& v, const ModelWeights& w) : v_(v), w_(w) {}

  const Var& p(const std::string& name) const { return w_.at(name); }
  bool has(const std::string& name) const { return w_.contains(name); }

  // x [n, in] W^T (+ bias when the checkpoint has one)
  Var linear(const Var& x, const std::string& name) const {
    Var y = ag::linear(x, p(name + ".weight"));
    return has(name + ".bias") ? ag::add(y, p(name + ".bias")) : y;
  }

  Var norm(const Var& x, const std::string& name) const {
    if (v_.norm_type == "layernorm") return layer_norm(x, p(name + ".weight"), p(name + ".bias"), kTowerLayerNormEps);
    return ag::rmsnorm(x, p(name + ".weight"), kTowerRmsNormEps);
  }

  Var act(const Var& x, const std::string& which) const {
    return which == "gelu" ? ag::gelu(x) : ag::gelu_tanh(x);  // config allows these two only
  }

  // Bilinear interpolation of the [H0, W0, D] position table to each grid (PyTorch's F.interpolate,
  // align_corners false): four gathered rows per patch, weighted; every frame of a chunk the same, plus the fixed
  // temporal embedding of its frame when the chunk has several.
  Var position_embedding(const std::vector<PatchGrid>& grids, int64_t L) const {
    const Var& table = p("vision_tower.patch_embed.pos_emb.weight");
    const int64_t H0 = table.shape()[0], W0 = table.shape()[1], D = table.shape()[2];
    std::vector<int32_t> idx[4];
    std::vector<float> wt[4];
    for (auto& i : idx) i.reserve(size_t(L));
    for (auto& x : wt) x.reserve(size_t(L));
    auto source = [](int64_t out_i, int64_t out_n, int64_t in_n, int64_t* i0, int64_t* i1, double* frac) {
      const double s = std::max(0.0, (double(out_i) + 0.5) * double(in_n) / double(out_n) - 0.5);
      *i0 = std::min<int64_t>(int64_t(s), in_n - 1);
      *i1 = std::min<int64_t>(*i0 + 1, in_n - 1);
      *frac = s - double(*i0);
    };
    int64_t max_t = 1;
    for (const PatchGrid& g : grids) {
      max_t = std::max(max_t, g.t);
      const size_t frame_start = idx[0].size();
      for (int64_t r = 0; r < g.h; ++r) {
        int64_t y0, y1;
        double fy;
        source(r, g.h, H0, &y0, &y1, &fy);
        for (int64_t c = 0; c < g.w; ++c) {
          int64_t x0, x1;
          double fx;
          source(c, g.w, W0, &x0, &x1, &fx);
          const int64_t rows[4] = {y0 * W0 + x0, y0 * W0 + x1, y1 * W0 + x0, y1 * W0 + x1};
          const double weights[4] = {(1 - fy) * (1 - fx), (1 - fy) * fx, fy * (1 - fx), fy * fx};
          for (int k = 0; k < 4; ++k) {
            idx[k].push_back(int32_t(rows[k]));
            wt[k].push_back(float(weights[k]));
          }
        }
      }
      for (int64_t f = 1; f < g.t; ++f)  // the later frames repeat the first's rows
        for (int k = 0; k < 4; ++k)
          for (size_t i = frame_start; i < frame_start + size_t(g.h * g.w); ++i) {
            const int32_t row = idx[k][i];
            const float weight = wt[k][i];
            idx[k].push_back(row);
            wt[k].push_back(weight);
          }
    }
    const Var flat = ag::reshape(table, {H0 * W0, D});
    Var out;
    for (int k = 0; k < 4; ++k) {
      const Var term =
          ag::mul(ag::gather_rows(flat, Tensor::from_vector(idx[k], {L})), Var(Tensor::from_vector(wt[k], {L, 1})));
      out = k == 0 ? term : ag::add(out, term);
    }
    if (max_t == 1) return out;
    // A chunk of t > 1 frames adds row f of the temporal table to frame f; a single frame (an image) adds none.
    const Tensor time = vision_time_embedding(max_t, D);
    Tensor rows = Tensor::zeros({L, D});
    int64_t at = 0;
    for (const PatchGrid& g : grids) {
      if (g.t > 1)
        for (int64_t f = 0; f < g.t; ++f)
          for (int64_t i = 0; i < g.h * g.w; ++i)
            std::copy_n(time.data<float>() + f * D, D, rows.data<float>() + (at + f * g.h * g.w + i) * D);
      at += g.patches();
    }
    return ag::add(out, Var(rows));
  }

  // One encoder block: x + wo(attention(rope(q), rope(k), v) per image), then x + fc1(act(fc0(norm1 x))).
  Var block(int64_t l, const Var& x, const std::vector<PatchGrid>& grids, const Tensor& cos, const Tensor& sin) const {
    const std::string pre = "vision_tower.encoder.blocks." + std::to_string(l) + ".";
    const int64_t L = x.shape()[0], A = v_.qkv_hidden_size.value_or(v_.vt_hidden_size);
    const int64_t H = v_.vt_num_attention_heads, hd = A / H;
    const Var qkv = linear(norm(x, pre + "norm0"), pre + "wqkv");
    const RopeLayout layout{.col0 = 0, .rot = hd, .interleaved = true};
    const Var q = ag::reshape(ag::rope(ag::reshape(ag::slice_last(qkv, 0, A), {L, H, hd}), cos, sin, layout), {L, A});
    const Var k =
        ag::reshape(ag::rope(ag::reshape(ag::slice_last(qkv, A, 2 * A), {L, H, hd}), cos, sin, layout), {L, A});
    const Var v = ag::slice_last(qkv, 2 * A, 3 * A);
    std::vector<Var> outs;
    outs.reserve(grids.size());
    int64_t start = 0;
    const float scale = 1.0f / std::sqrt(float(hd));
    for (const PatchGrid& g : grids) {
      const int64_t n = g.patches(), end = start + n;
      auto part = [&](const Var& t) { return ag::reshape(ag::slice_rows(t, start, end), {1, n, H, hd}); };
      const Var o = ag::attention(part(q), part(k), part(v), scale, /*causal=*/false);
      outs.push_back(ag::reshape(o, {n, A}));
      start = end;
    }
    const Var attn = outs.size() == 1 ? outs[0] : ag::concat_rows(outs, A);
    const Var h = ag::add(x, linear(attn, pre + "wo"));
    const Var mlp = linear(act(linear(norm(h, pre + "norm1"), pre + "mlp.fc0"), v_.activation_func), pre + "mlp.fc1");
    return ag::add(h, mlp);
  }

  // sd2_tpool: each kh x kw window of patches becomes one row of kh kw D values, (a, b) order; a chunk's patch
  // positions are first averaged over its frames. Returns the merged rows [windows kh kw, D].
  Var merge(const Var& x, const std::vector<PatchGrid>& grids) const {
    const int64_t kh = v_.merge_kernel_size[0], kw = v_.merge_kernel_size[1];
    int64_t max_t = 1, rows = 0;
    for (const PatchGrid& g : grids) {
      max_t = std::max(max_t, g.t);
      rows += g.h * g.w;
    }
    Var out;
    for (int64_t f = 0; f < max_t; ++f) {  // frame f of every chunk (a chunk with fewer frames: weight 0)
      std::vector<int32_t> order;
      std::vector<float> weight;
      order.reserve(size_t(rows));
      weight.reserve(size_t(rows));
      int64_t offset = 0;
      for (const PatchGrid& g : grids) {
        const int64_t frame = f < g.t ? f : 0;
        for (int64_t R = 0; R < g.h / kh; ++R)
          for (int64_t C = 0; C < g.w / kw; ++C)
            for (int64_t a = 0; a < kh; ++a)
              for (int64_t b = 0; b < kw; ++b) {
                order.push_back(int32_t(offset + frame * g.h * g.w + (R * kh + a) * g.w + C * kw + b));
                weight.push_back(f < g.t ? 1.0f / float(g.t) : 0.0f);
              }
        offset += g.patches();
      }
      const Var frame_rows = ag::gather_rows(x, Tensor::from_vector(order, {rows}));
      if (max_t == 1) return frame_rows;  // images only: the gather alone
      const Var term = ag::mul(frame_rows, Var(Tensor::from_vector(weight, {rows, 1})));
      out = f == 0 ? term : ag::add(out, term);
    }
    return out;
  }

  Var encode(const Var& patches, const std::vector<PatchGrid>& grids) const {
    check_patch_grids(v_, grids, patches.shape().size() == 2 ? patches.shape()[0] : -1);
    const int64_t L = patches.shape()[0], Dv = v_.vt_hidden_size, pp = 3 * v_.patch_size * v_.patch_size;
    MYRIAD_REQUIRE(patches.shape()[1] == pp, kShape, "vision tower: patch rows have ", patches.shape()[1],
                   " values; patch_size ", v_.patch_size, " needs 3 x ", v_.patch_size, " x ", v_.patch_size, " = ",
                   pp);
    const Var proj = ag::reshape(p("vision_tower.patch_embed.proj.weight"), {Dv, pp});
    Var x = ag::linear(patches, proj);
    if (has("vision_tower.patch_embed.proj.bias")) x = ag::add(x, p("vision_tower.patch_embed.proj.bias"));
    x = ag::add(x, position_embedding(grids, L));

    const int64_t hd = v_.qkv_hidden_size.value_or(Dv) / v_.vt_num_attention_heads;
    Tensor cos, sin;
    vision_rope_tables(hd, grids, &cos, &sin);
    for (int64_t l = 0; l < v_.vt_num_hidden_layers; ++l) x = block(l, x, grids, cos, sin);
    x = norm(x, "vision_tower.encoder.final_layernorm");

    // Projector: the window's patches side by side, an MLP to the text width. patchmergerv2 (K3): bias-free,
    // RMSNorm after; patchmerger (Kimi-VL, K2.5): LayerNorm of each patch before, biases.
    const Var merged = merge(x, grids);
    const int64_t window = v_.merge_kernel_size[0] * v_.merge_kernel_size[1], tokens = merged.shape()[0] / window;
    const float eps = float(v_.projector_ln_eps);
    if (v_.mm_projector_type == "patchmerger") {
      const Var normed = layer_norm(merged, p("mm_projector.pre_norm.weight"), p("mm_projector.pre_norm.bias"), eps);
      const Var rows = ag::reshape(normed, {tokens, window * Dv});
      return linear(act(linear(rows, "mm_projector.proj.0"), v_.projector_hidden_act), "mm_projector.proj.2");
    }
    const Var rows = ag::reshape(merged, {tokens, window * Dv});
    const Var y = linear(act(linear(rows, "mm_projector.proj.0"), v_.projector_hidden_act), "mm_projector.proj.2");
    return ag::rmsnorm(y, p("mm_projector.post_norm.weight"), eps);
  }

 private:
  const VisionConfig& v_;
  const ModelWeights& w_;
};

}  // namespace

int64_t vision_tokens(const VisionConfig& v, const PatchGrid& g) {
  return (g.h / v.merge_kernel_size[0]) * (g.w / v.merge_kernel_size[1]);
}

void check_patch_grids(const VisionConfig& v, const std::vector<PatchGrid>& grids, int64_t patch_rows) {
  MYRIAD_REQUIRE(!grids.empty(), kShape, "vision tower: no images given");
  const int64_t kh = v.merge_kernel_size[0], kw = v.merge_kernel_size[1];
  int64_t total = 0;
  for (size_t i = 0; i < grids.size(); ++i) {
    const PatchGrid& g = grids[i];
    MYRIAD_REQUIRE(g.h > 0 && g.w > 0 && g.h % kh == 0 && g.w % kw == 0, kShape, "vision tower: image ", i,
                   " has a grid of ", g.h, " x ", g.w,
                   " patches; both sides must be positive multiples of "
                   "merge_kernel_size [",
                   kh, ", ", kw, "]");
    MYRIAD_REQUIRE(g.h <= (int64_t(1) << 20) && g.w <= (int64_t(1) << 20), kShape, "vision tower: image ", i, " grid ",
                   g.h, " x ", g.w, " is too large");
    const int64_t frames = v.init_pos_emb_time.value_or(4);
    MYRIAD_REQUIRE(g.t >= 1 && g.t <= frames, kShape, "vision tower: image ", i, " has ", g.t,
                   " frames; a video chunk holds 1 to init_pos_emb_time (", frames, ") frames");
    MYRIAD_REQUIRE(g.t == 1 || v.vt_hidden_size % 2 == 0, kShape,
                   "vision tower: frames need an even vt_hidden_size for the temporal embedding, got ",
                   v.vt_hidden_size);
    total += g.patches();
  }
  MYRIAD_REQUIRE(total == patch_rows, kShape, "vision tower: the grids hold ", total, " patches but ", patch_rows,
                 " patch rows were given");
}

void vision_rope_tables(int64_t head_dim, const std::vector<PatchGrid>& grids, Tensor* cos, Tensor* sin) {
  MYRIAD_REQUIRE(head_dim % 4 == 0, kShape, "vision tower: 2-D RoPE needs a head dim divisible by 4, got ", head_dim);
  int64_t L = 0;
  for (const PatchGrid& g : grids) L += g.patches();
  const int64_t half = head_dim / 2;
  *cos = Tensor::empty({L, half});
  *sin = Tensor::empty({L, half});
  float* c = cos->data<float>();
  float* s = sin->data<float>();
  std::vector<double> freq(size_t(head_dim / 4));
  for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(10000.0, -4.0 * double(i) / double(head_dim));
  int64_t t = 0;
  for (const PatchGrid& g : grids) {
    const int64_t first = t;
    for (int64_t r = 0; r < g.h; ++r)
      for (int64_t col = 0; col < g.w; ++col, ++t)
        for (size_t i = 0; i < freq.size(); ++i) {
          const double ax = double(col) * freq[i], ay = double(r) * freq[i];
          c[t * half + 2 * int64_t(i)] = float(std::cos(ax));
          s[t * half + 2 * int64_t(i)] = float(std::sin(ax));
          c[t * half + 2 * int64_t(i) + 1] = float(std::cos(ay));
          s[t * half + 2 * int64_t(i) + 1] = float(std::sin(ay));
        }
    for (int64_t f = 1; f < g.t; ++f, t += g.h * g.w) {  // later frames: the first frame's angles
      std::copy_n(c + first * half, g.h * g.w * half, c + t * half);
      std::copy_n(s + first * half, g.h * g.w * half, s + t * half);
    }
  }
}

Tensor vision_time_embedding(int64_t frames, int64_t dim) {
  MYRIAD_REQUIRE(frames >= 1 && dim >= 2 && dim % 2 == 0, kShape, "vision time embedding: ", frames,
                 " frames of width ", dim, " (needs an even width)");
  Tensor out = Tensor::empty({frames, dim});
  float* o = out.data<float>();
  const int64_t half = dim / 2;
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(f) * std::pow(10000.0, -double(i) / double(half));
      o[f * dim + i] = float(std::sin(angle));
      o[f * dim + half + i] = float(std::cos(angle));
    }
  return out;
}

ag::Var encode_images(const VisionConfig& v, const ModelWeights& w, const ag::Var& patches,
                      const std::vector<PatchGrid>& grids) {
  return Tower(v, w).encode(patches, grids);
}

}  // namespace myriad

#include "bench/model_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "model/accounting.h"
#include "model/init.h"
#include "model/sequence_context.h"
#include "model/transformer.h"
#include "ops/kernels.h"
#include "ops/ref/kda.h"

namespace myriad::bench {

namespace {

using nlohmann::ordered_json;

// Section budgets, fractions of ModelBenchOptions::budget_s.
constexpr double kModelShare = 0.30, kBreakdownShare = 0.25, kKdaShare = 0.20, kMoeShare = 0.25;
constexpr int64_t kDefaultSeq = 1024;

std::vector<float> random_floats(int64_t n, float lo, float hi, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  for (auto& x : v) {  // xorshift64
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = lo + (hi - lo) * float(s >> 40) * (1.0f / 16777216.0f);
  }
  return v;
}

// A [rows, cols] input of unit-ish scale (uniform on +-sqrt(3): variance 1, like a normed hidden state).
ag::Var random_var(int64_t rows, int64_t cols, uint64_t seed, bool requires_grad) {
  return ag::Var(Tensor::from_vector(random_floats(rows * cols, -1.732f, 1.732f, seed), {rows, cols}), requires_grad);
}

Tensor random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  const std::vector<float> u = random_floats(n, 0.0f, 1.0f, seed);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = std::min<int64_t>(vocab - 1, int64_t(double(u[i]) * double(vocab)));
  return Tensor::from_vector(ids, {n});
}

std::string time_str(double s) {
  char buf[32];
  if (std::fabs(s) >= 1.0)
    std::snprintf(buf, sizeof buf, "%.3f s", s);
  else if (std::fabs(s) >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  return buf;
}

std::string pct(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * f);
  return buf;
}

ordered_json timing_json(const Timing& t) {
  return {{"best_s", t.best_s}, {"median_s", t.median_s}, {"reps", t.reps}};
}

// Heavy calls (a whole-model step takes seconds on 2 cores) get fewer minimum repeats.
Timing time_call(const std::function<void()>& fn, double budget_s) {
  return time_repeats(fn, budget_s, 2);
}

// The sum of y * probe: a scalar whose gradient seeds y with the (random) probe.
ag::Var probe_loss(const ag::Var& y, const ag::Var& probe) {
  return ag::sum(ag::mul(y, probe));
}

struct Printer {
  std::FILE* out;
  [[gnu::format(printf, 2, 3)]] void operator()(const char* fmt, ...) const {
    if (!out) return;
    std::va_list ap;
    va_start(ap, fmt);
    std::vfprintf(out, fmt, ap);
    va_end(ap);
    std::fflush(out);
  }
};

struct Verdicts {
  int targeted = 0, passed = 0;
  const char* add(bool pass) {
    ++targeted;
    passed += pass;
    return pass ? "PASS" : "below";
  }
};

// ---------------------------------------------------------------- 1 + 4: the model and its modules

struct FlopsPerToken {
  double fwd = 0.0, fwdbwd = 0.0;
};

FlopsPerToken model_flops(const ModelAccounting& a, const TrainingFlops& tf) {
  const double attention = tf.mla_attention + tf.kda_state;  // forward + backward figures
  return {2.0 * double(a.active_params) + attention / 3.0, 6.0 * double(a.active_params) + attention};
}

void run_model_sections(const ModelConfig& c, int64_t T, const MachineLimits& limits, double budget_s,
                        const Printer& print, Verdicts& verdicts, ordered_json& json) {
  const ModelAccounting acc = account_model(c);
  const TrainingFlops tf = training_flops_per_token(c, acc, T);
  const FlopsPerToken fl = model_flops(acc, tf);
  const double peak = limits.peak_gflops();

  const double t0 = now_seconds();
  Transformer model(c, ModelWeights::random(c, 0));
  const Tensor tokens = random_ids(T, c.vocab_size, 11), targets = random_ids(T, c.vocab_size, 12);
  print("  (random init: %.1f s)\n", now_seconds() - t0);

  print(
      "\n1. model: Transformer::forward on one sequence of %lld tokens, random init; loss on random targets\n"
      "   FLOPs/token: forward %.4g = 2 x %.4gM activated non-embedding params + %.4g attention (a third of\n"
      "   training_flops_per_token's MLA %.4g + KDA %.4g, which are forward+backward figures); forward+backward %.4g\n"
      "   = 6 x activated + MLA + KDA. forward runs without the tape (NoGradGuard); forward+backward records it and\n"
      "   runs ag::backward(loss) (parameter gradients accumulate, as across micro-batches).\n",
      (long long)T, fl.fwd, double(acc.active_params) * 1e-6, (tf.mla_attention + tf.kda_state) / 3.0, tf.mla_attention,
      tf.kda_state, fl.fwdbwd);
  print("   %-24s %11s %11s %11s %12s %9s %7s %7s  %s\n", "row", "time/call", "time/token", "GFLOP/call", "GFLOP/s",
        "ratio", "target", "", "verdict");

  ordered_json rows = ordered_json::array();
  auto model_row = [&](const char* name, double flops_per_token, const Timing& t, double target) {
    const double flops = flops_per_token * double(T), gflops = flops / t.best_s * 1e-9, ratio = gflops / peak;
    const char* verdict = target > 0.0 ? verdicts.add(ratio >= target) : "info";
    char tgt[16] = "-";
    if (target > 0.0) std::snprintf(tgt, sizeof tgt, ">=%.0f%%", 100.0 * target);
    print("   %-24s %11s %11s %11.2f %12.1f %9s %7s %7s  %s\n", name, time_str(t.best_s).c_str(),
          time_str(t.best_s / double(T)).c_str(), flops * 1e-9, gflops, pct(ratio).c_str(), tgt, "", verdict);
    ordered_json r = {{"row", name},
                      {"tokens", T},
                      {"flops_per_token", flops_per_token},
                      {"flops_per_call", flops},
                      {"timing", timing_json(t)},
                      {"time_per_token_s", t.best_s / double(T)},
                      {"gflops", gflops},
                      {"peak_gflops", peak},
                      {"ratio", ratio}};
    r["target"] = target > 0.0 ? ordered_json(target) : ordered_json(nullptr);
    if (target > 0.0) r["pass"] = ratio >= target;
    rows.push_back(std::move(r));
  };

  const Timing fwd = time_call(
      [&] {
        ag::NoGradGuard no_grad;
        const ForwardResult r = model.forward(tokens, targets);
        (void)r;
      },
      budget_s * kModelShare * 0.3);
  model_row("forward (no tape)", fl.fwd, fwd, 0.0);
  const Timing fwdbwd = time_call(
      [&] {
        const ForwardResult r = model.forward(tokens, targets);
        ag::backward(r.loss);
      },
      budget_s * kModelShare * 0.7);
  model_row("forward + backward", fl.fwdbwd, fwdbwd, kModelTarget);
  print("   (medians: forward %s, forward+backward %s; backward alone ~%s = %.2fx forward)\n",
        time_str(fwd.median_s).c_str(), time_str(fwdbwd.median_s).c_str(), time_str(fwdbwd.best_s - fwd.best_s).c_str(),
        (fwdbwd.best_s - fwd.best_s) / fwd.best_s);
  json["model"] = {{"flop_convention",
                    "forward = 2 x activated non-embedding params (lm_head counted, input lookup not) + 1/3 of "
                    "training_flops_per_token's MLA and KDA terms; forward+backward = 6 x activated + those terms"},
                   {"active_params", acc.active_params},
                   {"flops_per_token_forward", fl.fwd},
                   {"flops_per_token_forward_backward", fl.fwdbwd},
                   {"mla_attention_flops_per_token_fwdbwd", tf.mla_attention},
                   {"kda_state_flops_per_token_fwdbwd", tf.kda_state},
                   {"rows", rows}};

  // 4. Where the time goes: each module alone on a random [T, D] input (first layer of its kind).
  struct Module {
    std::string name;
    int64_t layers;
    double flops_fwdbwd_per_token;  // one layer
    std::function<ag::Var(const ag::Var&)> run;
  };
  std::vector<Module> modules;
  auto first_layer = [&](const std::function<bool(int64_t)>& pred) {
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      if (pred(l)) return l;
    return int64_t(-1);
  };
  const ForwardOptions fopt;
  LocalSequenceContext whole;  // each module on a whole sequence
  if (const int64_t n = acc.kda_mixer.layers; n > 0) {
    const int64_t l = first_layer([&](int64_t i) { return c.mixer(i) == Mixer::kKda; });
    modules.push_back({"KDA mixer (L" + std::to_string(l) + ")", n,
                       6.0 * double(acc.kda_mixer.active) + tf.kda_state / double(n),
                       [&, l](const ag::Var& x) { return model.kda_mixer(l, x, fopt, whole); }});
  }
  if (const int64_t n = acc.mla_mixer.layers; n > 0) {
    const int64_t l = first_layer([&](int64_t i) { return c.mixer(i) == Mixer::kMla; });
    modules.push_back({"MLA mixer (L" + std::to_string(l) + ")", n,
                       6.0 * double(acc.mla_mixer.active) + tf.mla_attention / double(n),
                       [&, l](const ag::Var& x) { return model.mla_mixer(l, x, whole); }});
  }
  if (const int64_t n = acc.dense_ffn.layers; n > 0) {
    const int64_t l = first_layer([&](int64_t i) { return !c.is_moe_layer(i); });
    modules.push_back({"dense FFN (L" + std::to_string(l) + ")", n, 6.0 * double(acc.dense_ffn.active),
                       [&, l](const ag::Var& x) { return model.dense_ffn(l, x); }});
  }
  if (const int64_t n = acc.moe_ffn.layers; n > 0) {
    const int64_t l = first_layer([&](int64_t i) { return c.is_moe_layer(i); });
    modules.push_back({"MoE FFN (L" + std::to_string(l) + ")", n, 6.0 * double(acc.moe_ffn.active),
                       [&, l](const ag::Var& x) { return model.moe_ffn(l, x, nullptr); }});
  }
  const bool tied = c.tie_word_embeddings;
  const double head_params = double(acc.components[size_t(tied ? Component::kEmbeddings : Component::kHead)].active);
  const ag::Var probe = random_var(T, c.hidden_size, 13, false);

  print(
      "\n4. where the time goes: each module alone on a random [%lld, %lld] input (public Transformer methods),\n"
      "   forward (no tape) and forward+backward (seeded with a random gradient), x its layer count, as a share of\n"
      "   the model's forward+backward above. GFLOP/s: 6 x the module's activated params (+ its attention term).\n"
      "   'other' = model - modules: embedding, layer norms, AttnRes reads, residual adds, tape bookkeeping.\n",
      (long long)T, (long long)c.hidden_size);
  print("   %-22s %6s %11s %11s %12s %7s %9s %7s\n", "module", "layers", "fwd/layer", "f+b/layer", "f+b x layers",
        "share", "GFLOP/s", "ratio");
  ordered_json brows = ordered_json::array();
  double sum_s = 0.0, sum_flops = 0.0;
  const double per_module = budget_s * kBreakdownShare / double(modules.size() + 1);
  auto breakdown_row = [&](const std::string& name, int64_t layers, double flops_per_token, const Timing& f,
                           const Timing& fb) {
    const double all = fb.best_s * double(layers), flops = flops_per_token * double(T);
    const double gflops = flops / fb.best_s * 1e-9;
    sum_s += all;
    sum_flops += flops * double(layers);
    print("   %-22s %6lld %11s %11s %12s %7s %9.1f %7s\n", name.c_str(), (long long)layers, time_str(f.best_s).c_str(),
          time_str(fb.best_s).c_str(), time_str(all).c_str(), pct(all / fwdbwd.best_s).c_str(), gflops,
          pct(gflops / peak).c_str());
    brows.push_back({{"module", name},
                     {"layers", layers},
                     {"forward", timing_json(f)},
                     {"forward_backward", timing_json(fb)},
                     {"forward_backward_all_layers_s", all},
                     {"share_of_model_forward_backward", all / fwdbwd.best_s},
                     {"flops_per_token_per_layer_fwdbwd", flops_per_token},
                     {"gflops", gflops},
                     {"ratio_to_peak", gflops / peak}});
  };
  for (const Module& m : modules) {
    const ag::Var x = random_var(T, c.hidden_size, 14, true);
    const Timing f = time_call(
        [&] {
          ag::NoGradGuard no_grad;
          (void)m.run(x);
        },
        per_module * 0.3);
    const Timing fb = time_call([&] { ag::backward(probe_loss(m.run(x), probe)); }, per_module * 0.7);
    breakdown_row(m.name, m.layers, m.flops_fwdbwd_per_token, f, fb);
  }
  // The KDA mixer with each sequence form of KDA (ops::kda_sequence_form), interleaved so both see the same machine:
  // the measurement the form is chosen by (section 2 prints it beside the kernels alone).
  if (!modules.empty() && acc.kda_mixer.layers > 0) {
    const Module& kda = modules.front();
    const ag::Var x = random_var(T, c.hidden_size, 14, true);
    const ops::KdaForm chosen = ops::kda_sequence_form(Device::kCPU);
    auto run_with = [&](ops::KdaForm f) {
      ops::set_kda_sequence_form(f);
      ag::backward(probe_loss(kda.run(x), probe));
    };
    const TimingPair t = time_interleaved([&] { run_with(ops::KdaForm::kChunk); },
                                          [&] { run_with(ops::KdaForm::kRecurrent); }, per_module);
    ops::set_kda_sequence_form(chosen);
    json["kda_in_model"] = {{"module", kda.name},
                            {"chunk_forward_backward", timing_json(t.a)},
                            {"recurrent_forward_backward", timing_json(t.b)},
                            {"chosen", ops::kda_form_name(chosen)}};
  }
  {
    const ag::Var h = random_var(T, c.hidden_size, 15, true);
    const ag::Var& head = model.p(tied ? "model.embed_tokens.weight" : "lm_head.weight");
    const Timing f = time_call(
        [&] {
          ag::NoGradGuard no_grad;
          (void)ag::cross_entropy(h, head, targets);
        },
        per_module * 0.3);
    const Timing fb = time_call([&] { ag::backward(ag::cross_entropy(h, head, targets)); }, per_module * 0.7);
    breakdown_row("lm_head + loss", 1, 6.0 * head_params, f, fb);
  }
  const double other_s = fwdbwd.best_s - sum_s, other_flops = fl.fwdbwd * double(T) - sum_flops;
  print("   %-22s %6s %11s %11s %12s %7s %9s %7s\n", "other", "", "", "", time_str(other_s).c_str(),
        pct(other_s / fwdbwd.best_s).c_str(), "", "");
  print("   (other's FLOPs, %.3g per call, are %.2f%% of the model's)\n", other_flops,
        100.0 * other_flops / (fl.fwdbwd * double(T)));
  json["breakdown"] = {{"rows", brows},
                       {"other_s", other_s},
                       {"other_share", other_s / fwdbwd.best_s},
                       {"note",
                        "modules timed alone at the first layer of each kind, x layer count; other = "
                        "model forward+backward minus the modules"}};
}

// ---------------------------------------------------------------- 2: KDA chunkwise vs recurrent

void run_kda_section(const ModelConfig& c, int64_t T, double budget_s, const Printer& print, Verdicts& verdicts,
                     ordered_json& json) {
  if (!c.linear_attn_config || c.num_kda_layers() == 0) {
    print("\n2. KDA: the config has no KDA layers; skipped\n");
    json["kda"] = {{"skipped", "no KDA layers"}};
    return;
  }
  const LinearAttnConfig& la = *c.linear_attn_config;
  const int64_t H = la.num_heads, K = la.head_dim, V = la.head_dim, chunk = kKdaChunkSize;
  const KdaShape s{.B = 1, .T = T, .H = H, .K = K, .V = V, .chunk = chunk};
  const int64_t nk = T * H * K, nv = T * H * V, nb = T * H;
  // Inputs as the mixer makes them: q, k L2-normalised per head (q also scaled by K^-1/2); g in (lb, 0); beta in (0,
  // 1).
  std::vector<float> q = random_floats(nk, -1, 1, 21), k = random_floats(nk, -1, 1, 22),
                     v = random_floats(nv, -1, 1, 23);
  std::vector<float> g = random_floats(nk, 0, 1, 24), beta = random_floats(nb, 0, 1, 25),
                     dout = random_floats(nv, -1, 1, 26);
  for (int64_t r = 0; r < T * H; ++r) {
    float sq = 0.0f, sk = 0.0f;
    for (int64_t i = 0; i < K; ++i) {
      sq += q[size_t(r * K + i)] * q[size_t(r * K + i)];
      sk += k[size_t(r * K + i)] * k[size_t(r * K + i)];
    }
    const float fq = 1.0f / std::sqrt((sq + 1e-6f) * float(K)), fk = 1.0f / std::sqrt(sk + 1e-6f);
    for (int64_t i = 0; i < K; ++i) {
      q[size_t(r * K + i)] *= fq;
      k[size_t(r * K + i)] *= fk;
    }
  }
  const float lb = float(la.gate_lower_bound);
  for (auto& x : g) x = lb / (1.0f + std::exp(-(8.0f * x - 6.0f)));  // lb sigmoid(u): mostly mild decay, some strong
  for (auto& x : beta) x = 1.0f / (1.0f + std::exp(-(4.0f * x - 2.0f)));
  std::vector<float> o(static_cast<size_t>(nv)), dq(static_cast<size_t>(nk)), dk(static_cast<size_t>(nk)),
      dv(static_cast<size_t>(nv)), dg(static_cast<size_t>(nk)), db(static_cast<size_t>(nb));

  auto chunk_fwd = [&] {
    ops::kda_chunk_forward(Device::kCPU, o.data(), nullptr, q.data(), k.data(), v.data(), g.data(), beta.data(),
                           nullptr, s);
  };
  auto rec_fwd = [&] {
    ops::kda_recurrent_forward(Device::kCPU, o.data(), nullptr, q.data(), k.data(), v.data(), g.data(), beta.data(),
                               nullptr, s);
  };
  auto backward = [&] {
    ops::kda_backward(Device::kCPU, dq.data(), dk.data(), dv.data(), dg.data(), db.data(), nullptr, dout.data(),
                      nullptr, q.data(), k.data(), v.data(), g.data(), beta.data(), nullptr, s);
  };
  auto rec_backward = [&] {
    ops::kda_recurrent_backward(Device::kCPU, dq.data(), dk.data(), dv.data(), dg.data(), db.data(), nullptr,
                                dout.data(), nullptr, q.data(), k.data(), v.data(), g.data(), beta.data(), nullptr, s);
  };
  // The reference algorithm per head ([H][T][K] copies, so each head is one B = 1, H = 1 call), heads across threads.
  auto per_head = [&](const std::vector<float>& x, int64_t w) {
    std::vector<float> y(x.size());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) std::copy_n(x.begin() + (t * H + h) * w, w, y.begin() + (h * T + t) * w);
    return y;
  };
  const std::vector<float> qh = per_head(q, K), kh = per_head(k, K), vh = per_head(v, V), gh = per_head(g, K),
                           bh = per_head(beta, 1), doh = per_head(dout, V);
  std::vector<float> oh(o.size()), dqh(dq.size()), dkh(dk.size()), dvh(dv.size()), dgh(dg.size()), dbh(db.size());
  auto ref_train = [&] {
#pragma omp parallel for num_threads(num_threads()) schedule(dynamic)
    for (int64_t h = 0; h < H; ++h) {
      const size_t ok = size_t(h * T * K), ov = size_t(h * T * V), ob = size_t(h * T);
      ref::kda_recurrent_forward<float>(oh.data() + ov, nullptr, qh.data() + ok, kh.data() + ok, vh.data() + ov,
                                        gh.data() + ok, bh.data() + ob, nullptr, 1, T, 1, K, V);
      ref::kda_recurrent_backward<float>(dqh.data() + ok, dkh.data() + ok, dvh.data() + ov, dgh.data() + ok,
                                         dbh.data() + ob, nullptr, doh.data() + ov, nullptr, qh.data() + ok,
                                         kh.data() + ok, vh.data() + ov, gh.data() + ok, bh.data() + ob, nullptr, 1, T,
                                         1, K, V);
    }
  };

  const double b = budget_s * kKdaShare;
  const Timing t_chunk = time_call(chunk_fwd, 0.1 * b), t_rec = time_call(rec_fwd, 0.1 * b),
               t_bwd = time_call(backward, 0.1 * b), t_rec_bwd = time_call(rec_backward, 0.1 * b),
               t_train = time_call(
                   [&] {
                     chunk_fwd();
                     backward();
                   },
                   0.2 * b),
               t_rec_train = time_call(
                   [&] {
                     rec_fwd();
                     rec_backward();
                   },
                   0.2 * b),
               t_ref = time_call(ref_train, 0.2 * b);
  const double lower = 3.0 * t_rec.best_s, speedup = t_rec_train.best_s / t_train.best_s,
               speedup_lower = lower / t_train.best_s, oracle = t_ref.best_s / t_train.best_s;
  // The form ag::kda runs (ops::kda_sequence_form) must be the faster one inside the model (section 4's KDA mixer,
  // forward + backward with each form), or within kKdaFormSlack of it.
  const ops::KdaForm form = ops::kda_sequence_form(Device::kCPU);
  double mixer_chunk = 0, mixer_rec = 0;
  if (json.contains("kda_in_model")) {
    mixer_chunk = json["kda_in_model"]["chunk_forward_backward"]["best_s"].get<double>();
    mixer_rec = json["kda_in_model"]["recurrent_forward_backward"]["best_s"].get<double>();
  }
  const double t_chosen = form == ops::KdaForm::kChunk ? mixer_chunk : mixer_rec;
  const double chosen_vs_best = t_chosen > 0 ? std::min(mixer_chunk, mixer_rec) / t_chosen : 0.0;
  const char* verdict = verdicts.add(chosen_vs_best >= kKdaFormSlack);

  print(
      "\n2. KDA training, chunkwise vs recurrent: the op alone (cpu:: kernels), B 1, T %lld, H %lld, K = V = %lld, "
      "chunk %lld\n",
      (long long)T, (long long)H, (long long)K, (long long)chunk);
  print("   %-72s %11s %11s\n", "piece", "time/call", "time/token");
  auto piece = [&](const char* name, double sec) {
    print("   %-72s %11s %11s\n", name, time_str(sec).c_str(), time_str(sec / double(T)).c_str());
  };
  piece("chunkwise forward (kda_chunk_forward)", t_chunk.best_s);
  piece("recurrent forward (kda_recurrent_forward)", t_rec.best_s);
  piece("chunkwise backward (kda_backward: per-chunk matrix products)", t_bwd.best_s);
  piece("recurrent backward (kda_recurrent_backward: per-token, states recomputed)", t_rec_bwd.best_s);
  piece("chunkwise training = chunk forward + kda_backward", t_train.best_s);
  piece("recurrent training = recurrent forward + kda_recurrent_backward", t_rec_train.best_s);
  piece("recurrent training, lower bound 3 x recurrent forward (info)", lower);
  piece("recurrent training, ref:: oracle (naive loops, all states kept; info)", t_ref.best_s);
  print("   kernels alone: training time chunkwise / recurrent %.2fx\n", 1.0 / speedup);
  print(
      "   in the model (the KDA mixer, forward + backward, each form, interleaved): chunkwise %s, recurrent %s;\n"
      "   ag::kda and prefill run the %s form (MYRIAD_KDA_FORM overrides): %.0f%% of the faster form's speed\n"
      "   (target >= %.0f%%)  %s\n",
      time_str(mixer_chunk).c_str(), time_str(mixer_rec).c_str(), ops::kda_form_name(form), 100 * chosen_vs_best,
      100 * kKdaFormSlack, verdict);
  print(
      "   recurrent training against its lower bound 3 x recurrent forward: %.2fx; the ref:: oracle against\n"
      "   chunkwise training: %.2fx (info)\n",
      t_rec_train.best_s / lower, oracle);
  json["kda"] = {{"shape", {{"B", 1}, {"T", T}, {"H", H}, {"K", K}, {"V", V}, {"chunk", chunk}}},
                 {"chunk_forward", timing_json(t_chunk)},
                 {"recurrent_forward", timing_json(t_rec)},
                 {"chunk_backward", timing_json(t_bwd)},
                 {"recurrent_backward", timing_json(t_rec_bwd)},
                 {"chunkwise_training", timing_json(t_train)},
                 {"recurrent_training", timing_json(t_rec_train)},
                 {"recurrent_training_lower_bound_s", lower},
                 {"ref_oracle_training", timing_json(t_ref)},
                 {"recurrent_over_chunkwise_time", speedup},
                 {"lower_bound_over_chunkwise_time", speedup_lower},
                 {"ref_oracle_over_chunkwise_time", oracle},
                 {"form", ops::kda_form_name(form)},
                 {"chosen_vs_best", chosen_vs_best},
                 {"target", kKdaFormSlack},
                 {"pass", chosen_vs_best >= kKdaFormSlack}};
}

// ---------------------------------------------------------------- 3: MoE scaling

nlohmann::json read_config_json(const std::string& path) {
  std::filesystem::path p(path);
  if (std::filesystem::is_directory(p)) p /= "config.json";
  std::ifstream f(p);
  MYRIAD_REQUIRE(f.good(), kIo, "cannot open ", p.string());
  return nlohmann::json::parse(f);  // already parsed once by load_model_config
}

// The config with `experts` routed experts, cut after layer `last` (0-based).
ModelConfig moe_variant(const nlohmann::json& original, const std::string& source, int64_t experts, int64_t last) {
  nlohmann::json j = original;
  nlohmann::json& t = j.contains("text_config") ? j["text_config"] : j;
  t.erase("n_routed_experts");
  t["num_experts"] = experts;
  const int64_t n = last + 1;
  t["num_hidden_layers"] = n;
  if (t.contains("linear_attn_config")) {
    for (const char* list : {"kda_layers", "full_attn_layers"}) {
      nlohmann::json kept = nlohmann::json::array();
      for (const auto& l : t["linear_attn_config"][list])
        if (l.get<int64_t>() <= n) kept.push_back(l);
      t["linear_attn_config"][list] = kept;
    }
  }
  std::vector<std::string> warnings;
  return parse_model_config(
      j, source + " (num_experts " + std::to_string(experts) + ", layers 0.." + std::to_string(last) + ")", &warnings);
}

void run_moe_section(const ModelConfig& c, const std::string& path, int64_t T, double budget_s,
                     const MachineLimits& limits, const Printer& print, Verdicts& verdicts, ordered_json& json) {
  int64_t layer = -1;
  for (int64_t l = 0; l < c.num_hidden_layers && layer < 0; ++l)
    if (c.is_moe_layer(l)) layer = l;
  if (layer < 0 || c.num_experts_per_token > kMoeExpertsSmall) {
    const char* why = layer < 0 ? "the config has no MoE layer" : "top-k exceeds 8 experts";
    print("\n3. MoE scaling: %s; skipped\n", why);
    json["moe"] = {{"skipped", why}};
    return;
  }
  const nlohmann::json original = read_config_json(path);
  print(
      "\n3. MoE scaling: Transformer::moe_ffn (layer %lld) on a random [%lld, %lld] input, top-%lld, expert width "
      "%lld,\n"
      "   latent %s; the config's JSON with num_experts set to %lld and %lld, cut after that layer; random init.\n",
      (long long)layer, (long long)T, (long long)c.hidden_size, (long long)c.num_experts_per_token,
      (long long)c.moe_intermediate_size,
      c.routed_expert_hidden_size ? std::to_string(*c.routed_expert_hidden_size).c_str() : "none",
      (long long)kMoeExpertsSmall, (long long)kMoeExpertsLarge);
  print("   %-10s %12s %11s %11s %11s %11s %9s %9s\n", "experts", "layer params", "init", "fwd", "f+b", "f+b/token",
        "hit", "max load");
  struct Result {
    Timing fwd, fwdbwd;
  };
  std::vector<Result> results;
  std::vector<int64_t> expert_params, hits;
  ordered_json rows = ordered_json::array();
  for (const int64_t E : {kMoeExpertsSmall, kMoeExpertsLarge}) {
    const ModelConfig v = moe_variant(original, c.source, E, layer);
    const ModelAccounting a = account_model(v);
    expert_params.push_back(a.expert_params);
    check_init_size(v, kInitDefaultMaxGb);
    const double t0 = now_seconds();
    const Transformer m(v, ModelWeights::random(v, 0));
    const double init_s = now_seconds() - t0;
    const ag::Var x = random_var(T, v.hidden_size, 31, true), probe = random_var(T, v.hidden_size, 32, false);
    RoutingStats st;
    {
      ag::NoGradGuard no_grad;
      (void)m.moe_ffn(layer, x, &st);
    }
    const int64_t hit = std::count_if(st.load.begin(), st.load.end(), [](int64_t n) { return n > 0; });
    const int64_t max_load = st.load.empty() ? 0 : *std::max_element(st.load.begin(), st.load.end());
    hits.push_back(hit);
    const double b = budget_s * kMoeShare / 2.0;
    Result r;
    r.fwd = time_call(
        [&] {
          ag::NoGradGuard no_grad;
          (void)m.moe_ffn(layer, x, nullptr);
        },
        0.3 * b);
    r.fwdbwd = time_call([&] { ag::backward(probe_loss(m.moe_ffn(layer, x, nullptr), probe)); }, 0.7 * b);
    print("   %-10lld %11.2fM %11s %11s %11s %11s %4lld/%-4lld %9lld\n", (long long)E, double(a.moe_ffn.params) * 1e-6,
          time_str(init_s).c_str(), time_str(r.fwd.best_s).c_str(), time_str(r.fwdbwd.best_s).c_str(),
          time_str(r.fwdbwd.best_s / double(T)).c_str(), (long long)hit, (long long)E, (long long)max_load);
    rows.push_back({{"experts", E},
                    {"moe_layer_params", a.moe_ffn.params},
                    {"init_s", init_s},
                    {"forward", timing_json(r.fwd)},
                    {"forward_backward", timing_json(r.fwdbwd)},
                    {"experts_hit", hit},
                    {"max_copies_per_expert", max_load}});
    results.push_back(r);
  }
  const double ratio = results[1].fwdbwd.best_s / results[0].fwdbwd.best_s;
  const double ratio_fwd = results[1].fwd.best_s / results[0].fwd.best_s;
  const char* verdict = verdicts.add(ratio <= kMoeScalingTarget);
  print("   time ratio %lld / %lld experts: forward+backward %.2fx (target <= %.1fx)  %s; forward %.2fx (info)\n",
        (long long)kMoeExpertsLarge, (long long)kMoeExpertsSmall, ratio, kMoeScalingTarget, verdict, ratio_fwd);
  // What the extra experts cost at the least on this machine: their f32 weights stream from memory (forward
  // reads them once; forward+backward twice, plus reading and writing their gradients: 4 passes), and the router
  // grows to E columns (2 T D E FLOPs forward, 3x that with backward), on top of the small config's own time.
  const double extra_bytes = 4.0 * double(hits[1] * expert_params[1] - hits[0] * expert_params[0]);
  const double extra_router = 2.0 * double(T) * double(c.hidden_size) * double(kMoeExpertsLarge - kMoeExpertsSmall);
  const double floor_fwd =
      results[0].fwd.best_s + extra_bytes / (limits.triad.gbs * 1e9) + extra_router / (limits.peak_gflops() * 1e9);
  const double floor_fb = results[0].fwdbwd.best_s + 4.0 * extra_bytes / (limits.triad.gbs * 1e9) +
                          3.0 * extra_router / (limits.peak_gflops() * 1e9);
  print(
      "   floor for %lld experts: the small config's time + the experts hit streaming their weights at the triad\n"
      "   bandwidth (forward 1 pass, forward+backward 4: weights twice, gradients read and written) + the wider\n"
      "   router at the FMA peak: forward %s (%.2fx of %lld experts), forward+backward %s (%.2fx);\n"
      "   measured against it: forward %.2fx, forward+backward %.2fx of the floor (info)\n",
      (long long)kMoeExpertsLarge, time_str(floor_fwd).c_str(), floor_fwd / results[0].fwd.best_s,
      (long long)kMoeExpertsSmall, time_str(floor_fb).c_str(), floor_fb / results[0].fwdbwd.best_s,
      results[1].fwd.best_s / floor_fwd, results[1].fwdbwd.best_s / floor_fb);
  json["moe"] = {{"layer", layer},
                 {"rows", rows},
                 {"ratio_forward_backward", ratio},
                 {"ratio_forward", ratio_fwd},
                 {"floor_forward_s", floor_fwd},
                 {"floor_forward_backward_s", floor_fb},
                 {"target", kMoeScalingTarget},
                 {"pass", ratio <= kMoeScalingTarget},
                 {"note", "configs cut after the first MoE layer (moe_ffn reads only that layer's weights)"}};
}

}  // namespace

ModelBenchResult run_model_bench(const ModelBenchOptions& opt, const MachineLimits& limits, std::FILE* out) {
  const Printer print{out};
  std::vector<std::string> warnings;
  const ModelConfig c = load_model_config(opt.config_path, &warnings);
  const int64_t T = opt.seq > 0 ? opt.seq : std::min(kDefaultSeq, c.max_position_embeddings);
  MYRIAD_REQUIRE(T >= 1 && T <= c.max_position_embeddings, kValue, "bench model: --seq ", T,
                 " must lie in 1..max_position_embeddings (", c.max_position_embeddings, ")");
  check_init_size(c, kInitDefaultMaxGb);
  print("config %s, T = %lld\n%s\n", opt.config_path.c_str(), (long long)T, model_config_summary(c).c_str());
  // The threading environment changes these figures a lot (OpenMP workers spinning beside OpenBLAS's own
  // threads), so it is printed and recorded with them.
  ordered_json env = ordered_json::object();
  std::string env_line;
  for (const char* name : {"MYRIAD_THREADS", "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
                           "OPENBLAS_NUM_THREADS", "MALLOC_MMAP_THRESHOLD_"}) {
    const char* v = std::getenv(name);
    env[name] = v ? ordered_json(v) : ordered_json(nullptr);
    if (v) env_line += std::string(env_line.empty() ? "" : ", ") + name + "=" + v;
  }
  if (std::getenv("MYRIAD_NO_REEXEC"))
    env_line += " (GOMP_SPINCOUNT=10000 unless chosen: the launcher's default, tools/myriad.cc)";
  print("threading environment: %s\n", env_line.empty() ? "defaults (none of MYRIAD_THREADS, OMP_*, GOMP_SPINCOUNT, "
                                                          "OPENBLAS_NUM_THREADS set)"
                                                        : env_line.c_str());

  ModelBenchResult res;
  Verdicts verdicts;
  ordered_json& j = res.json;
  j["config"] = opt.config_path;
  j["seq"] = T;
  j["budget_s"] = opt.budget_s;
  j["environment"] = env;
  run_model_sections(c, T, limits, opt.budget_s, print, verdicts, j);
  run_kda_section(c, T, opt.budget_s, print, verdicts, j);
  run_moe_section(c, opt.config_path, T, opt.budget_s, limits, print, verdicts, j);

  // The ceiling again: on a shared machine it drifts, and a large drift makes the ratios above suspect.
  const FmaPeak end = measure_fma_peak(0.5);
  print("\nFMA peak at the end of the run: %.1f GFLOP/s (start: %.1f; %+.1f%%)\n", end.gflops, limits.fma.gflops,
        100.0 * (end.gflops / std::max(limits.fma.gflops, 1e-9) - 1.0));
  j["fma_peak_end_of_run"] = {{"isa", end.isa}, {"gflops", end.gflops}, {"timing", timing_json(end.timing)}};
  res.targeted = verdicts.targeted;
  res.passed = verdicts.passed;
  return res;
}

}  // namespace myriad::bench

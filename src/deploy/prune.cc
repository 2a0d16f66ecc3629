// Expert pruning from routing statistics; see prune.h for the importance measure and the output layout.
#include "deploy/prune.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "autograd/functions.h"
#include "core/error.h"
#include "data/datasets/loader.h"
#include "data/tokenize/data_files.h"
#include "infer/weight_layout.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/run_layout.h"
#include "model/balancing.h"
#include "model/param_spec.h"
#include "model/routing.h"
#include "ops/kernels.h"

namespace fs = std::filesystem;

namespace myriad {

namespace {

using ojson = nlohmann::ordered_json;

std::string moe_prefix(int64_t layer) {
  return "model.layers." + std::to_string(layer) + ".block_sparse_moe.";
}

// Selection and mixture weights of one layer's window, recomputed from its router scores as moe_ffn does, summed
// into weight[e] per expert.
void add_routing_weights(const Transformer& model, const RoutingStats& st, std::vector<double>& weight) {
  const ModelConfig& c = model.config();
  const int64_t T = st.scores.shape()[0], E = st.scores.shape()[1], k = c.num_experts_per_token;
  MYRIAD_CHECK(E == int64_t(weight.size()), "scores ", shape_str(st.scores.shape()), " for ", weight.size(),
               " experts");
  Tensor scores_TE = st.scores.contiguous();
  const float* bias = c.topk_method == TopkMethod::kNoauxTc
                          ? model.p(moe_prefix(st.layer) + "gate.e_score_correction_bias").value().data<float>()
                          : nullptr;
  const Tensor idx_Tk =
      select_experts(c, scores_TE, bias,
                     c.has_capacity_limit() ? std::optional<double>(c.capacity_factor_at(0)) : std::nullopt)
          .idx;
  const Tensor p_Tk =
      ag::route_weights(ag::Var(scores_TE), idx_Tk, float(c.routed_scaling_factor), renormalizes_weights(c)).value();
  const int32_t* id = idx_Tk.data<int32_t>();
  const float* p = p_Tk.data<float>();
  for (int64_t i = 0; i < T * k; ++i)
    if (id[i] >= 0) weight[size_t(id[i])] += double(p[i]);
}

// Thrown from a reader's callback once max_tokens are in, so that a large file is not read to its end.
struct EnoughTokens {};

std::vector<int32_t> text_tokens(const std::vector<DataFile>& files, const Tokenizer& tok, int64_t max_tokens) {
  std::vector<int32_t> out;
  auto full = [&] { return max_tokens > 0 && int64_t(out.size()) >= max_tokens; };
  auto append = [&](std::string_view text) {
    if (full()) throw EnoughTokens{};
    if (text.empty()) return;
    const std::vector<int32_t> ids = tok.encode(text);
    out.insert(out.end(), ids.begin(), ids.end());
  };
  const int32_t eot = tok.id_of("<|endoftext|>");
  try {
    for (const DataFile& df : files) {
      const size_t before = out.size();
      if (df.jsonl) {
        SkippedLines skipped;
        read_jsonl_documents(
            df,
            [&](std::string_view text, uint64_t) {
              const size_t b = out.size();
              append(text);
              if (out.size() > b) out.push_back(eot);
            },
            &skipped);
      } else if (df.bytes > 0) {
        // Chunks end just after a '\n', which the tokenizer never merges: the same ids as the whole file at once.
        read_text_chunks(df.path, 0, df.bytes, size_t(256) << 10, append);
        if (out.size() > before) out.push_back(eot);
      }
      if (full()) break;
    }
  } catch (const EnoughTokens&) {
  }
  if (max_tokens > 0 && int64_t(out.size()) > max_tokens) out.resize(size_t(max_tokens));
  return out;
}

// Bytes on disk of a checkpoint's weight files (model.safetensors or its shards; not optimizer state).
uint64_t weight_file_bytes(const Checkpoint& ck) {
  uint64_t n = 0;
  for (const SafetensorsFile& f : ck.files()) n += fs::file_size(f.path());
  return n;
}

// Rows `rows` of a 2-D (or 1-D: elements) tensor, any scalar dtype, as a new contiguous tensor.
Tensor take_rows(const Tensor& src, const std::vector<int64_t>& rows) {
  const Tensor s = src.contiguous();
  Shape shape = s.shape();
  MYRIAD_CHECK(!shape.empty(), "take_rows of a scalar");
  const size_t row_bytes = s.nbytes() / size_t(shape[0]);
  shape[0] = int64_t(rows.size());
  Tensor out = Tensor::empty(shape, s.dtype());
  const auto* from = static_cast<const unsigned char*>(s.raw_data());
  auto* to = static_cast<unsigned char*>(out.raw_data());
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(to + i * row_bytes, from + size_t(rows[i]) * row_bytes, row_bytes);
  return out;
}

// Sets the expert count in a config file's text part (flat, or text_config) under the key(s) it uses.
void set_expert_count(ojson& config, int64_t n) {
  ojson& text = config.contains("text_config") && config["text_config"].is_object() ? config["text_config"] : config;
  bool set = false;
  for (const char* key : {"num_experts", "n_routed_experts"}) {
    if (text.contains(key)) {
      text[key] = n;
      set = true;
    }
  }
  if (!set) text["num_experts"] = n;
}

ojson perplexity_json(const Perplexity& p) {
  return {{"tokens", p.tokens}, {"loss", p.loss}, {"perplexity", p.perplexity}};
}

}  // namespace

KeepSpec parse_keep_spec(const std::string& text) {
  KeepSpec s;
  const std::string rule = "expected a count of experts (e.g. 4) or a percentage of them (e.g. 50%)";
  MYRIAD_REQUIRE(!text.empty(), kValue, "--keep: empty; ", rule);
  if (text.back() == '%') {
    const std::string num = text.substr(0, text.size() - 1);
    char* end = nullptr;
    errno = 0;
    const double p = num.empty() ? 0.0 : std::strtod(num.c_str(), &end);
    MYRIAD_REQUIRE(!num.empty() && end && *end == '\0' && errno == 0 && std::isfinite(p), kValue, "--keep ", text,
                   ": not a number; ", rule);
    MYRIAD_REQUIRE(p > 0.0 && p <= 100.0, kValue, "--keep ", text, ": a percentage must lie in (0, 100]");
    s.is_percent = true;
    s.percent = p;
    return s;
  }
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  MYRIAD_REQUIRE(end && *end == '\0' && errno == 0, kValue, "--keep ", text, ": not an integer; ", rule);
  MYRIAD_REQUIRE(n >= 1, kValue, "--keep ", text, ": must keep at least 1 expert");
  s.count = n;
  return s;
}

int64_t resolve_keep(const KeepSpec& spec, int64_t num_experts, int64_t top_k) {
  int64_t n = spec.count;
  std::string what = str("--keep ", spec.count);
  if (spec.is_percent) {
    // Rounded up; the 1e-9 keeps 75% of 8 at 6 when the product is 6.000000000000001.
    n = int64_t(std::ceil(double(num_experts) * spec.percent / 100.0 - 1e-9));
    what = str("--keep ", spec.percent, "% of ", num_experts, " experts = ", n);
  }
  MYRIAD_REQUIRE(n >= top_k, kValue, what, ": fewer experts than num_experts_per_token (", top_k,
                 "); every token routes to ", top_k, " experts, so keep at least ", top_k);
  MYRIAD_REQUIRE(n <= num_experts, kValue, what, ": more than the model's num_experts (", num_experts, ")");
  return n;
}

int64_t default_window(const ModelConfig& config) {
  return std::min<int64_t>(config.max_position_embeddings, 1024);
}

RoutingImportance collect_routing_importance(const Transformer& model, const std::vector<int32_t>& tokens,
                                             int64_t window) {
  const ModelConfig& c = model.config();
  MYRIAD_REQUIRE(window >= 1 && window <= c.max_position_embeddings, kValue, "calibration window ", window,
                 ": must lie in [1, max_position_embeddings = ", c.max_position_embeddings, "]");
  RoutingImportance r;
  r.top_k = c.num_experts_per_token;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (c.is_moe_layer(l))
      r.layers.push_back(
          {l, std::vector<int64_t>(size_t(c.num_experts), 0), std::vector<double>(size_t(c.num_experts), 0.0)});
  MYRIAD_REQUIRE(!r.layers.empty(), kUnsupported, c.source, ": the model has no MoE layers (", c.num_hidden_layers,
                 " layers, first_k_dense_replace ", c.first_k_dense_replace, "): there are no experts to prune");
  MYRIAD_REQUIRE(!tokens.empty(), kValue, "calibration: no tokens");
  ag::NoGradGuard no_grad;
  const int64_t n = int64_t(tokens.size());
  for (int64_t begin = 0; begin < n; begin += window) {
    const int64_t len = std::min(window, n - begin);
    Tensor ids_T = Tensor::empty({len}, DType::kI64);
    for (int64_t t = 0; t < len; ++t) ids_T.data<int64_t>()[t] = tokens[size_t(begin + t)];
    const ForwardResult fr = model.forward(ids_T, Tensor());
    MYRIAD_CHECK(fr.routing.size() == r.layers.size(), fr.routing.size(), " routing records for ", r.layers.size(),
                 " MoE layers");
    for (size_t i = 0; i < r.layers.size(); ++i) {
      const RoutingStats& st = fr.routing[i];
      LayerImportance& li = r.layers[i];
      MYRIAD_CHECK(st.layer == li.layer && st.load.size() == li.frequency.size());
      for (size_t e = 0; e < li.frequency.size(); ++e) li.frequency[e] += st.load[e];
      add_routing_weights(model, st, li.weight);
    }
    r.tokens += len;
    ++r.windows;
  }
  return r;
}

std::vector<int64_t> select_experts(const LayerImportance& layer, int64_t keep) {
  const int64_t E = int64_t(layer.weight.size());
  MYRIAD_CHECK(keep >= 0 && keep <= E && int64_t(layer.frequency.size()) == E);
  std::vector<int64_t> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    if (layer.weight[size_t(a)] != layer.weight[size_t(b)]) return layer.weight[size_t(a)] > layer.weight[size_t(b)];
    if (layer.frequency[size_t(a)] != layer.frequency[size_t(b)])
      return layer.frequency[size_t(a)] > layer.frequency[size_t(b)];
    return a < b;
  });
  order.resize(size_t(keep));
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<int32_t> read_data_tokens(const std::string& path, const std::string& split, const Tokenizer& tokenizer,
                                      int64_t max_tokens) {
  std::error_code ec;
  MYRIAD_REQUIRE(fs::exists(path, ec), kIo, "data '", path, "' does not exist");
  std::vector<int32_t> out;
  if (fs::is_directory(path, ec) && fs::exists(fs::path(path) / (split + "-00000.bin"), ec)) {
    const TokenStream stream = TokenStream::open(path, split, /*allow_empty=*/false);
    const int64_t n = max_tokens > 0 ? std::min(max_tokens, stream.size()) : stream.size();
    std::vector<int64_t> buf(static_cast<size_t>(n));
    stream.read(0, n, buf.data(), tokenizer.vocab_size());
    out.assign(buf.begin(), buf.end());
  } else {
    out = text_tokens(collect_data_files({path}), tokenizer, max_tokens);
  }
  MYRIAD_REQUIRE(!out.empty(), kValue, "data '", path, "' holds no text (no tokens after tokenizing)");
  return out;
}

Perplexity evaluate_perplexity(const Transformer& model, const std::vector<int32_t>& tokens, int64_t window) {
  const ModelConfig& c = model.config();
  MYRIAD_REQUIRE(window >= 1 && window <= c.max_position_embeddings, kValue, "evaluation window ", window,
                 ": must lie in [1, max_position_embeddings = ", c.max_position_embeddings, "]");
  MYRIAD_REQUIRE(tokens.size() >= 2, kValue, "evaluation needs at least 2 tokens, got ", tokens.size());
  ag::NoGradGuard no_grad;
  const int64_t n = int64_t(tokens.size());
  double sum = 0.0;
  int64_t count = 0;
  for (int64_t begin = 0; begin + 1 < n; begin += window) {
    const int64_t len = std::min(window, n - 1 - begin);
    Tensor ids_T = Tensor::empty({len}, DType::kI64), targets_T = Tensor::empty({len}, DType::kI64);
    for (int64_t t = 0; t < len; ++t) {
      ids_T.data<int64_t>()[t] = tokens[size_t(begin + t)];
      targets_T.data<int64_t>()[t] = tokens[size_t(begin + t + 1)];
    }
    const ForwardResult fr = model.forward(ids_T, targets_T);
    sum += double(fr.loss.value().data<float>()[0]) * double(len);  // the loss is the window's mean
    count += len;
  }
  Perplexity p;
  p.tokens = count;
  p.loss = sum / double(count);
  p.perplexity = std::exp(p.loss);
  return p;
}

ModelLocation locate_model(const std::string& dir, const std::string& needs_tokenizer_for) {
  std::error_code ec;
  MYRIAD_REQUIRE(fs::is_directory(dir, ec), kIo, "model directory '", dir, "' does not exist or is not a directory");
  ModelLocation m;
  const fs::path p(dir);
  m.checkpoint_dir = model_or_latest_checkpoint(dir);
  MYRIAD_REQUIRE(fs::exists(fs::path(m.checkpoint_dir) / "config.json", ec), kIo, "model '", m.checkpoint_dir,
                 "' has no config.json");
  if (fs::is_directory(fs::path(m.checkpoint_dir) / "tokenizer", ec)) {
    m.tokenizer_dir = (fs::path(m.checkpoint_dir) / "tokenizer").string();
  } else if (fs::is_directory(p / "tokenizer", ec)) {
    m.tokenizer_dir = (p / "tokenizer").string();
  }
  MYRIAD_REQUIRE(!m.tokenizer_dir.empty(), kIo, "model '", dir, "' has no tokenizer/ directory (", needs_tokenizer_for,
                 ")");
  return m;
}

PruneResult prune_model(const PruneOptions& o) {
  MYRIAD_REQUIRE(!o.in_dir.empty(), kValue, "prune needs --model DIR (a model or a training run)");
  MYRIAD_REQUIRE(!o.calib_path.empty(), kValue, "prune needs --calib DATA (text, JSONL or a directory of them)");
  MYRIAD_REQUIRE(!o.out_dir.empty(), kValue, "prune needs --out DIR");
  MYRIAD_REQUIRE(o.max_tokens >= 1, kValue, "--max-tokens ", o.max_tokens, ": must be >= 1");

  // The output first: refuse before doing any work.
  std::error_code ec;
  const fs::path out_path = fs::path(o.out_dir).lexically_normal();
  const std::string out = out_path.has_filename() ? out_path.string() : out_path.parent_path().string();
  if (fs::exists(fs::symlink_status(out, ec))) {
    MYRIAD_REQUIRE(fs::is_directory(out, ec), kIo, "output '", out, "' exists and is not a directory");
    MYRIAD_REQUIRE(o.force || directory_is_empty(out), kIo, "output directory '", out,
                   "' exists and is not empty (pass --force to replace it)");
  }

  const ModelLocation loc = locate_model(o.in_dir, "needed to tokenize the calibration data");
  {
    const fs::path a = fs::weakly_canonical(out, ec), in = fs::weakly_canonical(o.in_dir, ec),
                   ck = fs::weakly_canonical(loc.checkpoint_dir, ec);
    MYRIAD_REQUIRE(a != in && a != ck, kValue, "--out ", out, " is the input model's directory; choose another");
  }
  const std::string config_text = read_file((fs::path(loc.checkpoint_dir) / "config.json").string());
  const ModelConfig mc = load_model_config(loc.checkpoint_dir, nullptr);
  MYRIAD_REQUIRE(mc.num_moe_layers() > 0, kUnsupported, mc.source, ": the model has no MoE layers (",
                 mc.num_hidden_layers, " layers, first_k_dense_replace ", mc.first_k_dense_replace,
                 "): there are no experts to prune");
  const int64_t E = mc.num_experts, k = mc.num_experts_per_token;
  const int64_t N = resolve_keep(o.keep, E, k);
  const Checkpoint ck = open_model_checkpoint(loc.checkpoint_dir, mc);
  const Tokenizer tok = Tokenizer::load(loc.tokenizer_dir);
  MYRIAD_REQUIRE(tok.vocab_size() <= mc.vocab_size, kValue, "tokenizer ", loc.tokenizer_dir, " has ", tok.vocab_size(),
                 " tokens, more than the model's vocab_size (", mc.vocab_size, ")");
  const int64_t window = o.window > 0 ? o.window : default_window(mc);

  PruneResult r;
  r.checkpoint_dir = loc.checkpoint_dir;
  r.out_dir = out;
  r.kept = N;
  r.of = E;
  r.top_k = k;

  // Calibration.
  std::vector<int32_t> eval_tokens;
  RoutingImportance imp;
  {
    const Transformer model(mc, ModelWeights::from_checkpoint(ck, mc));
    const std::vector<int32_t> calib = read_data_tokens(o.calib_path, "train", tok, o.max_tokens);
    imp = collect_routing_importance(model, calib, window);
    if (!o.eval_path.empty()) {
      // max_tokens targets need max_tokens + 1 tokens.
      eval_tokens = read_data_tokens(o.eval_path, "val", tok, o.max_tokens + 1);
      r.eval_before = evaluate_perplexity(model, eval_tokens, window);
    }
  }
  r.calibration_tokens = imp.tokens;

  // Choice per layer.
  std::map<int64_t, std::vector<int64_t>> new_id;  // layer -> [E] new id or -1
  std::map<int64_t, size_t> layer_index;           // layer -> index into r.layers
  double kept_w = 0.0, total_w = 0.0;
  ojson layers_json = ojson::array();
  for (const LayerImportance& li : imp.layers) {
    PruneLayerResult lr;
    lr.layer = li.layer;
    lr.kept = select_experts(li, N);
    layer_index[li.layer] = r.layers.size();
    std::vector<int64_t>& map = new_id[li.layer];
    map.assign(size_t(E), -1);
    for (size_t i = 0; i < lr.kept.size(); ++i) map[size_t(lr.kept[i])] = int64_t(i);
    const double layer_w = std::accumulate(li.weight.begin(), li.weight.end(), 0.0);
    const int64_t layer_c = std::accumulate(li.frequency.begin(), li.frequency.end(), int64_t(0));
    double w = 0.0;
    int64_t copies = 0;
    ojson kept_json = ojson::array();
    for (int64_t e : lr.kept) {
      w += li.weight[size_t(e)];
      copies += li.frequency[size_t(e)];
      kept_json.push_back({{"id", e},
                           {"new_id", map[size_t(e)]},
                           {"frequency", li.frequency[size_t(e)]},
                           {"weight", li.weight[size_t(e)]},
                           {"weight_share", layer_w > 0 ? li.weight[size_t(e)] / layer_w : 0.0}});
    }
    std::vector<int64_t> dropped;
    for (int64_t e = 0; e < E; ++e)
      if (map[size_t(e)] < 0) dropped.push_back(e);
    lr.retained_weight = layer_w > 0 ? w / layer_w : 1.0;
    lr.retained_copies = layer_c > 0 ? double(copies) / double(layer_c) : 1.0;
    kept_w += w;
    total_w += layer_w;
    layers_json.push_back({{"layer", li.layer},
                           {"kept_ids", lr.kept},
                           {"dropped_ids", dropped},
                           {"retained_weight_fraction", lr.retained_weight},
                           {"retained_copy_fraction", lr.retained_copies},
                           {"kept", kept_json}});
    r.layers.push_back(std::move(lr));
  }
  r.retained_weight = total_w > 0 ? kept_w / total_w : 1.0;

  // The pruned tensors, in the checkpoint's order (zero-copy views except the sliced router tensors).
  NamedTensors tensors;
  for (const std::string& name : ck.names()) {
    int64_t layer = -1;
    std::string rest;
    if (name.rfind("model.layers.", 0) == 0) {
      const size_t dot = name.find('.', 13);
      layer = std::stoll(name.substr(13, dot - 13));
      rest = name.substr(dot + 1);
    }
    auto it = new_id.find(layer);
    const std::string moe = "block_sparse_moe.";
    if (it == new_id.end() || rest.rfind(moe, 0) != 0) {
      tensors.emplace_back(name, ck.tensor(name));
      continue;
    }
    const std::string field = rest.substr(moe.size());
    const std::string pre = moe_prefix(layer);
    const std::vector<int64_t>& kept = r.layers[layer_index.at(layer)].kept;
    if (field == "gate.weight" || field == "gate.e_score_correction_bias") {
      tensors.emplace_back(name, take_rows(ck.tensor(name), kept));
    } else if (field.rfind("experts.", 0) == 0) {
      const size_t dot = field.find('.', 8);
      const int64_t j = std::stoll(field.substr(8, dot - 8));
      MYRIAD_CHECK(j >= 0 && j < E, name);
      const int64_t nj = it->second[size_t(j)];
      if (nj >= 0) tensors.emplace_back(pre + "experts." + std::to_string(nj) + field.substr(dot), ck.tensor(name));
    } else {
      tensors.emplace_back(name, ck.tensor(name));
    }
  }

  // config.json: the new count and the record.
  ojson config = ojson::parse(config_text);
  set_expert_count(config, N);
  config["pruning"] = {{"kept", N}, {"of", E}, {"calibration_tokens", imp.tokens}, {"importance", "routing_weight"}};
  const std::string new_config_text = config.dump(2) + "\n";
  const ModelConfig pruned_mc =
      parse_model_config(nlohmann::json::parse(new_config_text), (fs::path(out) / "config.json").string(), nullptr);

  // Write into a temporary directory beside the output (io/atomic_file.h).
  StagedDirectory tmp(out);

  write_file_atomic((fs::path(tmp.path()) / "config.json").string(), new_config_text);
  std::map<std::string, std::string> meta = ck.metadata();
  meta.emplace("format", "pt");
  meta["myriad_pruned"] = str("kept ", N, " of ", E, " experts per MoE layer");
  uint64_t max_shard = 0;
  if (ck.sharded())
    for (const SafetensorsFile& f : ck.files()) max_shard = std::max<uint64_t>(max_shard, fs::file_size(f.path()));
  save_checkpoint(tmp.path(), tensors, meta, max_shard);
  tensors.clear();
  const fs::path tok_out = fs::path(tmp.path()) / "tokenizer";
  fs::create_directories(tok_out, ec);
  MYRIAD_REQUIRE(!ec, kIo, "cannot create ", tok_out.string(), ": ", ec.message());
  for (const auto& e : fs::directory_iterator(loc.tokenizer_dir)) {
    if (!e.is_regular_file()) continue;
    const fs::path to = tok_out / e.path().filename();
    fs::copy_file(e.path(), to, fs::copy_options::overwrite_existing, ec);
    MYRIAD_REQUIRE(!ec, kIo, "cannot copy ", e.path().string(), " to ", to.string(), ": ", ec.message());
    fsync_path(to.string());
  }
  fsync_directory(tok_out.string());

  // The result must load: names, shapes and dtypes against the new config (and a full forward with --eval).
  {
    const Checkpoint pruned = Checkpoint::open(tmp.path());
    validate_checkpoint_against_config(pruned, pruned_mc);
    r.bytes_after = weight_file_bytes(pruned);
    if (!o.eval_path.empty()) {
      const Transformer model(pruned_mc, ModelWeights::from_checkpoint(pruned, pruned_mc));
      r.eval_after = evaluate_perplexity(model, eval_tokens, window);
    }
  }
  r.bytes_before = weight_file_bytes(ck);

  ojson report = {
      {"source", loc.checkpoint_dir},
      {"importance", "routing_weight"},
      {"importance_definition",
       "per expert, the mixture weight p (router score over the chosen top-k, renormalised, times "
       "routed_scaling_factor) summed over the calibration tokens routed to it; ties broken by "
       "frequency (copies routed), then by lower id"},
      {"kept", N},
      {"of", E},
      {"top_k", k},
      {"calibration", {{"data", o.calib_path}, {"tokens", imp.tokens}, {"windows", imp.windows}, {"window", window}}},
      {"retained_weight_fraction", r.retained_weight},
      {"bytes", {{"before", r.bytes_before}, {"after", r.bytes_after}}},
      {"layers", layers_json}};
  if (r.eval_before && r.eval_after)
    report["eval"] = {{"data", o.eval_path},
                      {"original", perplexity_json(*r.eval_before)},
                      {"pruned", perplexity_json(*r.eval_after)}};
  write_file_atomic((fs::path(tmp.path()) / "prune_report.json").string(), report.dump(2) + "\n");
  r.report = std::move(report);
  tmp.commit();
  return r;
}

}  // namespace myriad

#include "infer/sequence_file.h"

#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>

#include "core/dtype.h"
#include "core/error.h"
#include "infer/decode_weights.h"
#include "io/safetensors.h"

namespace myriad {

namespace {

constexpr const char* kFormatName = "myriad-sequence-state";
constexpr const char* kVersion = "1";

const char* cache_dtype_word(DType d) {
  return d == DType::kQ8_0 ? "q8" : d == DType::kBF16 ? "bf16" : "f32";
}

std::string layer_name(int64_t l, const char* what) {
  return "layers." + std::to_string(l) + "." + what;
}

// A non-negative decimal metadata value; kFormat naming the file and the key otherwise.
int64_t metadata_int(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata().find(key);
  MYRIAD_REQUIRE(it != f.metadata().end(), kFormat, f.path(), ": sequence state without metadata \"", key, "\"");
  int64_t v = -1;
  const std::string& s = it->second;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  MYRIAD_REQUIRE(ec == std::errc() && end == s.data() + s.size() && v >= 0, kFormat, f.path(), ": metadata \"", key,
                 "\" = \"", s, "\" is not a non-negative integer");
  return v;
}

// The tensor `name` of f, checked to be of `dtype` and `shape`.
Tensor checked_tensor(const SafetensorsFile& f, const std::string& name, DType dtype, const Shape& shape) {
  MYRIAD_REQUIRE(f.contains(name), kFormat, f.path(), ": sequence state without tensor ", name);
  const SafetensorsEntry& e = f.entry(name);
  MYRIAD_REQUIRE(e.dtype == dtype && e.shape == shape, kFormat, f.path(), ": tensor ", name, " is ",
                 dtype_name(e.dtype), " ", shape_str(e.shape), ", expected ", dtype_name(dtype), " ", shape_str(shape));
  return f.tensor(name);
}

}  // namespace

std::string model_fingerprint(const InferenceModel& model) {
  XXH3_state_t* st = XXH3_createState();
  MYRIAD_CHECK(st != nullptr, "XXH3_createState failed");
  XXH3_64bits_reset(st);
  // The config as its summary reads it, plus what the summary leaves out and the states depend on.
  const ModelConfig& c = model.config();
  std::string summary = model_config_summary(c) + "|rope_theta " + std::to_string(c.rope_theta);
  if (c.rope_scaling) summary += "|yarn " + std::to_string(c.rope_scaling->factor);
  if (const auto& sp = c.mla_sparse_attention)
    summary += "|sparse " + std::to_string(sp->block_size) + " " + std::to_string(sp->top_k) + " " +
               std::to_string(sp->window);
  XXH3_64bits_update(st, summary.data(), summary.size());
  model.weights().for_each_tensor([&](const std::string& name, const Tensor& t) {
    if (name.find(".experts.") != std::string::npos) return;  // routed experts: see the header
    const std::string head = name + "|" + dtype_name(t.dtype()) + "|" + shape_str(t.shape());
    XXH3_64bits_update(st, head.data(), head.size());
    const Tensor data = t.contiguous();
    const auto* p = static_cast<const unsigned char*>(data.raw_data());
    const size_t n = data.nbytes(), window = 4096, windows = 16;
    if (n <= 16 * window) {
      XXH3_64bits_update(st, p, n);
      return;
    }
    for (size_t w = 0; w < windows; ++w) XXH3_64bits_update(st, p + (n - window) / (windows - 1) * w, window);
  });
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

void save_sequence_file(const std::string& path, const InferenceModel& model, std::span<const int32_t> tokens,
                        uint64_t images, std::span<const KdaState> kda, std::span<const MlaCache> mla,
                        const std::string& fingerprint) {
  const ModelConfig& c = model.config();
  const int64_t L = c.num_hidden_layers, n = int64_t(tokens.size());
  MYRIAD_REQUIRE(int64_t(kda.size()) == L && int64_t(mla.size()) == L, kValue, "sequence state: ", kda.size(),
                 " KDA states and ", mla.size(), " MLA caches for a model of ", L, " layers");
  MYRIAD_REQUIRE(n > 0, kValue, "sequence state: no tokens to save");
  // The caches' storage (every MLA layer's is the same: one engine made them).
  DType dtype = DType::kF32;
  int64_t page_tokens = MlaCache::kDefaultPageTokens;
  for (int64_t l = 0; l < L; ++l)
    if (c.mixer(l) == Mixer::kMla) {
      dtype = mla[size_t(l)].dtype();
      page_tokens = mla[size_t(l)].page_tokens();
    }
  const SequenceState fresh = model.new_sequence(page_tokens, dtype);

  std::vector<TensorSpec> specs;
  std::vector<std::function<Tensor()>> produce;
  specs.push_back({"tokens", DType::kI32, {n}});
  produce.push_back([&] { return Tensor::from_vector(std::vector<int32_t>(tokens.begin(), tokens.end()), {n}); });
  for (int64_t l = 0; l < L; ++l) {
    if (c.mixer(l) != Mixer::kMla) {
      const KdaState& s = kda[size_t(l)];
      const KdaState& f = fresh.kda[size_t(l)];
      const std::pair<const char*, const Tensor*> parts[] = {
          {"kda.conv_q", &s.conv_q}, {"kda.conv_k", &s.conv_k}, {"kda.conv_v", &s.conv_v}, {"kda.state", &s.S}};
      const Tensor* want[] = {&f.conv_q, &f.conv_k, &f.conv_v, &f.S};
      for (size_t i = 0; i < 4; ++i) {
        const Tensor& t = *parts[i].second;
        MYRIAD_REQUIRE(t.defined() && t.dtype() == DType::kF32 && t.shape() == want[i]->shape(), kValue,
                       "sequence state: layer ", l, " ", parts[i].first, " is not this model's KDA state");
        specs.push_back({layer_name(l, parts[i].first), DType::kF32, t.shape()});
        produce.push_back([&t] { return t.contiguous(); });
      }
      continue;
    }
    const MlaCache& m = mla[size_t(l)];
    const MlaCache& f = fresh.mla[size_t(l)];
    MYRIAD_REQUIRE(m.size() == n && m.kv_lora_rank() == f.kv_lora_rank() && m.rope_dim() == f.rope_dim() &&
                       m.dtype() == dtype && m.page_tokens() == page_tokens && m.mean_block() == f.mean_block(),
                   kValue, "sequence state: layer ", l, "'s latent cache (", m.size(),
                   " rows) is not this model's for ", n, " tokens");
    const int64_t W = m.row_width();
    if (dtype == DType::kQ8_0) {
      const auto bytes = int64_t(MlaCache::page_bytes(m.kv_lora_rank(), m.rope_dim(), page_tokens, dtype));
      specs.push_back({layer_name(l, "mla.q8_pages"), DType::kU8, {m.num_pages(), bytes}});
      produce.push_back([&m, bytes] {
        Tensor t = Tensor::empty({m.num_pages(), bytes}, DType::kU8);
        for (int64_t p = 0; p < m.num_pages(); ++p)
          std::memcpy(t.data<uint8_t>() + p * bytes, m.page_q8(p), size_t(bytes));
        return t;
      });
    } else if (dtype == DType::kBF16) {
      specs.push_back({layer_name(l, "mla.rows"), DType::kBF16, {n, W}});
      produce.push_back([&m, n, W] {
        Tensor t = Tensor::empty({n, W}, DType::kBF16);
        for (int64_t p = 0; p < m.num_pages(); ++p)
          std::memcpy(t.data<uint16_t>() + p * m.page_tokens() * W, m.page_bf16(p),
                      size_t(m.page_rows(p) * W) * sizeof(uint16_t));
        return t;
      });
    } else {
      specs.push_back({layer_name(l, "mla.rows"), DType::kF32, {n, W}});
      produce.push_back([&m, n, W] {
        Tensor t = Tensor::empty({n, W});
        m.rows_f32(0, n, t.data<float>(), W);
        return t;
      });
    }
    if (m.mean_block() > 0) {
      const BlockMeans& bm = m.block_means();
      specs.push_back({layer_name(l, "mla.block_means"), DType::kF32, {bm.complete(), W}});
      produce.push_back([&bm, W] { return Tensor::from_vector(bm.mean_rows(), {bm.complete(), W}); });
      if (n % bm.block() != 0) {
        specs.push_back({layer_name(l, "mla.block_partial_sum"), DType::kF32, {W}});
        produce.push_back([&bm, W] { return Tensor::from_vector(bm.partial_sum(), {W}); });
      }
    }
  }
  const std::map<std::string, std::string> metadata = {
      {"format", kFormatName},
      {"version", kVersion},
      {"model", fingerprint.empty() ? model_fingerprint(model) : fingerprint},
      {"tokens", std::to_string(n)},
      {"cache_dtype", cache_dtype_word(dtype)},
      {"page_tokens", std::to_string(page_tokens)},
      {"images", std::to_string(images)}};
  save_safetensors(
      path, specs, [&](size_t i) { return produce[i](); }, metadata);
}

SequenceSnapshot load_sequence_file(const std::string& path, const InferenceModel& model, int64_t page_tokens,
                                    DType cache_dtype, const std::string& fingerprint) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  const auto meta = [&](const std::string& key) {
    const auto it = f.metadata().find(key);
    return it == f.metadata().end() ? std::string() : it->second;
  };
  MYRIAD_REQUIRE(meta("format") == kFormatName, kFormat, path,
                 ": not a myriad sequence state (its metadata \"format\" is \"", meta("format"), "\", expected \"",
                 kFormatName, "\")");
  MYRIAD_REQUIRE(meta("version") == kVersion, kFormat, path, ": sequence state version \"", meta("version"),
                 "\"; this myriad reads version ", kVersion);
  const std::string mine = fingerprint.empty() ? model_fingerprint(model) : fingerprint;
  MYRIAD_REQUIRE(meta("model") == mine, kValue, path, ": the state of another model (fingerprint ", meta("model"),
                 "; this model's, ", model.source().empty() ? std::string("in memory") : model.source(), ", is ", mine,
                 "): a sequence state is only valid for the model that computed it");
  const ModelConfig& c = model.config();
  const int64_t n = metadata_int(f, "tokens"), file_page = metadata_int(f, "page_tokens");
  MYRIAD_REQUIRE(n > 0 && n <= c.max_position_embeddings, kFormat, path, ": a state of ", n,
                 " tokens (the model's context is ", c.max_position_embeddings, ")");
  MYRIAD_REQUIRE(file_page > 0, kFormat, path, ": page_tokens 0");
  const std::string dword = meta("cache_dtype");
  MYRIAD_REQUIRE(dword == "f32" || dword == "bf16" || dword == "q8", kFormat, path, ": cache_dtype \"", dword,
                 "\" (f32, bf16 or q8)");
  const DType file_dtype = dword == "q8" ? DType::kQ8_0 : dword == "bf16" ? DType::kBF16 : DType::kF32;

  SequenceSnapshot snap;
  {
    const std::string images = meta("images");
    const auto [end, ec] = std::from_chars(images.data(), images.data() + images.size(), snap.images);
    MYRIAD_REQUIRE(!images.empty() && ec == std::errc() && end == images.data() + images.size(), kFormat, path,
                   ": metadata \"images\" = \"", images, "\" is not a number");
  }
  const Tensor tokens = checked_tensor(f, "tokens", DType::kI32, {n});
  snap.tokens.assign(tokens.data<int32_t>(), tokens.data<int32_t>() + n);
  for (int64_t i = 0; i < n; ++i)
    MYRIAD_REQUIRE(snap.tokens[size_t(i)] >= 0 && snap.tokens[size_t(i)] < c.vocab_size, kFormat, path, ": token ", i,
                   " is ", snap.tokens[size_t(i)], ", outside the vocabulary of ", c.vocab_size);

  SequenceState fresh = model.new_sequence(page_tokens, cache_dtype);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.mixer(l) != Mixer::kMla) {
      KdaState& s = fresh.kda[size_t(l)];
      s.conv_q = checked_tensor(f, layer_name(l, "kda.conv_q"), DType::kF32, s.conv_q.shape()).clone();
      s.conv_k = checked_tensor(f, layer_name(l, "kda.conv_k"), DType::kF32, s.conv_k.shape()).clone();
      s.conv_v = checked_tensor(f, layer_name(l, "kda.conv_v"), DType::kF32, s.conv_v.shape()).clone();
      s.S = checked_tensor(f, layer_name(l, "kda.state"), DType::kF32, s.S.shape()).clone();
      s.tokens = n;
      snap.kda.push_back(std::move(s));
      snap.mla.push_back(std::move(fresh.mla[size_t(l)]));
      continue;
    }
    MlaCache& into = fresh.mla[size_t(l)];
    const int64_t C = into.kv_lora_rank(), Dr = into.rope_dim(), W = into.row_width(), B = into.mean_block();
    std::optional<BlockMeans> means;
    if (B > 0) {
      const Tensor rows = checked_tensor(f, layer_name(l, "mla.block_means"), DType::kF32, {n / B, W});
      Tensor partial;
      if (n % B != 0) partial = checked_tensor(f, layer_name(l, "mla.block_partial_sum"), DType::kF32, {W});
      means = BlockMeans::from_mean_rows(B, W, rows.data<float>(), n / B,
                                         partial.defined() ? partial.data<float>() : nullptr, n % B);
    }
    if (file_dtype == DType::kQ8_0) {
      const auto bytes = int64_t(MlaCache::page_bytes(C, Dr, file_page, DType::kQ8_0));
      const int64_t pages = (n + file_page - 1) / file_page;
      const Tensor all = checked_tensor(f, layer_name(l, "mla.q8_pages"), DType::kU8, {pages, bytes});
      std::vector<Tensor> page_list;
      for (int64_t p = 0; p < pages; ++p) page_list.push_back(all.slice(0, p, p + 1).reshape({bytes}));
      if (cache_dtype == DType::kQ8_0 && page_tokens == file_page) {  // as stored
        snap.mla.push_back(
            MlaCache::from_raw_pages(C, Dr, page_tokens, cache_dtype, B, n, std::move(page_list), std::move(means)));
        snap.kda.push_back(KdaState{});
        continue;
      }
      const MlaCache src = MlaCache::from_raw_pages(C, Dr, file_page, DType::kQ8_0, 0, n, std::move(page_list));
      std::vector<float> row(static_cast<size_t>(W));
      for (int64_t t = 0; t < n; ++t) {
        src.row_f32(t, row.data());
        into.append(row.data(), row.data() + C);
      }
    } else {
      const Tensor rows = checked_tensor(f, layer_name(l, "mla.rows"), file_dtype, {n, W});
      std::vector<float> row(static_cast<size_t>(W));
      for (int64_t t = 0; t < n; ++t) {
        if (file_dtype == DType::kBF16) {
          const uint16_t* r = rows.data<uint16_t>() + t * W;
          for (int64_t i = 0; i < W; ++i) row[size_t(i)] = bf16_to_f32(r[i]);
        } else {
          std::memcpy(row.data(), rows.data<float>() + t * W, size_t(W) * sizeof(float));
        }
        into.append(row.data(), row.data() + C);
      }
    }
    if (means) into.set_block_means(std::move(*means));
    snap.mla.push_back(std::move(into));
    snap.kda.push_back(KdaState{});
  }
  return snap;
}

}  // namespace myriad

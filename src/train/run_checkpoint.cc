#include "train/run_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/json_fields.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/checksums.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;

namespace myriad {

namespace {

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06lld", static_cast<long long>(step));
  return buf;
}

// Test hook: MYRIAD_FAULT_IN_SAVE=1 ends the process half way through writing a checkpoint (after the weights,
// before the rename), as a kill during a save would.
void maybe_fault() {
  const char* f = std::getenv("MYRIAD_FAULT_IN_SAVE");
  if (f && std::string(f) == "1") {
    std::fprintf(stderr, "myriad: MYRIAD_FAULT_IN_SAVE=1: exiting in the middle of a checkpoint save\n");
    std::fflush(stderr);
    ::_exit(3);
  }
}

}  // namespace

namespace {
bool is_staging(const fs::path& p) {
  return p.filename().string().find(".tmp-") != std::string::npos;
}
}  // namespace

RunCheckpointWriter::RunCheckpointWriter(const std::string& run_dir, int64_t step)
    : root_((fs::path(run_dir) / "checkpoints").string()), name_(step_name(step)) {
  std::error_code ec;
  fs::create_directories(root_, ec);
  MYRIAD_REQUIRE(!ec, kIo, "cannot create ", root_, ": ", ec.message());
  // Stale staging directories of an interrupted save (`step-N.tmp-XXXXXX`, or `.tmp-*` from older versions).
  for (const auto& e : fs::directory_iterator(root_))
    if (e.is_directory() && is_staging(e.path())) fs::remove_all(e.path(), ec);
  // io's staged directory: written beside the destination, then put in place by one rename, or by an atomic
  // exchange with a checkpoint of the same step saved before (a re-save after a resume): no window without one.
  staged_ = std::make_unique<StagedDirectory>((fs::path(root_) / name_).string());
}

RunCheckpointWriter::~RunCheckpointWriter() = default;

const std::string& RunCheckpointWriter::staging() const {
  return staged_->path();
}

std::string RunCheckpointWriter::commit(const CheckpointContents& c, int64_t keep) {
  const fs::path tmp = staged_->path();
  write_file_atomic((tmp / "config.json").string(), c.config_json);
  std::map<std::string, std::string> meta = {{"format", "pt"},
                                             {"myriad_step", std::to_string(c.trainer_state.value("step", 0))}};
  if (!c.sharded) {
    save_safetensors((tmp / "model.safetensors").string(), c.weights, meta);
    maybe_fault();
    save_optimizer_state((tmp / "optimizer.safetensors").string(), c.optimizer_state, c.optimizer_step, meta);
  } else {
    maybe_fault();
  }
  write_file_atomic((tmp / "trainer_state.json").string(), c.trainer_state.dump(1));
  std::error_code ec;
  if (!c.tokenizer_dir.empty()) {
    fs::create_directories(tmp / "tokenizer", ec);
    for (const auto& e : fs::directory_iterator(c.tokenizer_dir)) {
      if (!e.is_regular_file()) continue;
      const fs::path to = tmp / "tokenizer" / e.path().filename();
      fs::copy_file(e.path(), to, fs::copy_options::overwrite_existing, ec);
      MYRIAD_REQUIRE(!ec, kIo, "cannot copy ", e.path().string(), " into the checkpoint: ", ec.message());
      fsync_path(to.string());
    }
    fsync_directory((tmp / "tokenizer").string());
  }
  write_checksums(tmp.string());  // last: it lists every file above (and the shards other ranks staged)
  staged_->commit();
  const fs::path root(root_);
  write_file_atomic((root / "latest").string(), name_ + "\n");
  // Keep the newest `keep` complete checkpoints.
  std::vector<std::string> all;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0 && !is_staging(e.path()))
      all.push_back(e.path().filename());
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i + size_t(keep) < all.size(); ++i) fs::remove_all(root / all[i], ec);
  return (root / name_).string();
}

std::string save_run_checkpoint(const std::string& run_dir, int64_t step, const CheckpointContents& c, int64_t keep) {
  RunCheckpointWriter w(run_dir, step);
  return w.commit(c, keep);
}

void write_weights_shard(const std::string& staging, int64_t shard, int64_t shards, const NamedTensors& weights,
                         int64_t step) {
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"myriad_step", std::to_string(step)}};
  save_safetensors((fs::path(staging) / checkpoint_shard_name("model", shard, shards)).string(), weights, meta);
}

void write_optimizer_shard(const std::string& staging, int64_t shard, int64_t shards, const NamedTensors& state,
                           int64_t optimizer_step, int64_t step) {
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"myriad_step", std::to_string(step)}};
  save_optimizer_state((fs::path(staging) / checkpoint_shard_name("optimizer", shard, shards)).string(), state,
                       optimizer_step, meta);
}

CheckpointModel open_checkpoint_model(const std::string& ck, const std::string& tokenizer) {
  CheckpointModel m;
  m.dir = ck;
  m.config_json = read_file(ck + "/config.json");
  m.config = load_model_config(ck + "/config.json", nullptr);
  m.tokenizer = Tokenizer::load(tokenizer.empty() ? find_model_tokenizer(ck) : tokenizer);
  MYRIAD_REQUIRE(m.tokenizer.vocab_size() <= m.config.vocab_size, kConfig, "the tokenizer of ", ck, " has ",
                 m.tokenizer.vocab_size(), " tokens but the model's vocab_size is ", m.config.vocab_size);
  return m;
}

nlohmann::json parse_trainer_state(std::string_view text, const std::string& source) {
  nlohmann::json st = parse_json_or_discarded(text);
  MYRIAD_REQUIRE(!st.is_discarded(), kFormat, source, ": not valid JSON (a damaged checkpoint?)");
  MYRIAD_REQUIRE(st.is_object(), kFormat, source, ": must be a JSON object, got ", st.type_name());
  return st;
}

nlohmann::json read_trainer_state(const std::string& checkpoint_dir) {
  const std::string path = checkpoint_dir + "/trainer_state.json";
  verify_checksum(path);
  return parse_trainer_state(read_file(path), path);
}

int64_t trainer_state_counter(const nlohmann::json& state, const char* key, const std::string& source,
                              std::optional<int64_t> fallback) {
  const auto it = state.find(key);
  if (it == state.end() && fallback) return *fallback;
  MYRIAD_REQUIRE(it != state.end(), kFormat, source, ": \"", key, "\" is missing");
  MYRIAD_REQUIRE(it->is_number_integer() && (it->is_number_unsigned() || it->get<int64_t>() >= 0) &&
                     it->get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()),
                 kFormat, source, ": \"", key, "\" must be a non-negative integer, got ", it->dump());
  return it->get<int64_t>();
}

}  // namespace myriad

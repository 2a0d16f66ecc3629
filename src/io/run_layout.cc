#include "io/run_layout.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/checkpoint.h"

namespace fs = std::filesystem;

namespace myriad {

std::string latest_checkpoint(const std::string& dir) {
  const fs::path p(dir);
  if (fs::exists(p / "trainer_state.json")) return p.string();
  const fs::path latest = p / "checkpoints" / "latest";
  std::ifstream in(latest);
  MYRIAD_REQUIRE(in.good(), kIo, dir, " holds no checkpoint (no checkpoints/latest and no trainer_state.json)");
  std::string name;
  std::getline(in, name);
  const fs::path ck = p / "checkpoints" / name;
  MYRIAD_REQUIRE(!name.empty() && fs::exists(ck / "trainer_state.json"), kFormat, latest.string(),
                 " names a checkpoint that is missing or incomplete: ", name);
  return ck.string();
}

std::string model_or_latest_checkpoint(const std::string& dir) {
  const fs::path p(dir);
  if (fs::exists(p / kCheckpointSingleFile) || fs::exists(p / kCheckpointIndexFile)) return dir;
  MYRIAD_REQUIRE(fs::exists(p / "checkpoints" / "latest") || fs::exists(p / "trainer_state.json"), kIo, "'", dir,
                 "' holds no model: no ", kCheckpointSingleFile, " or ", kCheckpointIndexFile,
                 ", and it is not a training run (no checkpoints/latest)");
  return latest_checkpoint(dir);
}

void start_run_directory(const std::string& dir, bool force) {
  if (fs::exists(dir) && !fs::is_empty(dir)) {
    MYRIAD_REQUIRE(force, kIo, "the output directory ", dir, " exists and is not empty (use --resume ", dir,
                   " to continue it, or --force to start over)");
    fs::remove_all(dir);
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  MYRIAD_REQUIRE(!ec, kIo, "cannot create the output directory ", dir, ": ", ec.message());
}

}  // namespace myriad

#include "io/run_layout.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"

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

}  // namespace myriad

// Facts of this build, generated at each build by cmake/build_info.cmake (the generated file lives in the build
// directory): `myriad version` and the Python module's __version__ print them.
#pragma once

namespace myriad::build {

extern const char* const kVersion;     // "0.1.0-dev+g1a2b3c4d5e", or "0.2.0" from a release tag v0.2.0
extern const char* const kCommit;      // the full commit hash ("-dirty": tracked files changed), or "unknown"
extern const char* const kCompiler;    // "GNU 12.2.0"
extern const char* const kBuildType;   // "Release"
extern const char* const kBuildFlags;  // myriad's own code generation flags ("-march=native -O3 ...")

}  // namespace myriad::build

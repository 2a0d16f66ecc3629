// Checksums of a checkpoint's files, so that a damaged checkpoint (a truncated copy, a flipped bit on disk or in
// transit) is refused on load instead of loading as silent garbage. safetensors has no checksum of its own.
//
// The manifest: DIR/checksums.json, written last (atomically) into a checkpoint directory before it is committed:
//   {"algorithm": "xxh3-64", "files": {"model.safetensors": {"bytes": 123, "xxh3": "9f86d081884c7d65"},
//                                      "tokenizer/tokenizer.model": {...}, ...}}
// with every regular file under DIR (recursively) except the manifest itself. xxh3-64 (Debian's libxxhash) reads
// at memory speed, so verifying costs about as much as reading the file once (the loaders read it anyway).
//
// Verification: a file is checked against the manifest of its own directory or of the directory above (a
// tokenizer/ inside a checkpoint); a file no manifest lists, or a directory without one (a checkpoint written by
// an older myriad, a Hugging Face download), is accepted unchecked. A mismatch, a size change or a damaged
// manifest is kFormat naming the file and the rule. A file verified once is not hashed again by the same process
// while its inode, size and change times stay the same.
#pragma once

#include <cstdint>
#include <string>

namespace myriad {

inline constexpr const char* kChecksumFile = "checksums.json";

// The xxh3-64 of a file's bytes as 16 hex digits; *bytes gets its size (kIo when it cannot be read).
std::string file_checksum(const std::string& path, uint64_t* bytes = nullptr);

// Writes DIR/checksums.json for every regular file under dir (atomically).
void write_checksums(const std::string& dir);

// Checks `path` against the manifest that lists it, if any (see above).
void verify_checksum(const std::string& path);

// Checks every file a directory's manifest lists (kFormat for a missing one too); false when there is no manifest.
bool verify_directory_checksums(const std::string& dir);

}  // namespace myriad

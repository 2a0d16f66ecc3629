// Image-text JSONL records: see image_text_records.h.
#include "data/datasets/image_text_records.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "data/chat/conversation.h"
#include "data/datasets/image_store.h"

namespace myriad {

namespace {

using json = nlohmann::json;

const std::string& string_field(const json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  MYRIAD_REQUIRE(it != j.end(), kFormat, where, ": '", key, "' is missing");
  MYRIAD_REQUIRE(it->is_string(), kFormat, where, ": '", key, "' must be a string, got ", it->type_name());
  return it->get_ref<const std::string&>();
}

// A path relative to the file's folder; data: URIs and stored images (data/datasets/image_store.h) as they are; remote
// URLs refused.
std::string resolve_image(const std::string& ref, const std::filesystem::path& folder, const std::string& what) {
  if (ref.rfind("data:", 0) == 0 || stored_image_index(ref, what) >= 0) return ref;
  MYRIAD_REQUIRE(ref.rfind("http://", 0) != 0 && ref.rfind("https://", 0) != 0, kFormat, what,
                 ": remote image URLs are not fetched: give a path or a data: URI");
  MYRIAD_REQUIRE(!ref.empty(), kFormat, what, ": empty image path");
  const std::filesystem::path p(ref);
  return p.is_absolute() ? ref : (folder / p).string();
}

}  // namespace

std::vector<std::string> split_at_markers(const std::string& text, const std::string& marker) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t m; !marker.empty() && (m = text.find(marker, at)) != std::string::npos; at = m + marker.size())
    out.push_back(text.substr(at, m - at));
  out.push_back(text.substr(at));
  return out;
}

std::vector<ImageTextRecord> read_image_text_records(const std::string& path, const std::string& marker) {
  std::ifstream in(path, std::ios::binary);
  MYRIAD_REQUIRE(in, kIo, "cannot read the image-text file ", path);
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  std::vector<ImageTextRecord> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ImageTextRecord r;
    r.where = str(path, ":", n);
    const json j = parse_json_or_discarded(line);
    MYRIAD_REQUIRE(!j.is_discarded(), kFormat, r.where, ": not valid JSON");
    MYRIAD_REQUIRE(j.is_object(), kFormat, r.where, ": expected a JSON object, got ", j.type_name());
    if (j.contains("messages")) {
      r.kind = ImageTextRecord::Kind::kChat;
      try {
        r.messages = chat_messages_from_json(j["messages"]);
      } catch (const FieldError& e) {
        throw_error(ErrorKind::kFormat, r.where, ": ", e.what());
      }
      bool assistant = false;
      for (const ChatMessage& m : r.messages) {
        assistant = assistant || m.role == "assistant";
        for (const ChatImage& im : m.images) {
          MYRIAD_REQUIRE(!im.video, kFormat, r.where, ": ", im.field,
                         ": video_url parts are not read from chat records; give the video in a caption or "
                         "question record's \"videos\"");
          r.images.push_back(resolve_image(im.url, folder, r.where + ": " + im.field));
        }
      }
      MYRIAD_REQUIRE(assistant, kFormat, r.where, ": messages: no assistant message: nothing to learn from");
      out.push_back(std::move(r));
      continue;
    }
    const auto images = j.find("images"), videos = j.find("videos");
    MYRIAD_REQUIRE((images != j.end() && images->is_array()) || (videos != j.end() && images == j.end()), kFormat,
                   r.where, ": 'images' must be a list of image paths or data: URIs (or give 'videos' or 'messages')");
    if (images != j.end())
      for (size_t k = 0; k < images->size(); ++k) {
        const std::string what = str(r.where, ": images[", k, "]");
        MYRIAD_REQUIRE((*images)[k].is_string(), kFormat, what, ": must be a string");
        r.images.push_back(resolve_image((*images)[k].get<std::string>(), folder, what));
      }
    if (videos != j.end()) {
      MYRIAD_REQUIRE(videos->is_array(), kFormat, r.where,
                     ": 'videos' must be a list, each a GIF (path or data: URI) or a list of its frames");
      for (size_t k = 0; k < videos->size(); ++k) {
        const json& v = (*videos)[k];
        const std::string what = str(r.where, ": videos[", k, "]");
        std::vector<std::string> refs;
        if (v.is_string()) {
          refs.push_back(resolve_image(v.get<std::string>(), folder, what));
        } else {
          MYRIAD_REQUIRE(v.is_array() && !v.empty(), kFormat, what,
                         ": must be a GIF (path or data: URI) or a non-empty list of its frames' images");
          for (size_t f = 0; f < v.size(); ++f) {
            MYRIAD_REQUIRE(v[f].is_string(), kFormat, what, "[", f, "]: must be a string");
            refs.push_back(resolve_image(v[f].get<std::string>(), folder, str(what, "[", f, "]")));
          }
        }
        r.videos.push_back(std::move(refs));
      }
    }
    std::string marked;  // the text whose markers place the images
    if (j.contains("text")) {
      MYRIAD_REQUIRE(!j.contains("prompt") && !j.contains("answer"), kFormat, r.where,
                     ": give either 'text' (a caption) or 'prompt' and 'answer' (a question), not both");
      r.text = string_field(j, "text", r.where);
      MYRIAD_REQUIRE(!r.text.empty(), kFormat, r.where, ": 'text' is empty: nothing to learn from");
      marked = r.text;
    } else {
      r.kind = ImageTextRecord::Kind::kQuestion;
      r.prompt = string_field(j, "prompt", r.where);
      r.answer = string_field(j, "answer", r.where);
      MYRIAD_REQUIRE(!r.answer.empty(), kFormat, r.where, ": 'answer' is empty: nothing to learn from");
      if (j.contains("type")) r.type = string_field(j, "type", r.where);
      marked = r.prompt;
    }
    const size_t markers = split_at_markers(marked, marker).size() - 1, media = r.images.size() + r.videos.size();
    MYRIAD_REQUIRE(markers == 0 || markers == media, kFormat, r.where, ": ", markers, " image marker",
                   markers == 1 ? "" : "s", " (", marker, ") but ", r.images.size(), " image",
                   r.images.size() == 1 ? "" : "s",
                   r.videos.empty() ? "" : str(" and ", r.videos.size(), " video", r.videos.size() == 1 ? "" : "s"));
    MYRIAD_REQUIRE(r.answer.find(marker) == std::string::npos || marker.empty(), kFormat, r.where,
                   ": the answer holds an image marker (", marker, "): images go in the prompt");
    out.push_back(std::move(r));
  }
  MYRIAD_REQUIRE(!in.bad(), kIo, "error reading ", path);
  MYRIAD_REQUIRE(!out.empty(), kFormat, path, ": no records (one JSON object per line)");
  return out;
}

bool is_image_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  while (in && std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json j = parse_json_or_discarded(line);
    if (!j.is_object()) return false;
    if (j.contains("images") || j.contains("videos")) return true;
    if (!j.contains("messages")) return false;
    try {
      for (const ChatMessage& m : chat_messages_from_json(j["messages"]))
        if (!m.images.empty()) return true;
    } catch (const FieldError&) {
    }
    return false;
  }
  return false;
}

Image load_record_image(const std::string& ref, const std::string& what, const ImageLimits& limits,
                        const ImageStore* store) {
  if (const int64_t stored = stored_image_index(ref, what); stored >= 0) {
    MYRIAD_REQUIRE(store != nullptr, kFormat, what, ": '", ref,
                   "' is a prepared image: train on its directory (the one holding ", kImageStoreFile, ")");
    return store->image(stored, what);
  }
  if (ref.rfind("data:", 0) == 0) return decode_image(image_bytes_from_url(ref, what, limits), what, limits);
  return read_image_file(ref, limits);
}

Video load_record_video(const std::vector<std::string>& refs, const std::string& what, const ImageLimits& limits) {
  MYRIAD_REQUIRE(!refs.empty(), kFormat, what, ": a video without frames");
  for (const std::string& ref : refs)
    MYRIAD_REQUIRE(stored_image_index(ref, what) < 0, kFormat, what, ": '", ref,
                   "': videos are not kept in a prepared directory's store");
  if (refs.size() == 1) {
    const std::string bytes = refs[0].rfind("data:", 0) == 0 ? image_bytes_from_url(refs[0], what, limits)
                                                             : read_image_bytes(refs[0], limits);
    return decode_video(bytes, what, {.image = limits});
  }
  Video v;
  for (size_t f = 0; f < refs.size(); ++f) {
    Image im = load_record_image(refs[f], str(what, " frame ", f), limits);
    MYRIAD_REQUIRE(f == 0 || (im.width == v.width && im.height == v.height), kFormat, what, ": frame ", f, " is ",
                   im.width, " x ", im.height, " but frame 0 is ", v.width, " x ", v.height,
                   " (a video's frames share one size)");
    v.width = im.width;
    v.height = im.height;
    v.frames.push_back(std::move(im));
  }
  return v;
}

}  // namespace myriad

// Image-text data as JSONL (training with images, and evaluation by generated answer), one record per line, blank
// lines skipped:
//
//   {"images": ["a.png"], "text": "<|image|> a red square"}                                   caption
//   {"images": ["a.png"], "prompt": "how many circles?", "answer": "3", "type": "count"}      question
//   {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "a.png"}},
//                 {"type": "text", "text": "what is it?"}]}, {"role": "assistant", "content": "a square"}]}  chat
//   {"videos": [["f0.png", "f1.png", "f2.png"]], "prompt": "which way does it move?", "answer": "left"}
//
// A caption or question may carry "videos" (besides or instead of "images"): each an animated GIF (a path or data:
// URI) or a list of its frames' images; the markers take the images first, then the videos (each video one
// marker). Chat records take image_url parts only.
// An image is a path (relative to the JSONL file's folder) or a data: URI (data/media/image.h); http(s) URLs are
// refused (nothing is fetched). `myriad data prepare` writes records whose images are "stored:N" (an image of its
// store, data/datasets/image_store.h). In "text" and "prompt" the image marker (the model's image_placeholder,
// "<|image|>" by default) stands where the next image goes; without markers the images come first; otherwise the
// markers and the images must agree in number. "type" (optional) names the question's family for per-type accuracy.
// What a record trains (train/image_text_source.h): a caption's text, a question's answer, a chat's assistant turns.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/chat/chat_template.h"
#include "data/media/image.h"
#include "data/media/video.h"

namespace myriad {

struct ImageTextRecord {
  enum class Kind { kCaption, kQuestion, kChat };
  Kind kind = Kind::kCaption;
  std::vector<std::string> images;  // resolved: a path, or a data: URI (chat: the image_url parts in order)
  std::vector<std::vector<std::string>> videos;  // resolved: each one GIF, or its frames in order
  std::string text;                              // caption
  std::string prompt, answer, type;              // question
  std::vector<ChatMessage> messages;             // chat
  std::string where;                             // "FILE:LINE", for errors
};

// Every record of the file, each checked (fields, types, the markers against the images, a chat's assistant
// turn); the images are not read here. kIo for an unreadable file; kFormat "FILE:LINE: field: what" for the first
// bad record; kFormat for a file without records.
std::vector<ImageTextRecord> read_image_text_records(const std::string& path, const std::string& marker = "<|image|>");

// Whether the file's first record is image-text data (it has "images", or a message with an image_url part): how
// `myriad train --data` tells image-text JSONL from text JSONL. False for anything unreadable.
bool is_image_text_file(const std::string& path);

// A record's video: one GIF (decode_video) or its frames, each an image (all of one size: kValue otherwise).
Video load_record_video(const std::vector<std::string>& refs, const std::string& what, const ImageLimits& limits = {});

// A record's image: decoded from its path or data: URI (kValue naming `what` for a bad one), or a prepared one
// ("stored:N") copied out of `store` (kFormat without one).
class ImageStore;
Image load_record_image(const std::string& ref, const std::string& what, const ImageLimits& limits = {},
                        const ImageStore* store = nullptr);

// The text split at each marker: pieces.size() == markers + 1.
std::vector<std::string> split_at_markers(const std::string& text, const std::string& marker);

}  // namespace myriad

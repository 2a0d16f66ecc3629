#include "report/svg_files.h"

#include <filesystem>
#include <map>

#include "core/error.h"
#include "io/atomic_file.h"

namespace myriad {

namespace fs = std::filesystem;

namespace {

std::string slug(const std::string& title) {
  std::string s;
  bool dash = false;
  for (const char c : title) {
    const char l = (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c;
    if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9')) {
      if (dash && !s.empty()) s += '-';
      s += l;
      dash = false;
    } else {
      dash = true;
    }
  }
  return s.empty() ? "chart" : s;
}

std::string attribute(const std::string& tag, const std::string& name) {
  const std::string key = " " + name + "=\"";
  const size_t at = tag.find(key);
  if (at == std::string::npos) return "";
  const size_t from = at + key.size(), to = tag.find('"', from);
  return to == std::string::npos ? "" : tag.substr(from, to - from);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> svg_documents(const std::string& html) {
  constexpr std::string_view kOpen = "<svg ", kClose = "</svg>";
  std::vector<std::pair<std::string, std::string>> out;
  std::map<std::string, int> seen;
  for (size_t at = html.find(kOpen); at != std::string::npos; at = html.find(kOpen, at)) {
    const size_t tag_end = html.find('>', at);
    const size_t end = html.find(kClose, at);
    MYRIAD_REQUIRE(tag_end != std::string::npos && end != std::string::npos, kFormat,
                   "the page has an <svg> element without its closing tag (at byte ", at, ")");
    const std::string tag = html.substr(at, tag_end - at);
    std::string name = slug(attribute(tag, "aria-label"));
    if (const int n = ++seen[name]; n > 1) name += "-" + std::to_string(n);
    std::string doc = "<svg xmlns=\"http://www.w3.org/2000/svg\" " +
                      html.substr(at + kOpen.size(), end + kClose.size() - at - kOpen.size()) + "\n";
    out.emplace_back(name + ".svg", std::move(doc));
    at = end + kClose.size();
  }
  return out;
}

std::vector<std::string> write_svg_documents(const std::string& html, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  MYRIAD_REQUIRE(!ec && fs::is_directory(dir), kIo, "cannot create the SVG directory ", dir, ": ", ec.message());
  std::vector<std::string> paths;
  for (const auto& [name, doc] : svg_documents(html)) {
    paths.push_back((fs::path(dir) / name).string());
    write_file_atomic(paths.back(), doc);
  }
  return paths;
}

}  // namespace myriad

// The charts of a report page as standalone SVG files (`myriad report RUN --svg DIR`): for documentation pages and
// slides, drawn from the same run as the page. Each chart of the page (an inline <svg> element, titled by its
// aria-label) becomes DIR/<title as a slug>.svg with the SVG namespace added, so that a browser or an <img> tag
// shows it alone; the page itself stays without any namespace URL (it loads nothing).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace myriad {

// (file name, document) for each inline <svg> of `html`, in page order; names are the charts' titles lowercased
// with every run of other characters than a-z and 0-9 as one '-' ("Learning rate" -> "learning-rate.svg"), a
// repeated name numbered ("-2"). kFormat for an <svg> without its closing tag.
std::vector<std::pair<std::string, std::string>> svg_documents(const std::string& html);

// svg_documents written into `dir` (created when missing), each atomically; returns the paths written.
std::vector<std::string> write_svg_documents(const std::string& html, const std::string& dir);

}  // namespace myriad

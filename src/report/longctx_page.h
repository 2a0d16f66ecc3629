// The long-context evaluation (`myriad eval longctx`, train/longctx_eval.h) as a heatmap of accuracy over prompt
// length (rows) x needle depth (columns): one standalone SVG file a person can open, and one self-contained HTML
// page with the heatmap, the cells' figures and an example answer per cell.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace myriad {

// `eval`: LongContextReport::to_json(). A complete SVG document (with the XML declaration's namespace).
std::string render_longctx_svg(const nlohmann::json& eval);
// The heatmap alone, for inline use in a page (the training report's long-context section).
std::string render_longctx_heatmap(const nlohmann::json& eval);
std::string render_longctx_page(const nlohmann::json& eval, const std::string& title);

}  // namespace myriad

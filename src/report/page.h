// What the pages of the report layer share (internal to src/report): the CSS, the colour palette, summary cards,
// figures, a run's optional JSON files and its name, the page's head, and the step axis of a run's charts.
#pragma once

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "report/metrics.h"
#include "report/svg.h"

namespace myriad::report {

// Colour i of the palette (Tableau 10), cycling.
const char* palette(size_t i);

// <!DOCTYPE html> ... <body><main>: the head with `title` and the CSS.
std::string page_begin(const std::string& title);

std::string card(const std::string& key, const std::string& value, const std::string& detail = "");
std::string figure(const std::string& svg, const std::string& caption);
std::string missing(const std::string& what);  // a note where a chart or table has no data

// An optional JSON object file of a run (config.json, train.json): nullopt when absent; nullopt and a `note` for
// the page (not an error) when it is not a readable JSON object.
std::optional<nlohmann::json> read_json(const std::filesystem::path& p, std::string* note);

// The name of a run directory: its last path component ("runs/demo/" -> "demo").
std::string run_name(const std::string& run_dir);

// The step axis from m's first to its last step, with the stage switches: "stage" records, else where the step
// records' stage changes; the stage in force at the first step comes from the step records when the stage records
// start later.
Frame step_frame(const Metrics& m);
// The step axis over [first, last] without stage switches.
Frame step_frame(double first, double last);

}  // namespace myriad::report

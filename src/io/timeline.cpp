#include "io/timeline.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace avtrain {
namespace {

using Json = nlohmann::ordered_json;  // keeps name, ph, ts, ... first, as a reader expects to see them

double microseconds(Timeline::Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

void append_item(std::string& list, const std::string& item) {
  if (item.empty()) return;
  if (!list.empty()) list += ',';
  list += item;
}

}  // namespace

Timeline::Timeline(bool enabled, Clock::time_point epoch, int pid) : enabled_(enabled), epoch_(epoch), pid_(pid) {}

void Timeline::span(const std::string& name, const char* category, Clock::time_point begin, Clock::time_point end,
                    long step, int micro_batch) {
  if (!enabled_) return;
  Json args = Json::object();
  if (step >= 0) args["step"] = step;
  if (micro_batch >= 0) args["micro_batch"] = micro_batch;
  const Json event = {{"name", name},
                      {"cat", category},
                      {"ph", "X"},
                      {"ts", microseconds(begin - epoch_)},
                      {"dur", std::max(0.0, microseconds(end - begin))},
                      {"pid", pid_},
                      {"tid", 0},
                      {"args", args}};
  append_item(events_, event.dump());
}

std::string Timeline::events_json() const { return events_; }

void Timeline::write(const std::string& path, const std::vector<std::string>& per_rank,
                     const std::vector<std::string>& labels) {
  require(labels.size() == per_rank.size(), "internal: timeline of " + std::to_string(per_rank.size()) +
                                                " ranks given " + std::to_string(labels.size()) + " labels");
  std::string events;
  for (std::size_t r = 0; r < labels.size(); ++r) {
    const int pid = int(r);
    append_item(events, Json{{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", labels[r]}}}}.dump());
    append_item(events,
                Json{{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"args", {{"sort_index", pid}}}}.dump());
  }
  for (const auto& rank_events : per_rank) append_item(events, rank_events);
  write_file_atomically(path, "{\"traceEvents\":[\n" + events + "\n],\"displayTimeUnit\":\"ms\"}\n");
}

}  // namespace avtrain

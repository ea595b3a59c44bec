#include "core/step_trace_summary.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace paralab {

namespace {

std::string label(const TraceRecord& r) {
  switch (r.kind) {
    case TraceRecord::Kind::Kernel:
      return "kernel " + r.name.substr(0, 120);
    case TraceRecord::Kind::Copy:
      return "copy " + std::to_string(r.bytes) + " B";
    case TraceRecord::Kind::Fill:
      return "fill " + std::to_string(r.bytes) + " B";
  }
  return "";
}

std::string key(const TraceRecord& r) {
  switch (r.kind) {
    case TraceRecord::Kind::Kernel:
      return r.name.empty() ? "(unnamed)" : r.name.substr(0, 120);
    case TraceRecord::Kind::Copy:
      return "(copy)";
    case TraceRecord::Kind::Fill:
      return "(fill)";
  }
  return "";
}

}  // namespace

nlohmann::json trace_summary(std::vector<TraceRecord> records, int launches) {
  PARALAB_REQUIRE(launches > 0,
                  "trace summary: " + std::to_string(launches) + " launches traced (none?)");
  for (const TraceRecord& r : records)
    PARALAB_REQUIRE(r.end_ns >= r.start_ns,
                    "trace summary: " + label(r) + " ends (" + std::to_string(r.end_ns) +
                        " ns) before it starts (" + std::to_string(r.start_ns) + " ns)");
  const double per = 1.0 / launches;
  nlohmann::json out = {{"records", records.size()}, {"launches", launches}};
  if (records.empty()) return out;
  std::stable_sort(records.begin(), records.end(), [](const TraceRecord& a, const TraceRecord& b) {
    return a.start_ns < b.start_ns;
  });

  // The union of the intervals, walked in order of start: a gap opens where a record starts
  // after every earlier one has ended.
  struct Gap {
    uint64_t ns;
    std::string after, before;
  };
  std::vector<Gap> gaps;
  uint64_t busy = 0, sum = 0, open_start = records[0].start_ns, open_end = records[0].end_ns;
  std::size_t last = 0;  // the record that ends last in the open interval
  for (std::size_t i = 0; i < records.size(); ++i) {
    const TraceRecord& r = records[i];
    sum += r.end_ns - r.start_ns;
    if (i > 0 && r.start_ns > open_end) {
      busy += open_end - open_start;
      gaps.push_back({r.start_ns - open_end, label(records[last]), label(r)});
      open_start = r.start_ns;
      open_end = r.end_ns;
      last = i;
    } else if (i == 0 || r.end_ns > open_end) {
      open_end = r.end_ns;
      last = i;
    }
  }
  busy += open_end - open_start;
  const uint64_t span = open_end - records[0].start_ns;
  std::stable_sort(gaps.begin(), gaps.end(),
                   [](const Gap& a, const Gap& b) { return a.ns > b.ns; });
  nlohmann::json gap_list = nlohmann::json::array();
  for (std::size_t i = 0; i < gaps.size() && i < 8; ++i)
    gap_list.push_back(
        {{"us", gaps[i].ns * 1e-3}, {"after", gaps[i].after}, {"before", gaps[i].before}});

  struct Total {
    int64_t count = 0, bytes = 0;
    uint64_t ns = 0;
  };
  std::map<std::string, Total> by_name;
  Total copies, fills;
  for (const TraceRecord& r : records) {
    Total& t = by_name[key(r)];
    ++t.count;
    t.ns += r.end_ns - r.start_ns;
    Total* kind = r.kind == TraceRecord::Kind::Copy   ? &copies
                  : r.kind == TraceRecord::Kind::Fill ? &fills
                                                      : nullptr;
    if (kind) {
      ++kind->count;
      kind->bytes += r.bytes;
      kind->ns += r.end_ns - r.start_ns;
    }
  }
  std::vector<std::pair<std::string, Total>> names(by_name.begin(), by_name.end());
  std::stable_sort(names.begin(), names.end(),
                   [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  nlohmann::json name_list = nlohmann::json::array();
  for (std::size_t i = 0; i < names.size() && i < 25; ++i) {
    const Total& t = names[i].second;
    name_list.push_back({{"name", names[i].first},
                         {"per_launch", t.count * per},
                         {"us_per_launch", t.ns * 1e-3 * per},
                         {"mean_us", t.ns * 1e-3 / t.count}});
  }
  const auto totals = [&](const Total& t) {
    return nlohmann::json{{"per_launch", t.count * per},
                          {"bytes_per_launch", t.bytes * per},
                          {"us_per_launch", t.ns * 1e-3 * per}};
  };
  out["span_us"] = span * 1e-3;
  out["span_per_launch_us"] = span * 1e-3 * per;
  out["busy_per_launch_us"] = busy * 1e-3 * per;
  out["idle_per_launch_us"] = (span - busy) * 1e-3 * per;
  out["overlap_per_launch_us"] = (sum - busy) * 1e-3 * per;
  out["gaps"] = gap_list;
  out["by_name"] = name_list;
  out["copies"] = totals(copies);
  out["fills"] = totals(fills);
  return out;
}

}  // namespace paralab

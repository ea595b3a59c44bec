#include "experiments/descriptor.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "core/device.h"
#include "core/error.h"
#include "core/model.h"
#include "strategies/strategy.h"

namespace paralab {

namespace {

// 1 to max_length characters, each a digit or (with name_chars) a letter, '.', '_' or '-'.
bool made_of(const std::string& s, std::size_t max_length, bool name_chars) {
  if (s.empty() || s.size() > max_length) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) {
    if (c >= '0' && c <= '9') return true;
    return name_chars &&
           ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '.' || c == '_' || c == '-');
  });
}

using nlohmann::json;

std::string type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// Reads typed values out of a JSON object, with every error naming file and path.
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw Error(file_ + ": " + path + ": " + what);
  }

  void only_keys(const json& obj, const std::string& path,
                 const std::vector<std::string>& allowed) const {
    if (!obj.is_object()) fail(path, "must be an object, got " + type_name(obj));
    for (const auto& [key, value] : obj.items()) {
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      fail(join(path, key), "unknown key (allowed here: " + list + ")");
    }
  }

  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  int64_t integer(const json& v, const std::string& path, int64_t min,
                  int64_t max = INT64_MAX) const {
    if (!(v.is_number_integer() || v.is_number_unsigned()))
      fail(path, "must be an integer, got " + type_name(v) +
                     (v.is_number() ? " (" + v.dump() + ")" : std::string()));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(path, "is too large");
    const int64_t x = v.get<int64_t>();
    if (x < min) fail(path, "must be >= " + std::to_string(min) + ", got " + std::to_string(x));
    if (x > max) fail(path, "must be <= " + std::to_string(max) + ", got " + std::to_string(x));
    return x;
  }

  std::optional<int64_t> optional_integer(const json& v, const std::string& path,
                                          int64_t min) const {
    if (v.is_null()) return std::nullopt;
    return integer(v, path, min);
  }

  // A number that becomes a float: finite and > 0 as a float too (4.9e-324 rounds to 0 and
  // 1e300 to infinity in float32).
  double positive_float(const json& v, const std::string& path) const {
    if (!v.is_number()) fail(path, "must be a number, got " + type_name(v));
    const double x = v.get<double>();
    if (!(x > 0.0) || !std::isfinite(x)) fail(path, "must be > 0, got " + v.dump());
    const auto f = static_cast<float>(x);
    if (!(f > 0.0f) || !std::isfinite(f))
      fail(path, "must be a positive float32 (1.2e-38 to 3.4e38), got " + v.dump());
    return x;
  }

  std::string string(const json& v, const std::string& path) const {
    if (!v.is_string()) fail(path, "must be a string, got " + type_name(v));
    return v.get<std::string>();
  }

 private:
  std::string file_;
};

// Descriptors nest a few levels (runs.0.sweep.key.[values]); anything deeper is a mistake or an
// attack, and the JSON writer recurses once per level (100,000 levels overflow the stack).
constexpr int kMaxDepth = 32;
// Runs after sweep expansion, counted before expanding: 10 keys of 10 values would be 10^10.
constexpr double kMaxRuns = 10000;

// `text` for a message: at most 60 characters, bytes that are not printable ASCII as \xNN.
std::string quoted(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && out.size() < 60; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  return "'" + out + (out.size() >= 60 ? "...'" : "'");
}

// nlohmann's message without its "[json.exception.parse_error.101] " prefix, in one short line.
std::string json_error_text(const json::exception& e) {
  std::string m = e.what();
  if (const auto close = m.find("] ");
      m.rfind("[json.exception.", 0) == 0 && close != std::string::npos)
    m = m.substr(close + 2);
  if (const auto last = m.find("; last read: "); last != std::string::npos) m = m.substr(0, last);
  return m.size() > 200 ? m.substr(0, 200) + "..." : m;
}

struct TooDeep {};
struct DuplicateKey {
  std::string key;
};

// Parses JSON no deeper than kMaxDepth. With bare_word_ok (a --set value) text that is not JSON
// is taken as the string text_if_bare, except a number too large for a double: an error.
template <typename Input>
json parse_limited(Input&& input, const std::string& what, bool bare_word_ok,
                   const std::string& text_if_bare) {
  // The keys of each object being read, to refuse a key given twice (the parser would keep the
  // last silently).
  std::vector<std::set<std::string>> keys;
  const json::parser_callback_t limit = [&keys](int depth, json::parse_event_t event,
                                                json& parsed) {
    if (depth > kMaxDepth) throw TooDeep{};
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == json::parse_event_t::key && !keys.empty() && parsed.is_string() &&
        !keys.back().insert(parsed.get<std::string>()).second)
      throw DuplicateKey{parsed.get<std::string>()};
    return true;
  };
  try {
    return json::parse(std::forward<Input>(input), limit);
  } catch (const TooDeep&) {
    throw Error(what + ": nested deeper than " + std::to_string(kMaxDepth) + " levels");
  } catch (const DuplicateKey& d) {
    throw Error(what + ": key " + quoted(d.key) + " appears twice in one object");
  } catch (const json::out_of_range& e) {
    throw Error(what + ": " + json_error_text(e));
  } catch (const json::exception& e) {
    if (bare_word_ok) return text_if_bare;
    throw Error(what + ": not valid JSON: " + json_error_text(e));
  }
}

}  // namespace

json parse_json_limited(const std::string& text, const std::string& what) {
  return parse_limited(text, what, /*bare_word_ok=*/false, "");
}

namespace {

// The number of runs a run's sweep expands to (the product of its lists' lengths), before
// expanding it; non-lists count 1 (expand_sweep names them).
double sweep_size(const json& run) {
  const auto sweep = run.find("sweep");
  if (sweep == run.end() || !sweep->is_object()) return 1;
  double n = 1;
  for (const auto& [key, values] : sweep->items())
    if (values.is_array()) n *= static_cast<double>(std::max<std::size_t>(values.size(), 1));
  return n;
}

std::string fixed_count(double n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, n < 1e15 ? "%.0f" : "%.3g", n);
  return buf;
}

std::string sweep_keys(const json& run) {
  std::string keys;
  for (const auto& [key, values] : run["sweep"].items())
    keys += (keys.empty() ? "" : " x ") + key + " (" +
            std::to_string(values.is_array() ? values.size() : 1) + ")";
  return keys.size() > 150 ? keys.substr(0, 150) + "..." : keys;
}

const json& defaults() {
  static const json d = {
      {"backend", "auto"},
      {"virtual_devices", true},
      {"tf32", false},
      {"kernels", "cudnn"},
      {"green_contexts", true},
      {"communication_split", "auto"},
      {"model", "lenet"},
      {"dataset", {{"dir", nullptr}, {"train_limit", nullptr}, {"test_limit", nullptr}}},
      {"training",
       {{"epochs", 1},
        {"batch_size", 256},
        {"lr", 0.2},
        {"seed", 0},
        {"max_iterations_per_epoch", nullptr},
        {"warmup_iterations", 5},
        {"threads_per_device", 1},
        {"eval_batch_size", 1000}}},
  };
  return d;
}

const std::vector<std::string> kTopKeys = {
    "name",           "description", "backend", "virtual_devices",     "tf32",     "kernels",
    "green_contexts", "model",       "dataset", "communication_split", "training", "runs"};
const std::vector<std::string> kDatasetKeys = {"dir", "train_limit", "test_limit"};
const std::vector<std::string> kTrainingKeys = {"epochs",
                                                "batch_size",
                                                "lr",
                                                "seed",
                                                "max_iterations_per_epoch",
                                                "warmup_iterations",
                                                "threads_per_device",
                                                "eval_batch_size"};
const std::vector<std::string> kRunCommonKeys = {"strategy",
                                                 "devices",
                                                 "label",
                                                 "training",
                                                 "batch_scaling",
                                                 "lr_scaling",
                                                 "lr_warmup_iterations",
                                                 "allow_oversubscription",
                                                 "sweep"};

// Upper bounds that keep every count derived from them (a weak-scaling global batch of up to 4,096
// devices, iterations times epochs, the results file's expected size) far inside int64_t.
constexpr int64_t kMaxBatch = int64_t{1} << 24;
constexpr int64_t kMaxEpochs = 1'000'000;

TrainingConfig read_training(const Reader& r, const json& t, const std::string& path) {
  r.only_keys(t, path, kTrainingKeys);
  TrainingConfig c;
  c.epochs = r.integer(t.at("epochs"), path + ".epochs", 1, kMaxEpochs);
  c.batch_size = r.integer(t.at("batch_size"), path + ".batch_size", 1, kMaxBatch);
  c.lr = r.positive_float(t.at("lr"), path + ".lr");
  c.seed = static_cast<uint64_t>(r.integer(t.at("seed"), path + ".seed", 0));
  c.max_iterations_per_epoch =
      r.optional_integer(t.at("max_iterations_per_epoch"), path + ".max_iterations_per_epoch", 1);
  c.warmup_iterations = r.integer(t.at("warmup_iterations"), path + ".warmup_iterations", 0);
  const int64_t threads = r.integer(t.at("threads_per_device"), path + ".threads_per_device", 1);
  if (threads > 1024) r.fail(path + ".threads_per_device", "must be <= 1024");
  c.threads_per_device = static_cast<int>(threads);
  c.eval_batch_size = r.integer(t.at("eval_batch_size"), path + ".eval_batch_size", 1, kMaxBatch);
  return c;
}

// Expands a run's "sweep" ({"key": [values...], ...}) into the cross product of runs, keys in
// alphabetical order with the last varying fastest. A run without a sweep is returned as is.
std::vector<std::pair<json, json>> expand_sweep(const Reader& r, const json& run,
                                                const std::string& path) {
  if (!run.contains("sweep")) return {{run, json::object()}};
  const json& sweep = run["sweep"];
  if (!sweep.is_object() || sweep.empty())
    r.fail(path + ".sweep", "must be a non-empty object of key: [values]");
  std::vector<std::pair<json, json>> points{{run, json::object()}};
  points[0].first.erase("sweep");
  for (const auto& [key, values] : sweep.items()) {
    if (key == "sweep" || key == "label" || key == "training")
      r.fail(path + ".sweep." + key, "cannot be swept");
    if (!values.is_array() || values.empty())
      r.fail(path + ".sweep." + key, "must be a non-empty list of values");
    std::vector<std::pair<json, json>> next;
    for (const auto& [base, point] : points)
      for (const json& v : values) {
        json run_v = base, point_v = point;
        run_v[key] = v;
        point_v[key] = v;
        next.emplace_back(std::move(run_v), std::move(point_v));
      }
    points = std::move(next);
  }
  return points;
}

std::string sweep_suffix(const json& point) {
  std::string s;
  for (const auto& [key, value] : point.items())
    s += (s.empty() ? "" : ",") + key + "=" +
         (value.is_string() ? value.get<std::string>() : value.dump());
  return s;
}

// The run keys whose every value shows in default_label.
const std::set<std::string> kLabelledKeys = {"devices",  "allreduce",     "grouping",
                                             "overlap",  "pairing",       "microbatches",
                                             "schedule", "batch_scaling", "lr_scaling"};

std::string default_label(const RunSpec& spec) {
  std::string label = spec.strategy;
  const json& o = spec.options;
  if (o.contains("allreduce") && o["allreduce"].is_string())
    label += "/" + o["allreduce"].get<std::string>();
  if (o.contains("grouping") && o["grouping"] == "per_tensor") label += " per-tensor";
  if (o.contains("overlap") && o["overlap"] == true) label += " overlap";
  if (o.contains("pairing") && o["pairing"].is_string())
    label += "/" + o["pairing"].get<std::string>();
  if (o.contains("microbatches") && o["microbatches"].is_number_integer())
    label += " m" + o["microbatches"].dump();
  if (o.contains("schedule") && o["schedule"].is_string())
    label += " " + o["schedule"].get<std::string>();
  label += " x" + std::to_string(spec.devices);
  if (spec.batch_scaling == "weak") label += " weak";
  if (spec.lr_scaling != "none") label += " lr-" + spec.lr_scaling;
  return label;
}

// A device list: comma-separated "cuda:G" (one device on GPU G) or "cuda:G*N" (N devices on
// it). Returns the GPU of each device; fails naming `path`.
std::vector<int> parse_device_list(const Reader& r, const std::string& list,
                                   const std::string& path) {
  auto bad = [&](const std::string& why) {
    r.fail(path, "'" + list + "' is not a device list (" + why +
                     "; e.g. \"cuda:0*4\" or \"cuda:0*2,cuda:1*2\")");
  };
  auto number = [&](const std::string& s, int low, int high) {
    if (s.empty() || s.size() > 4 || s.find_first_not_of("0123456789") != std::string::npos)
      bad("'" + s + "' is not a number");
    const int v = std::stoi(s);
    if (v < low || v > high)
      bad(std::to_string(v) + " is outside " + std::to_string(low) + ".." + std::to_string(high));
    return v;
  };
  std::vector<int> gpus;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    if (item.rfind("cuda:", 0) != 0) bad("each entry is cuda:G or cuda:G*N, got '" + item + "'");
    const std::string rest = item.substr(5);
    const std::size_t star = rest.find('*');
    const int gpu = number(rest.substr(0, star), 0, 1023);
    const int copies = star == std::string::npos ? 1 : number(rest.substr(star + 1), 1, 4096);
    gpus.insert(gpus.end(), static_cast<std::size_t>(copies), gpu);
    start = comma + 1;
  }
  if (gpus.size() > 4096) bad("more than 4096 devices");
  return gpus;
}

RunSpec parse_run(const Reader& r, json run, const json& training_defaults, const std::string& path,
                  const json& point, const std::string& file) {
  if (!run.is_object()) r.fail(path, "must be an object, got " + type_name(run));
  RunSpec spec;
  spec.path = path;
  spec.sweep_point = point;
  if (!run.contains("strategy")) r.fail(path + ".strategy", "missing");
  spec.strategy = r.string(run["strategy"], path + ".strategy");
  if (run.contains("devices") && run["devices"].is_string()) {
    spec.gpus = parse_device_list(r, run["devices"].get<std::string>(), path + ".devices");
    spec.devices = static_cast<int>(spec.gpus.size());
  } else {
    const int64_t devices =
        run.contains("devices") ? r.integer(run["devices"], path + ".devices", 1) : 1;
    if (devices > 4096) r.fail(path + ".devices", "must be <= 4096");
    spec.devices = static_cast<int>(devices);
  }
  json training = training_defaults;
  if (run.contains("training")) {
    r.only_keys(run["training"], path + ".training", kTrainingKeys);
    training.update(run["training"]);
  }
  spec.training = read_training(r, training, path + ".training");
  spec.expanded = run;
  spec.expanded["training"] = training;
  auto choice = [&](const char* key, const std::vector<std::string>& known, std::string& out) {
    if (!run.contains(key)) return;
    out = r.string(run[key], path + "." + key);
    if (std::find(known.begin(), known.end(), out) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      r.fail(path + "." + key, "unknown value '" + out + "' (known: " + list + ")");
    }
  };
  choice("batch_scaling", {"strong", "weak"}, spec.batch_scaling);
  choice("lr_scaling", {"none", "linear", "sqrt"}, spec.lr_scaling);
  {
    const double growth = spec.batch_scaling == "weak" ? spec.devices : 1.0;
    const double lr = spec.lr_scaling == "linear" ? spec.training.lr * growth
                      : spec.lr_scaling == "sqrt" ? spec.training.lr * std::sqrt(growth)
                                                  : spec.training.lr;
    if (!std::isfinite(static_cast<float>(lr)))
      r.fail(path + ".lr_scaling", "scales lr " + json(spec.training.lr).dump() + " to " +
                                       json(lr).dump() + ", beyond float32");
  }
  if (run.contains("lr_warmup_iterations"))
    spec.lr_warmup_iterations =
        r.integer(run["lr_warmup_iterations"], path + ".lr_warmup_iterations", 0);
  if (run.contains("allow_oversubscription")) {
    if (!run["allow_oversubscription"].is_boolean())
      r.fail(path + ".allow_oversubscription", "must be true or false");
    spec.allow_oversubscription = run["allow_oversubscription"].get<bool>();
  }
  spec.options = json::object();
  for (const auto& [key, value] : run.items())
    if (std::find(kRunCommonKeys.begin(), kRunCommonKeys.end(), key) == kRunCommonKeys.end()) {
      if (std::find(kTrainingKeys.begin(), kTrainingKeys.end(), key) != kTrainingKeys.end())
        r.fail(path + "." + key, "is a training key: give it in " + path +
                                     ".training (a sweep cannot vary it: one run per value)");
      spec.options[key] = value;
    }
  if (spec.strategy == "single" && spec.devices != 1)
    r.fail(path + ".devices",
           "strategy 'single' runs on 1 device, got " + std::to_string(spec.devices));
  try {
    make_strategy(spec.strategy, spec.options, path);  // validates name and options
  } catch (const Error& e) {
    throw Error(file + ": " + e.what());
  }
  if (run.contains("label")) {
    spec.label = r.string(run["label"], path + ".label");
    if (!point.empty()) spec.label += " [" + sweep_suffix(point) + "]";
  } else {
    spec.label = default_label(spec);
    // The swept keys the generated label does not show already, so that a sweep's runs are told
    // apart: "single x1 [lr_warmup_iterations=2]"; a sweep over devices stays "x2", "x4".
    json unshown = json::object();
    for (const auto& [key, value] : point.items())
      if (!kLabelledKeys.contains(key) || (key == "devices" && !value.is_number_integer()))
        unshown[key] = value;  // a device list shows only as its count
    if (!unshown.empty()) spec.label += " [" + sweep_suffix(unshown) + "]";
  }
  return spec;
}

// Fills missing keys of `obj` from `defaults`, recursing into objects that both have.
void fill_defaults(json& obj, const json& defs) {
  if (!obj.is_object()) return;
  for (const auto& [key, value] : defs.items()) {
    if (!obj.contains(key))
      obj[key] = value;
    else if (value.is_object())
      fill_defaults(obj[key], value);
  }
}

}  // namespace

void check_utf8(const std::string& what, const std::string& text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    std::size_t len = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      len = 1, cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    }
    bool ok = len != 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) {
      ok = (s[i + k] & 0xC0) == 0x80;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok)
      throw Error(what + ": not valid UTF-8 (byte " + std::to_string(i) + "): " + quoted(text));
    i += len;
  }
}

std::string read_text_file(const std::string& file, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) throw Error(what + ": is a directory, not a file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(what + ": cannot open: " + std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), {});
  if (in.bad()) throw Error(what + ": cannot read: " + std::strerror(errno));
  return text;
}

void apply_override(json& doc, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error("--set " + assignment + ": expected key.path=value");
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  check_utf8("--set " + path, text);
  json value = parse_limited(text, "--set " + path, /*bare_word_ok=*/true, text);

  json* node = &doc;
  std::string walked;
  std::vector<std::string> parts;  // empty parts kept: "training." names an empty key
  for (std::size_t start = 0;;) {
    const std::size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string& key = parts[i];
    if (key.empty()) throw Error("--set " + path + ": empty key in path");
    const bool last = i + 1 == parts.size();
    if (node->is_array()) {
      if (!made_of(key, 9, false))
        throw Error("--set " + path + ": " + (walked.empty() ? "the descriptor" : walked) +
                    " is a list; '" + key + "' is not an index");
      const std::size_t idx = std::stoul(key);
      if (idx >= node->size())
        throw Error("--set " + path + ": index " + key + " out of range (" + walked + " has " +
                    std::to_string(node->size()) + " elements)");
      node = &(*node)[idx];
    } else if (node->is_object()) {
      if (last) {
        (*node)[key] = value;
        return;
      }
      node = &(*node)[key];  // creates a missing object on the way (validation names it)
      if (node->is_null()) *node = json::object();
    } else {
      throw Error("--set " + path + ": " + walked + " is " + type_name(*node) +
                  ", not an object or list");
    }
    walked = walked.empty() ? key : walked + "." + key;
    if (last) *node = value;
  }
}

Descriptor parse_descriptor(json doc, const std::string& file) {
  const Reader r(file);
  if (!doc.is_object()) r.fail("(top level)", "must be an object, got " + type_name(doc));
  fill_defaults(doc, defaults());
  r.only_keys(doc, "", kTopKeys);

  Descriptor d;
  if (!doc.contains("name")) r.fail("name", "missing (a short name used in the results file name)");
  d.name = r.string(doc["name"], "name");
  if (!made_of(d.name, 64, true))
    r.fail("name", "'" + d.name + "' must be 1-64 characters of A-Z a-z 0-9 . _ -");
  if (doc.contains("description")) r.string(doc["description"], "description");

  d.backend = r.string(doc["backend"], "backend");
  try {
    resolve_backend(d.backend);
  } catch (const Error& e) {
    r.fail("backend", e.what());
  }

  for (const char* key : {"virtual_devices", "tf32", "green_contexts"})
    if (!doc[key].is_boolean()) r.fail(key, "must be true or false, got " + type_name(doc[key]));
  d.virtual_devices = doc["virtual_devices"].get<bool>();
  d.tf32 = doc["tf32"].get<bool>();
  d.green_contexts = doc["green_contexts"].get<bool>();
  if (const json& v = doc["communication_split"]; v.is_boolean())
    d.communication_split = v.get<bool>();
  else if (v != "auto")
    r.fail("communication_split", "must be \"auto\", true or false, got " + v.dump());
  d.kernels = r.string(doc["kernels"], "kernels");
  if (d.kernels != "cudnn" && d.kernels != "fused" && d.kernels != "mixed")
    r.fail("kernels", "unknown kernels '" + d.kernels + "' (known: cudnn, fused, mixed)");

  // The model is built once here so that a bad name or layer list fails before any run.
  try {
    make_model(doc["model"], "model");
  } catch (const Error& e) {
    throw Error(file + ": " + e.what());
  }
  d.model = doc["model"];

  const json& ds = doc["dataset"];
  r.only_keys(ds, "dataset", kDatasetKeys);
  if (!ds["dir"].is_null()) d.data_dir = r.string(ds["dir"], "dataset.dir");
  d.train_limit = r.optional_integer(ds["train_limit"], "dataset.train_limit", 1);
  d.test_limit = r.optional_integer(ds["test_limit"], "dataset.test_limit", 1);

  read_training(r, doc["training"], "training");  // the top level must be valid on its own

  if (!doc.contains("runs")) r.fail("runs", "missing (a list of runs)");
  json& runs = doc["runs"];
  if (!runs.is_array()) r.fail("runs", "must be a list, got " + type_name(runs));
  if (runs.empty()) r.fail("runs", "must hold at least one run");
  double total = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const double n = runs[i].is_object() ? sweep_size(runs[i]) : 1;
    total += n;
    if (n > kMaxRuns)
      r.fail("runs." + std::to_string(i) + ".sweep",
             "expands to " + fixed_count(n) + " runs (" + sweep_keys(runs[i]) +
                 "), more than the limit of " + fixed_count(kMaxRuns));
    if (total > kMaxRuns)
      r.fail("runs", "expand to more than " + fixed_count(kMaxRuns) + " runs (at runs." +
                         std::to_string(i) + ")");
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::string path = "runs." + std::to_string(i);
    if (!runs[i].is_object()) r.fail(path, "must be an object, got " + type_name(runs[i]));
    for (const auto& [run, point] : expand_sweep(r, runs[i], path)) {
      const std::string where = point.empty() ? path : path + "[" + sweep_suffix(point) + "]";
      d.runs.push_back(parse_run(r, run, doc["training"], where, point, file));
      if (!d.runs.back().gpus.empty() && d.backend == "cpu")
        r.fail(where + ".devices", "a device list names CUDA GPUs, but the backend is cpu");
    }
  }
  d.resolved = std::move(doc);
  return d;
}

namespace {
Descriptor parse_descriptor_text_unbounded(const std::string& text, const std::string& file,
                                           const std::vector<std::string>& overrides,
                                           const std::optional<std::string>& data_dir);
}  // namespace

Descriptor load_descriptor(const std::string& file, const std::vector<std::string>& overrides,
                           const std::optional<std::string>& data_dir) {
  check_utf8("descriptor file name", file);
  return parse_descriptor_text(read_text_file(file, file), file, overrides, data_dir);
}

Descriptor parse_descriptor_text(const std::string& text, const std::string& file,
                                 const std::vector<std::string>& overrides,
                                 const std::optional<std::string>& data_dir) {
  try {
    return parse_descriptor_text_unbounded(text, file, overrides, data_dir);
  } catch (const Error& e) {  // messages quote keys and values: one short line whatever they hold
    throw Error(one_line(e.what()));
  }
}

namespace {

Descriptor parse_descriptor_text_unbounded(const std::string& text, const std::string& file,
                                           const std::vector<std::string>& overrides,
                                           const std::optional<std::string>& data_dir) {
  json doc = parse_limited(text, file, /*bare_word_ok=*/false, "");
  for (const auto& o : overrides) {
    try {
      apply_override(doc, o);
    } catch (const Error& e) {
      throw Error(file + ": " + e.what());
    }
  }
  if (data_dir) {
    check_utf8("--data-dir", *data_dir);
    if (!doc.is_object()) throw Error(file + ": (top level): must be an object");
    if (doc.contains("dataset") && !doc["dataset"].is_object())
      throw Error(file + ": dataset: must be an object, got " + type_name(doc["dataset"]));
    doc["dataset"]["dir"] = *data_dir;
  }
  return parse_descriptor(std::move(doc), file);
}

}  // namespace

}  // namespace paralab

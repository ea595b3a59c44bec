// The strategy registry: names -> factories.
#include "strategies/strategy.h"

#include <functional>
#include <map>

#include "core/error.h"
#include "strategies/channel_split.h"
#include "strategies/data_parallel.h"
#include "strategies/layer_split.h"
#include "strategies/single.h"

namespace paralab {

namespace {

using Factory = std::function<std::unique_ptr<Strategy>(const nlohmann::json&, const std::string&)>;

const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> r = {
      {"single", make_single},
      {"channel_split", make_channel_split},
      {"data_parallel", make_data_parallel},
      {"layer_split", make_layer_split},
  };
  return r;
}

}  // namespace

std::vector<std::string> known_strategies() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry()) names.push_back(name);
  return names;
}

std::unique_ptr<Strategy> make_strategy(const std::string& name, const nlohmann::json& options,
                                        const std::string& path) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& n : known_strategies()) known += (known.empty() ? "" : ", ") + n;
    throw Error(path + ".strategy: unknown strategy '" + name + "' (known: " + known + ")");
  }
  return it->second(options, path);
}

bool read_step_option(const std::string& path, const std::string& key, const nlohmann::json& v,
                      bool& cuda_graphs, std::string& read_back) {
  if (key == "cuda_graphs") {
    if (!v.is_boolean()) throw Error(path + "." + key + ": must be true or false");
    cuda_graphs = v.get<bool>();
    return true;
  }
  if (key == "read_back") {
    if (v != "step" && v != "epoch")
      throw Error(path + "." + key + ": must be \"step\" or \"epoch\", got " + v.dump());
    read_back = v.get<std::string>();
    return true;
  }
  return false;
}

}  // namespace paralab

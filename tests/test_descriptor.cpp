// Descriptor validation, defaults and --set overrides (experiments/descriptor.cpp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "experiments/descriptor.h"

namespace paralab {
namespace {

using nlohmann::json;

json minimal() { return {{"name", "t"}, {"runs", {{{"strategy", "single"}}}}}; }

// The message of the Error that parsing `doc` throws ("" if it does not throw).
std::string parse_error(const json& doc) {
  try {
    parse_descriptor(doc, "d.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Descriptor, FillsDefaults) {
  const Descriptor d = parse_descriptor(minimal(), "d.json");
  ASSERT_EQ(d.runs.size(), 1u);
  const TrainingConfig& t = d.runs[0].training;
  EXPECT_EQ(d.backend, "auto");
  EXPECT_EQ(t.epochs, 1);
  EXPECT_EQ(t.batch_size, 256);
  EXPECT_DOUBLE_EQ(t.lr, 0.2);
  EXPECT_EQ(t.seed, 0u);
  EXPECT_FALSE(t.max_iterations_per_epoch.has_value());
  EXPECT_EQ(t.warmup_iterations, 5);
  EXPECT_EQ(t.threads_per_device, 1);
  EXPECT_EQ(d.runs[0].devices, 1);
  EXPECT_EQ(d.runs[0].label, "single x1");
  EXPECT_FALSE(d.data_dir.has_value());
  EXPECT_EQ(d.resolved["training"]["batch_size"], 256);  // defaults are part of what is recorded
}

TEST(Descriptor, NamesOfEveryAllowedCharacterUpTo64AreAccepted) {
  for (const std::string& name :
       {std::string("A-Z_a.z-0_9"), std::string(64, 'x'), std::string("0"), std::string("..")}) {
    json doc = minimal();
    doc["name"] = name;
    EXPECT_EQ(parse_error(doc), "") << name;
  }
}

TEST(Descriptor, RunTrainingOverridesMergeOverTheTopLevel) {
  json doc = minimal();
  doc["training"] = {{"epochs", 3}, {"lr", 0.1}};
  doc["runs"].push_back({{"strategy", "single"}, {"training", {{"lr", 0.05}}}, {"label", "slow"}});
  const Descriptor d = parse_descriptor(doc, "d.json");
  EXPECT_DOUBLE_EQ(d.runs[0].training.lr, 0.1);
  EXPECT_DOUBLE_EQ(d.runs[1].training.lr, 0.05);
  EXPECT_EQ(d.runs[1].training.epochs, 3);
  EXPECT_EQ(d.runs[1].label, "slow");
}

TEST(Descriptor, SweepLabelsTellTheRunsApart) {
  json doc = minimal();
  doc["runs"] = json::array();
  // Keys the generated label shows: their values are the label's own.
  doc["runs"].push_back({{"strategy", "data_parallel"},
                         {"sweep", {{"devices", {2, 4}}, {"allreduce", {"ring", "tree"}}}}});
  // Keys it does not show are appended, as they are to a given label.
  doc["runs"].push_back({{"strategy", "single"}, {"sweep", {{"lr_warmup_iterations", {0, 2}}}}});
  doc["runs"].push_back(
      {{"strategy", "single"}, {"label", "mine"}, {"sweep", {{"lr_warmup_iterations", {3}}}}});
  doc["runs"].push_back(
      {{"strategy", "data_parallel"},
       {"devices", 2},
       {"sweep", {{"bucket_bytes", {65536, 1048576}}, {"overlap", {false, true}}}}});
  const Descriptor d = parse_descriptor(doc, "d.json");
  std::vector<std::string> labels;
  for (const auto& run : d.runs) labels.push_back(run.label);
  EXPECT_EQ(labels, (std::vector<std::string>{
                        "data_parallel/ring x2", "data_parallel/ring x4", "data_parallel/tree x2",
                        "data_parallel/tree x4", "single x1 [lr_warmup_iterations=0]",
                        "single x1 [lr_warmup_iterations=2]", "mine [lr_warmup_iterations=3]",
                        "data_parallel x2 [bucket_bytes=65536]",
                        "data_parallel overlap x2 [bucket_bytes=65536]",
                        "data_parallel x2 [bucket_bytes=1048576]",
                        "data_parallel overlap x2 [bucket_bytes=1048576]"}));
}

TEST(Descriptor, DeviceListsPlaceDevicesOnGpus) {
  json doc = minimal();
  doc["runs"] = {{{"strategy", "data_parallel"}, {"devices", "cuda:0*2,cuda:1,cuda:3*2"}},
                 {{"strategy", "data_parallel"}, {"devices", 3}}};
  const Descriptor d = parse_descriptor(doc, "d.json");
  EXPECT_EQ(d.runs[0].devices, 5);
  EXPECT_EQ(d.runs[0].gpus, (std::vector<int>{0, 0, 1, 3, 3}));
  EXPECT_EQ(d.runs[1].devices, 3);
  EXPECT_TRUE(d.runs[1].gpus.empty());
  auto error = [&](const json& devices, const std::string& backend = "auto") {
    json bad = minimal();
    bad["backend"] = backend;
    bad["runs"] = {{{"strategy", "data_parallel"}, {"devices", devices}}};
    return parse_error(bad);
  };
  EXPECT_EQ(error("cuda:0*0"),
            "d.json: runs.0.devices: 'cuda:0*0' is not a device list (0 is outside 1..4096; e.g. "
            "\"cuda:0*4\" or \"cuda:0*2,cuda:1*2\")");
  EXPECT_NE(error("gpu:0").find("each entry is cuda:G or cuda:G*N, got 'gpu:0'"),
            std::string::npos);
  EXPECT_NE(error("cuda:x").find("'x' is not a number"), std::string::npos);
  EXPECT_NE(error("cuda:0,").find("got ''"), std::string::npos);
  EXPECT_EQ(error("cuda:0*2", "cpu"),
            "d.json: runs.0.devices: a device list names CUDA GPUs, but the backend is cpu");
  json single = minimal();
  single["runs"][0]["devices"] = "cuda:0*2";
  EXPECT_NE(parse_error(single).find("strategy 'single' runs on 1 device, got 2"),
            std::string::npos);
}

TEST(Descriptor, RejectsBadInputWithFileAndPath) {
  struct Case {
    json doc;
    std::string expect;
  };
  auto with = [](const std::string& path, json value) {
    json doc = minimal();
    doc[json::json_pointer(path)] = std::move(value);
    return doc;
  };
  const std::vector<Case> cases = {
      {json::array(), "d.json: (top level): must be an object"},
      {with("/bogus", 1), "d.json: bogus: unknown key"},
      {with("/training/bach_size", 1), "d.json: training.bach_size: unknown key"},
      {with("/dataset/limit", 1), "d.json: dataset.limit: unknown key"},
      {with("/training/batch_size", "big"),
       "training.batch_size: must be an integer, got a string"},
      {with("/training/batch_size", 0), "training.batch_size: must be >= 1, got 0"},
      {with("/training/batch_size", -3), "training.batch_size: must be >= 1, got -3"},
      {with("/training/lr", 0), "training.lr: must be > 0"},
      {with("/training/lr", -0.1), "training.lr: must be > 0"},
      {with("/training/epochs", 0), "training.epochs: must be >= 1, got 0"},
      {with("/training/epochs", 1.5), "training.epochs: must be an integer, got a number (1.5)"},
      {with("/training/epochs", 2.0), "training.epochs: must be an integer, got a number (2.0)"},
      {with("/training/threads_per_device", 0), "training.threads_per_device: must be >= 1"},
      {with("/dataset/train_limit", 0), "dataset.train_limit: must be >= 1"},
      {with("/dataset/dir", 3), "dataset.dir: must be a string"},
      {with("/backend", "tpu"), "backend: unknown backend 'tpu' (known: auto, cpu"},
      {with("/green_contexts", "yes"),
       "d.json: green_contexts: must be true or false, got a string"},
      {with("/tf32", 1), "d.json: tf32: must be true or false, got an integer"},
      {with("/kernels", "cudnn8"),
       "d.json: kernels: unknown kernels 'cudnn8' (known: cudnn, fused, mixed)"},
      {with("/communication_split", "yes"),
       "d.json: communication_split: must be \"auto\", true or false, got \"yes\""},
      {with("/name", "a b"), "name: 'a b' must be 1-64 characters"},
      {with("/name", ""), "name: '' must be 1-64 characters"},
      {with("/name", std::string(65, 'a')), "must be 1-64 characters of A-Z a-z 0-9 . _ -"},
      {with("/name", "run/1"), "name: 'run/1' must be 1-64 characters"},
      {with("/name", "caf\xc3\xa9"), "must be 1-64 characters"},
      {with("/runs", json::array()), "runs: must hold at least one run"},
      {with("/runs", 3), "runs: must be a list, got an integer"},
      {with("/runs/0/strategy", "pipeline"),
       "runs.0.strategy: unknown strategy 'pipeline' (known: channel_split, data_parallel, "
       "layer_split, single)"},
      {with("/runs/0/devices", 0), "runs.0.devices: must be >= 1, got 0"},
      {with("/runs/0/devices", 2), "runs.0.devices: strategy 'single' runs on 1 device, got 2"},
      {with("/runs/0/allreduce", "ring"), "runs.0.allreduce: unknown option for strategy 'single'"},
      {with("/runs/0/seed", 1),
       "runs.0.seed: is a training key: give it in runs.0.training (a sweep cannot vary it"},
      {with("/runs/0/sweep", json{{"lr", {0.1, 0.2}}}),
       "runs.0[lr=0.1].lr: is a training key: give it in runs.0[lr=0.1].training"},
      {with("/runs/0/training", json{{"lr", "x"}}), "runs.0.training.lr: must be a number"},
      {with("/runs/0/training", json{{"nope", 1}}), "runs.0.training.nope: unknown key"},
      {json{{"runs", json::array({json{{"strategy", "single"}}})}}, "d.json: name: missing"},
      {json{{"name", "x"}}, "d.json: runs: missing"},
  };
  for (const Case& c : cases) {
    const std::string msg = parse_error(c.doc);
    EXPECT_NE(msg.find(c.expect), std::string::npos)
        << "document " << c.doc.dump() << "\n  message: '" << msg << "'\n  expected: '" << c.expect
        << "'";
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
}

// A key given twice in one object: JSON parsers keep one silently; a descriptor (or results file,
// or --set value) that does so is refused naming the key. The same key in two objects is fine.
TEST(Descriptor, AKeyTwiceInOneObjectIsRefused) {
  const auto error = [](const std::string& text) {
    try {
      parse_json_limited(text, "d.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(R"({"name": "a", "runs": [], "name": "b"})"),
            "d.json: key 'name' appears twice in one object");
  EXPECT_EQ(error(R"({"training": {"lr": 0.1, "epochs": 2, "lr": 0.2}})"),
            "d.json: key 'lr' appears twice in one object");
  EXPECT_EQ(error(R"({"a": {"x": 1}, "b": {"x": 1}, "c": [{"x": 1}, {"x": 2}]})"), "");
  EXPECT_EQ(error(R"({"a": {"b": {"c": 1}}, "b": 2, "c": 3})"), "");
}

TEST(Override, SetsNestedKeysListElementsAndParsesJsonValues) {
  json doc = minimal();
  apply_override(doc, "training.epochs=3");
  apply_override(doc, "training.lr=0.05");
  apply_override(doc, "runs.0.strategy=data_parallel");
  apply_override(doc, "runs.0.devices=2");
  apply_override(doc, "runs.0.label=two devices");
  apply_override(doc, "dataset.train_limit=null");
  apply_override(doc, "backend=\"cpu\"");
  EXPECT_EQ(doc["training"]["epochs"], 3);
  EXPECT_DOUBLE_EQ(doc["training"]["lr"].get<double>(), 0.05);
  EXPECT_EQ(doc["runs"][0]["devices"], 2);
  EXPECT_EQ(doc["runs"][0]["label"], "two devices");  // not JSON: taken as a string
  EXPECT_TRUE(doc["dataset"]["train_limit"].is_null());
  EXPECT_EQ(doc["backend"], "cpu");
  const Descriptor d = parse_descriptor(doc, "d.json");
  EXPECT_EQ(d.runs[0].training.epochs, 3);
  EXPECT_EQ(d.runs[0].devices, 2);
}

TEST(Override, ReplacesAWholeList) {
  json doc = minimal();
  apply_override(doc, R"(runs=[{"strategy":"single"},{"strategy":"single","label":"b"}])");
  EXPECT_EQ(parse_descriptor(doc, "d.json").runs.size(), 2u);
}

TEST(Override, RejectsBadPaths) {
  auto error = [](const std::string& assignment) {
    json doc = minimal();
    try {
      apply_override(doc, assignment);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("training.epochs").find("expected key.path=value"), std::string::npos);
  EXPECT_NE(error("=3").find("expected key.path=value"), std::string::npos);
  EXPECT_NE(error("runs.5.devices=1").find("index 5 out of range (runs has 1 elements)"),
            std::string::npos);
  EXPECT_NE(error("runs.x.devices=1").find("is a list; 'x' is not an index"), std::string::npos);
  EXPECT_NE(error("runs.-1.devices=1").find("'-1' is not an index"), std::string::npos);
  EXPECT_NE(error("runs.1234567890.devices=1").find("'1234567890' is not an index"),
            std::string::npos);
  EXPECT_NE(error("runs.123456789.devices=1").find("index 123456789 out of range"),
            std::string::npos);
  EXPECT_NE(error("name.sub=1").find("name is a string, not an object or list"), std::string::npos);
  EXPECT_NE(error("training..lr=1").find("empty key"), std::string::npos);
}

TEST(Override, UnknownKeysAreCaughtByValidation) {
  json doc = minimal();
  apply_override(doc, "training.bach_size=64");
  EXPECT_NE(parse_error(doc).find("training.bach_size: unknown key"), std::string::npos);
}

// The message of the Error that loading `file` with `overrides` throws ("" if it does not throw).
std::string load_error(const std::string& file, const std::vector<std::string>& overrides = {}) {
  try {
    load_descriptor(file, overrides, std::nullopt);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Every descriptor committed under experiments/ loads: a wrong key or value in one fails here,
// not in the run of whoever uses it.
TEST(Descriptor, EveryCommittedDescriptorLoads) {
  const char* src = std::getenv("PARALAB_SOURCE_DIR");
  if (!src) GTEST_SKIP() << "PARALAB_SOURCE_DIR is not set (ctest sets it)";
  const std::filesystem::path dir = std::filesystem::path(src) / "experiments";
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::filesystem::path& p = entry.path();
    if (p.extension() != ".json" || p.filename() == "descriptor.schema.json") continue;
    std::vector<std::string> overrides;
#if !PARALAB_HAVE_CUDA
    // A build without CUDA refuses the GPU descriptors' backend (the message says so); the rest
    // of such a descriptor is still checked.
    if (load_error(p.string()).find("unknown backend 'cuda'") != std::string::npos)
      overrides.push_back("backend=auto");
#endif
    EXPECT_EQ(load_error(p.string(), overrides), "") << p;
    ++loaded;
  }
  EXPECT_GE(loaded, 10);  // the directory was found and read
  // scripts/model-session.sh's load beside the concurrent profile, with its overrides.
  EXPECT_EQ(
      load_error((dir / "model-profile-concurrent.json").string(),
                 {R"(runs=[{"strategy":"single","label":"load","training":{"batch_size":256}}])",
                  "training.epochs=20", "training.max_iterations_per_epoch=null"}),
      "");
}

}  // namespace
}  // namespace paralab

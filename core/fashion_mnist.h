// Fashion-MNIST reader: decodes the four IDX files (gzip-compressed or plain) into host memory.
//
// The files are looked for under their canonical names, which are also the names the Debian
// package dataset-fashion-mnist installs into /usr/share/datasets/fashion-mnist:
//   train-images-idx3-ubyte.gz  train-labels-idx1-ubyte.gz
//   t10k-images-idx3-ubyte.gz   t10k-labels-idx1-ubyte.gz
// The same names without ".gz" are accepted too (plain IDX files); when both exist the ".gz" one
// is read. Get the data with `apt-get install dataset-fashion-mnist` or
// scripts/fetch-fashion-mnist.sh (downloads into ./data/fashion-mnist and checks the MD5 sums).
//
// IDX layout (all integers big-endian): images = magic 0x00000803, count, rows, cols, then
// count*rows*cols unsigned bytes; labels = magic 0x00000801, count, then count bytes in 0..9.
// Every malformed input throws paralab::Error with one line that starts with the file's path.
//
// Tested by tests/test_fashion_mnist.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace paralab {

// One split, decoded once into host memory.
struct Dataset {
  int64_t count = 0;
  int rows = 0, cols = 0;
  std::vector<float> images;    // (count,1,rows,cols), NCHW with C=1, pixel/255.0f in [0,1]
  std::vector<int32_t> labels;  // (count), each in [0,9]
};

struct FashionMnist {
  Dataset train, test;
  std::string dir;  // the directory the files came from, as it appears in the search list
};

// Directories searched, in order: explicit_dir (if given: the descriptor's dataset.dir or
// --data-dir), $FASHION_MNIST_DIR (if set and non-empty), ./data/fashion-mnist,
// /usr/share/datasets/fashion-mnist. A directory equal to an earlier one is listed once.
std::vector<std::string> fashion_mnist_search_dirs(const std::optional<std::string>& explicit_dir);

// The first of `dirs` that holds all four files; otherwise throws one line that lists every
// directory looked at (and what each lacks) and says how to get the data.
std::string find_fashion_mnist_dir(const std::vector<std::string>& dirs);

// Loads train and test from the first search directory that holds all four files. An explicit_dir
// that lacks any of them is an error: the search never falls back past a directory the user
// named. A limit keeps only the first N examples of that split (N >= 1; a limit above the split's
// size keeps it all); nullopt keeps all. The whole file is validated whatever the limit. With
// `side`, images must be side x side (bench_runner: LeNet's 28), checked from the header.
FashionMnist load_fashion_mnist(const std::optional<std::string>& explicit_dir,
                                std::optional<int64_t> train_limit,
                                std::optional<int64_t> test_limit,
                                std::optional<int> side = std::nullopt);

// Reads and validates one images/labels pair: readable gzip (one or more members, nothing after
// them) or plain file, magic numbers, dimensions (side x side when `side` is given), exact byte
// counts (no truncation, no trailing bytes), equal counts, labels in 0..9. The header is checked
// before the body is decompressed, and no more than it promises is ever inflated.
Dataset read_idx_pair(const std::string& images_path, const std::string& labels_path,
                      std::optional<int64_t> limit, std::optional<int> side = std::nullopt);
// The same from the files' stored bytes in memory (messages name them "images" and "labels"):
// for tests and the fuzzer (tests/fuzz/fuzz_idx.cpp).
Dataset read_idx_pair_from_memory(std::span<const uint8_t> images, std::span<const uint8_t> labels,
                                  std::optional<int64_t> limit,
                                  std::optional<int> side = std::nullopt);

}  // namespace paralab

// Tests for core/fashion_mnist: every check runs on small IDX files the tests write themselves
// (gzip through zlib, and plain), plus one test on the real data set when
// /usr/share/datasets/fashion-mnist (Debian package dataset-fashion-mnist) is installed.
//
// Run: the test_fashion_mnist binary, or standalone from the repository root (one line):
//   g++ -std=c++20 -O2 -I. core/error.cpp core/fashion_mnist.cpp tests/test_fashion_mnist.cpp
//       -lgtest -lgtest_main -lz -pthread -o /tmp/t_fm && /tmp/t_fm
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fashion_mnist.h"
#include "tests/test_util.h"

namespace paralab {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;
using testing::EnvGuard;

constexpr const char* kPackageDir = "/usr/share/datasets/fashion-mnist";

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() /
            ("paralab_fm_test_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void put_be32(Bytes& b, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<uint8_t>(v >> shift));
}

Bytes idx_images(uint32_t magic, uint32_t count, uint32_t rows, uint32_t cols,
                 const Bytes& pixels) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

Bytes idx_labels(uint32_t magic, uint32_t count, const Bytes& labels) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, count);
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

void write_gzip(const std::string& path, const Bytes& data) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!data.empty()) {
    ASSERT_EQ(gzwrite(f, data.data(), static_cast<unsigned>(data.size())),
              static_cast<int>(data.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

void write_plain(const std::string& path, const Bytes& data) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!data.empty()) {  // fwrite's pointer must not be null, even for 0 bytes
    ASSERT_EQ(std::fwrite(data.data(), 1, data.size(), f), data.size());
  }
  ASSERT_EQ(std::fclose(f), 0);
}

// Three 2x3 images whose pixels cover 0, 255 and values in between; labels cover 0 and 9.
constexpr uint32_t kCount = 3, kRows = 2, kCols = 3;
const Bytes kPixels = {0,   1,   2,  127, 128, 255,  // image 0
                       10,  20,  30, 40,  50,  60,   // image 1
                       255, 254, 3,  99,  200, 17};  // image 2
const Bytes kLabels = {0, 9, 4};

Bytes valid_images() { return idx_images(0x803, kCount, kRows, kCols, kPixels); }
Bytes valid_labels() { return idx_labels(0x801, kCount, kLabels); }

// Runs fn, which must throw paralab::Error with a one-line message holding every one of `parts`.
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
    for (const std::string& part : parts) {
      EXPECT_NE(msg.find(part), std::string::npos) << "missing \"" << part << "\" in: " << msg;
    }
    return;
  }
  ADD_FAILURE() << "expected paralab::Error";
}

void expect_matches_fixture(const Dataset& d, int64_t count) {
  ASSERT_EQ(d.count, count);
  ASSERT_EQ(d.rows, static_cast<int>(kRows));
  ASSERT_EQ(d.cols, static_cast<int>(kCols));
  ASSERT_EQ(d.images.size(), static_cast<size_t>(count) * kRows * kCols);
  ASSERT_EQ(d.labels.size(), static_cast<size_t>(count));
  for (size_t i = 0; i < d.images.size(); ++i) {
    // Exact equality: the reader promises pixel/255.0f, not an approximation of it.
    EXPECT_EQ(d.images[i], static_cast<float>(kPixels[i]) / 255.0f) << "pixel " << i;
  }
  for (size_t i = 0; i < d.labels.size(); ++i) EXPECT_EQ(d.labels[i], kLabels[i]) << "label " << i;
}

// Writes the four files of a tiny but valid data set into dir, gzip-compressed.
void write_fake_dataset(const std::string& dir) {
  for (const char* split : {"train", "t10k"}) {
    write_gzip(dir + "/" + split + "-images-idx3-ubyte.gz", valid_images());
    write_gzip(dir + "/" + split + "-labels-idx1-ubyte.gz", valid_labels());
  }
}

TEST(FashionMnistRead, GzipPairDecodesExactPixelsAndLabels) {
  TempDir tmp;
  write_gzip(tmp.file("img.gz"), valid_images());
  write_gzip(tmp.file("lab.gz"), valid_labels());
  const Dataset d = read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), std::nullopt);
  expect_matches_fixture(d, kCount);
  EXPECT_EQ(d.images[0], 0.0f);
  EXPECT_EQ(d.images[5], 1.0f);
  EXPECT_EQ(d.labels[1], 9);
}

TEST(FashionMnistRead, PlainPairDecodesExactPixelsAndLabels) {
  TempDir tmp;
  write_plain(tmp.file("img"), valid_images());
  write_plain(tmp.file("lab"), valid_labels());
  expect_matches_fixture(read_idx_pair(tmp.file("img"), tmp.file("lab"), std::nullopt), kCount);
}

TEST(FashionMnistRead, LimitKeepsFirstN) {
  TempDir tmp;
  write_gzip(tmp.file("img.gz"), valid_images());
  write_gzip(tmp.file("lab.gz"), valid_labels());
  expect_matches_fixture(read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), 1), 1);
  expect_matches_fixture(read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), 2), 2);
  expect_matches_fixture(read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), 100), kCount);
  expect_error([&] { read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), 0); },
               {"img.gz", "limit must be >= 1"});
}

TEST(FashionMnistRead, WrongImagesMagic) {
  TempDir tmp;
  write_gzip(tmp.file("img.gz"), idx_images(0x801, kCount, kRows, kCols, kPixels));
  write_gzip(tmp.file("lab.gz"), valid_labels());
  expect_error([&] { read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("img.gz"), "wrong magic", "expected 0x00000803", "found 0x00000801"});
}

TEST(FashionMnistRead, WrongLabelsMagic) {
  TempDir tmp;
  write_gzip(tmp.file("img.gz"), valid_images());
  write_gzip(tmp.file("lab.gz"), idx_labels(0xdeadbeef, kCount, kLabels));
  expect_error([&] { read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("lab.gz"), "wrong magic", "expected 0x00000801", "found 0xdeadbeef"});
}

TEST(FashionMnistRead, PlainNonIdxFileIsWrongMagic) {
  TempDir tmp;
  write_plain(tmp.file("img"), Bytes{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!',
                                     '!', '!', '!', '!', '!'});
  write_gzip(tmp.file("lab.gz"), valid_labels());
  expect_error([&] { read_idx_pair(tmp.file("img"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("img"), "wrong magic", "found 0x68656c6c"});
}

TEST(FashionMnistRead, BadDimensions) {
  TempDir tmp;
  write_gzip(tmp.file("lab.gz"), valid_labels());
  write_gzip(tmp.file("zero.gz"), idx_images(0x803, kCount, 0, kCols, {}));
  expect_error([&] { read_idx_pair(tmp.file("zero.gz"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("zero.gz"), "bad dimensions 0x3"});
  write_gzip(tmp.file("huge.gz"), idx_images(0x803, kCount, kRows, 100000, {}));
  expect_error([&] { read_idx_pair(tmp.file("huge.gz"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("huge.gz"), "bad dimensions 2x100000"});
}

TEST(FashionMnistRead, TruncatedImages) {
  TempDir tmp;
  Bytes img = valid_images();
  img.erase(img.end() - 5, img.end());
  write_gzip(tmp.file("img.gz"), img);
  write_gzip(tmp.file("lab.gz"), valid_labels());
  expect_error([&] { read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("img.gz"), "truncated", "34 bytes", "got 29 bytes"});
  // A header cut short is reported the same way.
  write_plain(tmp.file("short"), Bytes{0, 0, 8, 3, 0, 0});
  expect_error([&] { read_idx_pair(tmp.file("short"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("short"), "truncated", "got 6"});
}

TEST(FashionMnistRead, TruncatedLabels) {
  TempDir tmp;
  write_gzip(tmp.file("img.gz"), valid_images());
  write_gzip(tmp.file("lab.gz"), idx_labels(0x801, kCount, {0, 9}));
  expect_error([&] { read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("lab.gz"), "truncated", "11 bytes", "got 10 bytes"});
}

TEST(FashionMnistRead, TrailingBytes) {
  TempDir tmp;
  Bytes img = valid_images();
  img.push_back(7);
  write_gzip(tmp.file("img.gz"), img);
  write_gzip(tmp.file("lab.gz"), valid_labels());
  expect_error([&] { read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("img.gz"), "1 unexpected trailing bytes"});
}

TEST(FashionMnistRead, TruncatedGzipStream) {
  TempDir tmp;
  Bytes img = valid_images();
  img.resize(2000, 42);  // padded so the compressed stream is long enough to cut
  write_gzip(tmp.file("full.gz"), img);
  const auto size = fs::file_size(tmp.file("full.gz"));
  fs::copy_file(tmp.file("full.gz"), tmp.file("cut.gz"));
  fs::resize_file(tmp.file("cut.gz"), size - 10);  // drops the CRC/size trailer and more
  write_gzip(tmp.file("lab.gz"), valid_labels());
  expect_error([&] { read_idx_pair(tmp.file("cut.gz"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("cut.gz"), "truncated gzip stream"});
}

TEST(FashionMnistRead, CorruptGzipStream) {
  TempDir tmp;
  // A gzip header (magic, deflate, no flags) followed by bytes that are not a deflate stream.
  write_plain(tmp.file("img.gz"),
              Bytes{0x1f, 0x8b, 8,    0,    0,    0,    0,    0,    0,    3,
                    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff});
  write_gzip(tmp.file("lab.gz"), valid_labels());
  expect_error([&] { read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("img.gz"), "unreadable", "gzip"});
}

Bytes file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

TEST(FashionMnistRead, AGzipBombIsStoppedAfterWhatTheHeaderPromises) {
  // A header promising 3 images of 2x3, followed by 256 MiB of zeros (about 1 MB compressed):
  // the reader inflates the 18 promised bytes and counts at most 64 MiB more, never the rest.
  TempDir tmp;
  {
    gzFile f = gzopen(tmp.file("bomb.gz").c_str(), "wb1");
    ASSERT_NE(f, nullptr);
    const Bytes head = valid_images();
    ASSERT_EQ(gzwrite(f, head.data(), static_cast<unsigned>(head.size())),
              static_cast<int>(head.size()));
    const Bytes zeros(1 << 20, 0);
    for (int i = 0; i < 256; ++i)
      ASSERT_EQ(gzwrite(f, zeros.data(), static_cast<unsigned>(zeros.size())), 1 << 20);
    ASSERT_EQ(gzclose(f), Z_OK);
  }
  write_gzip(tmp.file("lab.gz"), valid_labels());
  const auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { read_idx_pair(tmp.file("bomb.gz"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("bomb.gz"), "more than 64 MiB of unexpected trailing bytes"});
  // 64 MiB inflate in a fraction of a second; the bound only catches reading everything of a
  // much larger bomb, so it is loose (ctest runs suites in parallel).
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(FashionMnistRead, AHeaderPromisingMoreThan4GiBIsRefusedBeforeReading) {
  TempDir tmp;
  write_gzip(tmp.file("img.gz"), idx_images(0x803, 0xFFFFFFFF, 28, 28, {}));
  write_gzip(tmp.file("lab.gz"), valid_labels());
  expect_error([&] { read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("img.gz"), "4294967295 images of 28x28", "limit of 4 GiB"});
}

TEST(FashionMnistRead, DataAfterTheGzipStreamIsAnError) {
  TempDir tmp;
  write_gzip(tmp.file("img.gz"), valid_images());
  Bytes b = file_bytes(tmp.file("img.gz"));
  b.insert(b.end(), {'j', 'u', 'n', 'k'});
  write_plain(tmp.file("img.gz"), b);
  write_gzip(tmp.file("lab.gz"), valid_labels());
  expect_error([&] { read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("img.gz"), "unexpected data after the end of the gzip stream"});
}

TEST(FashionMnistRead, SeveralGzipMembersAreOneFile) {
  // gzip -c a > f; gzip -c b >> f is one valid gzip file holding a then b.
  TempDir tmp;
  const Bytes img = valid_images();
  write_gzip(tmp.file("a.gz"), Bytes(img.begin(), img.begin() + 10));
  write_gzip(tmp.file("b.gz"), Bytes(img.begin() + 10, img.end()));
  Bytes both = file_bytes(tmp.file("a.gz"));
  const Bytes second = file_bytes(tmp.file("b.gz"));
  both.insert(both.end(), second.begin(), second.end());
  write_plain(tmp.file("img.gz"), both);
  write_gzip(tmp.file("lab.gz"), valid_labels());
  expect_matches_fixture(read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), std::nullopt),
                         kCount);
}

TEST(FashionMnistRead, ImagesMustHaveTheModelsSideWhenOneIsGiven) {
  TempDir tmp;
  write_gzip(tmp.file("img.gz"), valid_images());
  write_gzip(tmp.file("lab.gz"), valid_labels());
  expect_error([&] { read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), std::nullopt, 28); },
               {tmp.file("img.gz"), "images are 2x3, the model takes 28x28"});
}

TEST(FashionMnistRead, MemoryAndFileReadTheSame) {
  TempDir tmp;
  write_gzip(tmp.file("img.gz"), valid_images());
  write_gzip(tmp.file("lab.gz"), valid_labels());
  const Bytes img = file_bytes(tmp.file("img.gz")), lab = file_bytes(tmp.file("lab.gz"));
  expect_matches_fixture(read_idx_pair_from_memory(img, lab, std::nullopt), kCount);
  expect_error([&] { read_idx_pair_from_memory(img, Bytes(lab.begin(), lab.end() - 3), 2); },
               {"labels", "truncated gzip stream"});
}

TEST(FashionMnistRead, CountMismatch) {
  TempDir tmp;
  write_gzip(tmp.file("img.gz"), valid_images());
  write_gzip(tmp.file("lab.gz"), idx_labels(0x801, 2, {0, 9}));
  expect_error([&] { read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("img.gz"), tmp.file("lab.gz"), "3 images", "2 labels", "count mismatch"});
}

TEST(FashionMnistRead, LabelOutOfRange) {
  TempDir tmp;
  write_gzip(tmp.file("img.gz"), valid_images());
  write_gzip(tmp.file("lab.gz"), idx_labels(0x801, kCount, {0, 9, 10}));
  expect_error([&] { read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("lab.gz"), "label 10 at index 2", "out of range 0..9"});
  // Validation covers the whole file, not only the examples a limit keeps.
  expect_error([&] { read_idx_pair(tmp.file("img.gz"), tmp.file("lab.gz"), 1); },
               {tmp.file("lab.gz"), "out of range"});
}

TEST(FashionMnistRead, MissingFile) {
  TempDir tmp;
  write_gzip(tmp.file("lab.gz"), valid_labels());
  expect_error([&] { read_idx_pair(tmp.file("nope.gz"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("nope.gz"), "file not found"});
  write_gzip(tmp.file("img.gz"), valid_images());
  expect_error([&] { read_idx_pair(tmp.file("img.gz"), tmp.file("nope.gz"), std::nullopt); },
               {tmp.file("nope.gz"), "file not found"});
}

TEST(FashionMnistRead, EmptyFile) {
  TempDir tmp;
  write_plain(tmp.file("img"), {});
  write_gzip(tmp.file("lab.gz"), valid_labels());
  expect_error([&] { read_idx_pair(tmp.file("img"), tmp.file("lab.gz"), std::nullopt); },
               {tmp.file("img"), "file is empty"});
  write_gzip(tmp.file("empty.gz"), {});  // a valid gzip file holding zero bytes
  write_gzip(tmp.file("img.gz"), valid_images());
  expect_error([&] { read_idx_pair(tmp.file("img.gz"), tmp.file("empty.gz"), std::nullopt); },
               {tmp.file("empty.gz"), "file is empty"});
}

TEST(FashionMnistSearch, OrderIsExplicitThenEnvThenLocalThenSystem) {
  EnvGuard env("FASHION_MNIST_DIR");
  env.unset();
  EXPECT_EQ(fashion_mnist_search_dirs(std::nullopt),
            (std::vector<std::string>{"./data/fashion-mnist", kPackageDir}));
  EXPECT_EQ(fashion_mnist_search_dirs("/x/given"),
            (std::vector<std::string>{"/x/given", "./data/fashion-mnist", kPackageDir}));
  env.set("/y/from-env");
  EXPECT_EQ(fashion_mnist_search_dirs(std::nullopt),
            (std::vector<std::string>{"/y/from-env", "./data/fashion-mnist", kPackageDir}));
  EXPECT_EQ(
      fashion_mnist_search_dirs("/x/given"),
      (std::vector<std::string>{"/x/given", "/y/from-env", "./data/fashion-mnist", kPackageDir}));
  env.set("");  // set but empty counts as unset
  EXPECT_EQ(fashion_mnist_search_dirs(std::nullopt),
            (std::vector<std::string>{"./data/fashion-mnist", kPackageDir}));
}

TEST(FashionMnistSearch, FindPicksFirstCompleteDirectory) {
  TempDir empty, partial, full, full2;
  write_gzip(partial.file("train-images-idx3-ubyte.gz"), valid_images());
  write_fake_dataset(full.str());
  write_fake_dataset(full2.str());
  EXPECT_EQ(find_fashion_mnist_dir({empty.str(), partial.str(), full.str(), full2.str()}),
            full.str());
  EXPECT_EQ(find_fashion_mnist_dir({full2.str(), full.str()}), full2.str());
}

TEST(FashionMnistSearch, NotFoundListsEveryDirectoryAndHowToGetData) {
  TempDir empty, partial;
  write_gzip(partial.file("train-images-idx3-ubyte.gz"), valid_images());
  const std::string absent = empty.file("does-not-exist");
  expect_error(
      [&] {
        find_fashion_mnist_dir({absent, empty.str(), partial.str()});
      },
      {"Fashion-MNIST not found", absent + " (no such directory)",
       empty.str() + " (none of the 4 files)", partial.str() + " (lacks ",
       "t10k-labels-idx1-ubyte[.gz]", "apt-get install dataset-fashion-mnist",
       "scripts/fetch-fashion-mnist.sh", "--data-dir", "FASHION_MNIST_DIR"});
}

TEST(FashionMnistLoad, ExplicitEmptyDirThrowsNamingIt) {
  EnvGuard env("FASHION_MNIST_DIR");
  TempDir empty, full;
  write_fake_dataset(full.str());
  // A complete directory later in the search order must not be used instead.
  env.set(full.str());
  expect_error([&] { load_fashion_mnist(empty.str(), std::nullopt, std::nullopt); },
               {empty.str(), "given explicitly", "none of the 4 files", "apt-get install"});
  expect_error([&] { load_fashion_mnist(empty.file("nope"), std::nullopt, std::nullopt); },
               {empty.file("nope"), "no such directory"});
}

TEST(FashionMnistLoad, ExplicitAndEnvDirectoriesLoadWithLimits) {
  EnvGuard env("FASHION_MNIST_DIR");
  TempDir from_env, given;
  write_fake_dataset(from_env.str());
  env.set(from_env.str());
  const FashionMnist a = load_fashion_mnist(std::nullopt, 2, std::nullopt);
  EXPECT_EQ(a.dir, from_env.str());
  expect_matches_fixture(a.train, 2);
  expect_matches_fixture(a.test, kCount);

  // Plain (uncompressed) files are found under the same names without ".gz".
  for (const char* split : {"train", "t10k"}) {
    write_plain(given.file(std::string(split) + "-images-idx3-ubyte"), valid_images());
    write_plain(given.file(std::string(split) + "-labels-idx1-ubyte"), valid_labels());
  }
  const FashionMnist b = load_fashion_mnist(given.str(), std::nullopt, 1);
  EXPECT_EQ(b.dir, given.str());
  expect_matches_fixture(b.train, kCount);
  expect_matches_fixture(b.test, 1);
}

// The real data set from the Debian package dataset-fashion-mnist.
TEST(FashionMnistLoad, InstalledPackageDataset) {
  if (!fs::is_directory(kPackageDir)) {
    GTEST_SKIP() << kPackageDir
                 << " is absent; `apt-get install dataset-fashion-mnist` to run this";
  }
  const auto start = std::chrono::steady_clock::now();
  const FashionMnist fm = load_fashion_mnist(kPackageDir, std::nullopt, std::nullopt);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("loaded %s in %.3f s\n", kPackageDir, seconds);

  EXPECT_EQ(fm.dir, kPackageDir);
  for (const Dataset* d : {&fm.train, &fm.test}) {
    EXPECT_EQ(d->rows, 28);
    EXPECT_EQ(d->cols, 28);
    EXPECT_EQ(d->images.size(), static_cast<size_t>(d->count) * 28 * 28);
    EXPECT_EQ(d->labels.size(), static_cast<size_t>(d->count));
  }
  ASSERT_EQ(fm.train.count, 60000);
  ASSERT_EQ(fm.test.count, 10000);

  std::array<int, 10> train_hist{}, test_hist{};
  for (int32_t label : fm.train.labels) ++train_hist.at(label);
  for (int32_t label : fm.test.labels) ++test_hist.at(label);
  for (int c = 0; c < 10; ++c) {
    EXPECT_EQ(train_hist[c], 6000) << "class " << c;
    EXPECT_EQ(test_hist[c], 1000) << "class " << c;
  }

  // Pinned with an independent reader (Python gzip + struct) on the same files.
  EXPECT_EQ(std::vector<int32_t>(fm.train.labels.begin(), fm.train.labels.begin() + 10),
            (std::vector<int32_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  EXPECT_EQ(std::vector<int32_t>(fm.test.labels.begin(), fm.test.labels.begin() + 5),
            (std::vector<int32_t>{9, 2, 1, 1, 6}));
  // Pixel sums in the file's own 0..255 units; v*255 rounds back exactly since v = p/255.0f.
  const auto pixel_sum = [&](size_t begin, size_t end) {
    int64_t sum = 0;
    for (size_t i = begin; i < end; ++i) sum += std::lround(fm.train.images[i] * 255.0f);
    return sum;
  };
  EXPECT_EQ(pixel_sum(0, 28 * 28), 76247);
  EXPECT_EQ(pixel_sum(0, fm.train.images.size()), int64_t{3431114169});
}

}  // namespace
}  // namespace paralab

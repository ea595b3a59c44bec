// Fashion-MNIST IDX reader; see core/fashion_mnist.h for the file layout and the search order.
//
// Each file is read whole into memory with zlib (gzread passes plain files through unchanged),
// then validated and converted in one pass. The 60k training images take ~0.45 s of one core, as
// long as `zcat` alone: inflate is the whole cost, so the conversion stays a plain loop.
#include "core/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace paralab {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // IDX: unsigned bytes, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // IDX: unsigned bytes, 1 dimension
constexpr size_t kImagesHeaderBytes = 16;      // magic, count, rows, cols
constexpr size_t kLabelsHeaderBytes = 8;       // magic, count
constexpr uint32_t kMaxSide = 4096;            // rows/cols above this are a corrupt header
constexpr int32_t kNumClasses = 10;

constexpr std::array<const char*, 4> kStems = {
    "train-images-idx3-ubyte", "train-labels-idx1-ubyte",  // train split
    "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte",    // test split
};

constexpr const char* kHowToGet =
    "get it with `apt-get install dataset-fashion-mnist` or `scripts/fetch-fashion-mnist.sh` "
    "(downloads into ./data/fashion-mnist), or pass --data-dir DIR or set FASHION_MNIST_DIR=DIR";

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08" PRIx32, v);
  return buf;
}

// Closes the gzFile on every path out of read_all_bytes; gzclose's result is checked there on
// the normal path, so the destructor only runs it for cleanup after a throw.
class GzFile {
 public:
  explicit GzFile(gzFile file) : file_(file) {}
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  ~GzFile() {
    if (file_ != nullptr) gzclose_r(file_);
  }
  gzFile get() const { return file_; }
  int close() {
    const int rc = gzclose_r(file_);
    file_ = nullptr;
    return rc;
  }

 private:
  gzFile file_;
};

std::string gz_error_text(gzFile file) {
  int errnum = Z_OK;
  const char* msg = gzerror(file, &errnum);
  if (errnum == Z_ERRNO) return std::strerror(errno);
  return msg != nullptr ? msg : "unknown zlib error";
}

// The decompressed contents of a gzip file, or the contents of a plain file.
std::vector<uint8_t> read_all_bytes(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) throw Error(path + ": file not found");
  if (!std::filesystem::is_regular_file(status)) throw Error(path + ": not a regular file");
  const auto file_size = std::filesystem::file_size(path, ec);

  errno = 0;
  GzFile file(gzopen(path.c_str(), "rb"));
  if (file.get() == nullptr) {
    throw Error(path + ": cannot open: " + (errno != 0 ? std::strerror(errno) : "out of memory"));
  }

  // Fashion-MNIST images inflate ~1.8x, so one read usually fills the first allocation.
  std::vector<uint8_t> bytes(std::max<uint64_t>(ec ? 0 : file_size * 2, 1 << 16));
  size_t used = 0;
  for (;;) {
    if (used == bytes.size()) bytes.resize(bytes.size() * 2);
    const auto want = static_cast<unsigned>(std::min<size_t>(bytes.size() - used, size_t{1} << 30));
    const int got = gzread(file.get(), bytes.data() + used, want);
    if (got < 0) {
      throw Error(path + ": unreadable (not a valid gzip file?): " + gz_error_text(file.get()));
    }
    if (got == 0) break;
    used += static_cast<size_t>(got);
  }
  // gzread reports a gzip stream that stops mid-way only through the error state.
  int errnum = Z_OK;
  gzerror(file.get(), &errnum);
  if (errnum == Z_BUF_ERROR) {
    throw Error(path + ": truncated gzip stream (ends after " + std::to_string(used) +
                " decompressed bytes)");
  }
  if (const int rc = file.close(); rc != Z_OK) {
    throw Error(path + ": error closing gzip file (zlib code " + std::to_string(rc) + ")");
  }
  bytes.resize(used);
  if (bytes.empty()) throw Error(path + ": file is empty (0 bytes after decompression)");
  return bytes;
}

struct IdxImages {
  int64_t count = 0;
  int rows = 0, cols = 0;
  std::vector<uint8_t> bytes;  // whole file: 16-byte header, then (count,rows,cols) pixels
};

IdxImages read_images(const std::string& path) {
  IdxImages out;
  out.bytes = read_all_bytes(path);
  const std::vector<uint8_t>& b = out.bytes;
  if (b.size() < kImagesHeaderBytes) {
    throw Error(path + ": truncated: the IDX images header needs 16 bytes, got " +
                std::to_string(b.size()));
  }
  const uint32_t magic = be32(&b[0]);
  if (magic != kImagesMagic) {
    throw Error(path + ": wrong magic number: expected " + hex32(kImagesMagic) +
                " (IDX images), found " + hex32(magic) +
                (magic == kLabelsMagic ? " (an IDX labels file)" : ""));
  }
  const uint32_t count = be32(&b[4]), rows = be32(&b[8]), cols = be32(&b[12]);
  if (rows == 0 || cols == 0 || rows > kMaxSide || cols > kMaxSide) {
    throw Error(path + ": bad dimensions " + std::to_string(rows) + "x" + std::to_string(cols) +
                " (rows and cols must be in 1.." + std::to_string(kMaxSide) + ")");
  }
  if (count == 0) throw Error(path + ": holds no images (count is 0)");
  // count < 2^32 and rows*cols <= 2^24, so this cannot overflow 64 bits.
  const uint64_t expected = kImagesHeaderBytes + uint64_t{count} * rows * cols;
  const std::string promise = std::to_string(count) + " images of " + std::to_string(rows) + "x" +
                              std::to_string(cols) + " = " + std::to_string(expected) + " bytes";
  if (b.size() < expected) {
    throw Error(path + ": truncated: header promises " + promise + ", got " +
                std::to_string(b.size()) + " bytes");
  }
  if (b.size() > expected) {
    throw Error(path + ": " + std::to_string(b.size() - expected) +
                " unexpected trailing bytes: header promises " + promise + ", got " +
                std::to_string(b.size()) + " bytes");
  }
  out.count = count;
  out.rows = static_cast<int>(rows);
  out.cols = static_cast<int>(cols);
  return out;
}

// Returns the labels file's bytes after validating them; labels start at kLabelsHeaderBytes.
std::vector<uint8_t> read_labels(const std::string& path) {
  std::vector<uint8_t> b = read_all_bytes(path);
  if (b.size() < kLabelsHeaderBytes) {
    throw Error(path + ": truncated: the IDX labels header needs 8 bytes, got " +
                std::to_string(b.size()));
  }
  const uint32_t magic = be32(&b[0]);
  if (magic != kLabelsMagic) {
    throw Error(path + ": wrong magic number: expected " + hex32(kLabelsMagic) +
                " (IDX labels), found " + hex32(magic) +
                (magic == kImagesMagic ? " (an IDX images file)" : ""));
  }
  const uint32_t count = be32(&b[4]);
  if (count == 0) throw Error(path + ": holds no labels (count is 0)");
  const uint64_t expected = kLabelsHeaderBytes + uint64_t{count};
  if (b.size() < expected) {
    throw Error(path + ": truncated: header promises " + std::to_string(count) + " labels = " +
                std::to_string(expected) + " bytes, got " + std::to_string(b.size()) + " bytes");
  }
  if (b.size() > expected) {
    throw Error(path + ": " + std::to_string(b.size() - expected) +
                " unexpected trailing bytes: header promises " + std::to_string(count) +
                " labels = " + std::to_string(expected) + " bytes, got " +
                std::to_string(b.size()) + " bytes");
  }
  const auto first = b.begin() + kLabelsHeaderBytes;
  const auto bad = std::find_if(first, b.end(), [](uint8_t v) { return v >= kNumClasses; });
  if (bad != b.end()) {
    throw Error(path + ": label " + std::to_string(*bad) + " at index " +
                std::to_string(bad - first) + " is out of range 0.." +
                std::to_string(kNumClasses - 1));
  }
  return b;
}

// The file for `stem` in `dir`: stem.gz if present, else the plain stem, else nullopt.
std::optional<std::string> locate(const std::string& dir, const std::string& stem) {
  for (const std::string& name : {stem + ".gz", stem}) {
    std::error_code ec;
    const std::filesystem::path p = std::filesystem::path(dir) / name;
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
  }
  return std::nullopt;
}

// "" when dir holds all four files, otherwise why not, e.g. "no such directory".
std::string what_dir_lacks(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return "no such directory";
  std::string missing;
  int num_missing = 0;
  for (const char* stem : kStems) {
    if (locate(dir, stem)) continue;
    missing += (num_missing++ == 0 ? "" : ", ") + std::string(stem) + "[.gz]";
  }
  if (num_missing == static_cast<int>(kStems.size())) return "none of the 4 files";
  return num_missing == 0 ? "" : "lacks " + missing;
}

Dataset load_split(const std::string& dir, const char* images_stem, const char* labels_stem,
                   std::optional<int64_t> limit) {
  // what_dir_lacks() has just seen both files; a file that vanished since is reported by name.
  const auto images = locate(dir, images_stem);
  const auto labels = locate(dir, labels_stem);
  return read_idx_pair(images.value_or(dir + "/" + images_stem + ".gz"),
                       labels.value_or(dir + "/" + labels_stem + ".gz"), limit);
}

}  // namespace

std::vector<std::string> fashion_mnist_search_dirs(const std::optional<std::string>& explicit_dir) {
  std::vector<std::string> dirs;
  const auto add = [&dirs](const std::string& d) {
    if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
  };
  if (explicit_dir) add(*explicit_dir);
  if (const char* env = std::getenv("FASHION_MNIST_DIR"); env != nullptr && *env != '\0') {
    add(env);
  }
  add("./data/fashion-mnist");
  add("/usr/share/datasets/fashion-mnist");
  return dirs;
}

std::string find_fashion_mnist_dir(const std::vector<std::string>& dirs) {
  std::string looked;
  for (const std::string& dir : dirs) {
    const std::string lacks = what_dir_lacks(dir);
    if (lacks.empty()) return dir;
    looked += (looked.empty() ? "" : ", ") + dir + " (" + lacks + ")";
  }
  throw Error("Fashion-MNIST not found; looked in: " +
              (looked.empty() ? "(no directories)" : looked) + "; " + kHowToGet);
}

FashionMnist load_fashion_mnist(const std::optional<std::string>& explicit_dir,
                                std::optional<int64_t> train_limit,
                                std::optional<int64_t> test_limit) {
  FashionMnist out;
  if (explicit_dir) {
    const std::string lacks = what_dir_lacks(*explicit_dir);
    if (!lacks.empty()) {
      throw Error(*explicit_dir + ": Fashion-MNIST directory given explicitly (" + lacks + "); " +
                  kHowToGet);
    }
    out.dir = *explicit_dir;
  } else {
    out.dir = find_fashion_mnist_dir(fashion_mnist_search_dirs(std::nullopt));
  }
  out.train = load_split(out.dir, kStems[0], kStems[1], train_limit);
  out.test = load_split(out.dir, kStems[2], kStems[3], test_limit);
  return out;
}

Dataset read_idx_pair(const std::string& images_path, const std::string& labels_path,
                      std::optional<int64_t> limit) {
  if (limit && *limit < 1) {
    throw Error(images_path + ": example limit must be >= 1, got " + std::to_string(*limit));
  }
  const IdxImages images = read_images(images_path);
  const std::vector<uint8_t> labels = read_labels(labels_path);
  const auto num_labels = static_cast<int64_t>(labels.size() - kLabelsHeaderBytes);
  if (images.count != num_labels) {
    throw Error(images_path + ": holds " + std::to_string(images.count) + " images but " +
                labels_path + " holds " + std::to_string(num_labels) + " labels (count mismatch)");
  }

  Dataset out;
  out.count = limit ? std::min(*limit, images.count) : images.count;
  out.rows = images.rows;
  out.cols = images.cols;

  const size_t num_pixels = static_cast<size_t>(out.count) * out.rows * out.cols;
  const uint8_t* src = images.bytes.data() + kImagesHeaderBytes;
  out.images.resize(num_pixels);
  for (size_t i = 0; i < num_pixels; ++i) out.images[i] = static_cast<float>(src[i]) / 255.0f;

  const uint8_t* lsrc = labels.data() + kLabelsHeaderBytes;
  out.labels.assign(lsrc, lsrc + out.count);
  return out;
}

}  // namespace paralab

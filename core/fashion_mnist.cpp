// Fashion-MNIST IDX reader; see core/fashion_mnist.h for the file layout and the search order.
//
// Each file is inflated with zlib a piece at a time (plain files pass through): the header first,
// checked, then exactly the bytes it promises, then a check that nothing follows. The 60k
// training images take ~0.45 s of one core, as long as `zcat` alone: inflate is the whole cost,
// so the conversion stays a plain loop.
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
#include <functional>
#include <memory>
#include <span>

#include "core/error.h"

namespace paralab {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // IDX: unsigned bytes, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // IDX: unsigned bytes, 1 dimension
constexpr size_t kImagesHeaderBytes = 16;      // magic, count, rows, cols
constexpr size_t kLabelsHeaderBytes = 8;       // magic, count
constexpr uint32_t kMaxSide = 4096;            // rows/cols above this are a corrupt header
constexpr int32_t kNumClasses = 10;
constexpr uint64_t kMaxFileBytes = uint64_t{4} << 30;  // an IDX file larger is a corrupt header

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

// Where an IDX file's stored bytes come from: a file or memory. read(dst, n) returns up to n
// bytes, 0 only at the end.
using RawRead = std::function<size_t(uint8_t*, size_t)>;

// The decompressed contents of a gzip file (one or more members, as gzip allows), or a plain
// file's bytes, delivered a piece at a time: the IDX header is read and checked first, and the
// body is inflated only up to the size the header promises. So a small file that inflates to
// gigabytes is rejected after its header, not after inflating it, and bytes after the gzip
// stream that are not another gzip member are an error, not ignored.
class IdxStream {
 public:
  IdxStream(std::string name, RawRead raw) : name_(std::move(name)), raw_(std::move(raw)) {
    in_.resize(1 << 16);
    fill();
    gzip_ = in_len_ >= 2 && in_[0] == 0x1f && in_[1] == 0x8b;
    if (gzip_) {
      // 16 + MAX_WBITS: a gzip wrapper (header and CRC-32 / size trailer checked by zlib).
      if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK)
        throw Error(name_ + ": cannot start decompressing (out of memory)");
      z_ready_ = true;
    }
  }
  IdxStream(const IdxStream&) = delete;
  IdxStream& operator=(const IdxStream&) = delete;
  ~IdxStream() {
    if (z_ready_) inflateEnd(&z_);
  }

  // Up to n decompressed bytes into dst; fewer only at the end of the data.
  size_t read(uint8_t* dst, size_t n) {
    size_t got = gzip_ ? inflate_into(dst, n) : copy_into(dst, n);
    total_ += got;
    return got;
  }
  uint64_t total() const { return total_; }

  // Counts the bytes after what was read, up to `cap` (then stops counting).
  uint64_t count_rest(uint64_t cap) {
    std::vector<uint8_t> sink(1 << 16);
    uint64_t rest = 0;
    while (rest <= cap) {
      const size_t got = read(sink.data(), sink.size());
      if (got == 0) break;
      rest += got;
    }
    return rest;
  }

 private:
  void fill() {
    in_pos_ = 0;
    in_len_ = raw_eof_ ? 0 : raw_(in_.data(), in_.size());
    if (in_len_ == 0) raw_eof_ = true;
  }

  size_t copy_into(uint8_t* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      if (in_pos_ == in_len_) {
        fill();
        if (in_len_ == 0) break;
      }
      const size_t k = std::min(n - done, in_len_ - in_pos_);
      std::memcpy(dst + done, in_.data() + in_pos_, k);
      in_pos_ += k;
      done += k;
    }
    return done;
  }

  size_t inflate_into(uint8_t* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      if (in_pos_ == in_len_) fill();
      if (member_ended_) {
        if (in_len_ == 0) break;  // the end of the file after a whole member: done
        // Another member must follow, or nothing: anything else is trailing garbage.
        if (in_[in_pos_] != 0x1f || (in_pos_ + 1 < in_len_ && in_[in_pos_ + 1] != 0x8b))
          throw Error(name_ + ": unexpected data after the end of the gzip stream (after " +
                      std::to_string(total_ + done) + " decompressed bytes)");
        inflateReset(&z_);
        member_ended_ = false;
      }
      if (in_len_ == 0)
        throw Error(name_ + ": truncated gzip stream (ends after " + std::to_string(total_ + done) +
                    " decompressed bytes)");
      z_.next_in = in_.data() + in_pos_;
      z_.avail_in = static_cast<uInt>(in_len_ - in_pos_);
      z_.next_out = dst + done;
      z_.avail_out = static_cast<uInt>(std::min<size_t>(n - done, 1u << 30));
      const int rc = inflate(&z_, Z_NO_FLUSH);
      done = static_cast<size_t>(z_.next_out - dst);
      in_pos_ = static_cast<size_t>(z_.next_in - in_.data());
      if (rc == Z_STREAM_END) {
        member_ended_ = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw Error(name_ + ": unreadable (not a valid gzip file?): " +
                    (z_.msg != nullptr ? z_.msg : "zlib error " + std::to_string(rc)));
      }
    }
    return done;
  }

  std::string name_;
  RawRead raw_;
  std::vector<uint8_t> in_;
  size_t in_pos_ = 0, in_len_ = 0;
  bool raw_eof_ = false, gzip_ = false, z_ready_ = false, member_ended_ = false;
  z_stream z_{};
  uint64_t total_ = 0;
};

// Reads exactly `want` bytes (the header promised them) or says how many there were.
void read_promised(IdxStream& in, const std::string& name, std::vector<uint8_t>& b, uint64_t want,
                   const std::string& promise) {
  // Grown as the bytes arrive (64 MiB at a time), so a short file whose header promises
  // gigabytes never allocates them.
  constexpr size_t kStep = size_t{64} << 20;
  while (b.size() < want) {
    const size_t have = b.size();
    b.resize(static_cast<size_t>(std::min<uint64_t>(want, have + kStep)));
    const size_t got = in.read(b.data() + have, b.size() - have);
    if (have + got < b.size())
      throw Error(name + ": truncated: header promises " + promise + ", got " +
                  std::to_string(have + got) + " bytes");
  }
  // Up to 64 MiB of extra bytes are counted for the message; a gzip bomb stops there.
  constexpr uint64_t kCountCap = uint64_t{64} << 20;
  if (const uint64_t rest = in.count_rest(kCountCap); rest > 0)
    throw Error(name + ": " + (rest > kCountCap ? "more than 64 MiB of" : std::to_string(rest)) +
                " unexpected trailing bytes: header promises " + promise + ", got " +
                (rest > kCountCap ? "more" : std::to_string(want + rest) + " bytes"));
}

std::vector<uint8_t> read_header(IdxStream& in, const std::string& name, size_t bytes,
                                 const char* what) {
  std::vector<uint8_t> b(bytes);
  const size_t got = in.read(b.data(), bytes);
  if (got == 0) throw Error(name + ": file is empty (0 bytes after decompression)");
  if (got < bytes)
    throw Error(name + ": truncated: the IDX " + what + " header needs " + std::to_string(bytes) +
                " bytes, got " + std::to_string(got));
  return b;
}

struct IdxImages {
  int64_t count = 0;
  int rows = 0, cols = 0;
  std::vector<uint8_t> bytes;  // whole file: 16-byte header, then (count,rows,cols) pixels
};

IdxImages read_images(IdxStream& in, const std::string& path, std::optional<int> side) {
  IdxImages out;
  std::vector<uint8_t> b = read_header(in, path, kImagesHeaderBytes, "images");
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
  if (side && (rows != static_cast<uint32_t>(*side) || cols != static_cast<uint32_t>(*side))) {
    throw Error(path + ": images are " + std::to_string(rows) + "x" + std::to_string(cols) +
                ", the model takes " + std::to_string(*side) + "x" + std::to_string(*side));
  }
  if (count == 0) throw Error(path + ": holds no images (count is 0)");
  // count < 2^32 and rows*cols <= 2^24, so this cannot overflow 64 bits.
  const uint64_t expected = kImagesHeaderBytes + uint64_t{count} * rows * cols;
  if (expected > kMaxFileBytes)
    throw Error(path + ": header promises " + std::to_string(count) + " images of " +
                std::to_string(rows) + "x" + std::to_string(cols) + " = " +
                std::to_string(expected) + " bytes, more than the limit of " +
                std::to_string(kMaxFileBytes >> 30) + " GiB");
  read_promised(in, path, b, expected,
                std::to_string(count) + " images of " + std::to_string(rows) + "x" +
                    std::to_string(cols) + " = " + std::to_string(expected) + " bytes");
  out.count = count;
  out.rows = static_cast<int>(rows);
  out.cols = static_cast<int>(cols);
  out.bytes = std::move(b);
  return out;
}

// Returns the labels file's bytes after validating them; labels start at kLabelsHeaderBytes.
std::vector<uint8_t> read_labels(IdxStream& in, const std::string& path) {
  std::vector<uint8_t> b = read_header(in, path, kLabelsHeaderBytes, "labels");
  const uint32_t magic = be32(&b[0]);
  if (magic != kLabelsMagic) {
    throw Error(path + ": wrong magic number: expected " + hex32(kLabelsMagic) +
                " (IDX labels), found " + hex32(magic) +
                (magic == kImagesMagic ? " (an IDX images file)" : ""));
  }
  const uint32_t count = be32(&b[4]);
  if (count == 0) throw Error(path + ": holds no labels (count is 0)");
  const uint64_t expected = kLabelsHeaderBytes + uint64_t{count};
  read_promised(in, path, b, expected,
                std::to_string(count) + " labels = " + std::to_string(expected) + " bytes");
  const auto first = b.begin() + kLabelsHeaderBytes;
  const auto bad = std::find_if(first, b.end(), [](uint8_t v) { return v >= kNumClasses; });
  if (bad != b.end()) {
    throw Error(path + ": label " + std::to_string(*bad) + " at index " +
                std::to_string(bad - first) + " is out of range 0.." +
                std::to_string(kNumClasses - 1));
  }
  return b;
}

// Closes a FILE* on every path out.
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

FilePtr open_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) throw Error(path + ": file not found");
  if (!std::filesystem::is_regular_file(status)) throw Error(path + ": not a regular file");
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) throw Error(path + ": cannot open: " + std::strerror(errno));
  return f;
}

RawRead file_reader(std::FILE* f, const std::string& path) {
  return [f, path](uint8_t* dst, size_t n) {
    const size_t got = std::fread(dst, 1, n, f);
    if (got == 0 && std::ferror(f)) throw Error(path + ": read error: " + std::strerror(errno));
    return got;
  };
}

RawRead memory_reader(std::span<const uint8_t> bytes) {
  return [bytes, pos = size_t{0}](uint8_t* dst, size_t n) mutable {
    const size_t k = std::min(n, bytes.size() - pos);
    if (k > 0) std::memcpy(dst, bytes.data() + pos, k);
    pos += k;
    return k;
  };
}

Dataset to_dataset(const IdxImages& images, const std::vector<uint8_t>& labels,
                   const std::string& images_name, const std::string& labels_name,
                   std::optional<int64_t> limit) {
  const auto num_labels = static_cast<int64_t>(labels.size() - kLabelsHeaderBytes);
  if (images.count != num_labels) {
    throw Error(images_name + ": holds " + std::to_string(images.count) + " images but " +
                labels_name + " holds " + std::to_string(num_labels) + " labels (count mismatch)");
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
                   std::optional<int64_t> limit, std::optional<int> side) {
  // what_dir_lacks() has just seen both files; a file that vanished since is reported by name.
  const auto images = locate(dir, images_stem);
  const auto labels = locate(dir, labels_stem);
  return read_idx_pair(images.value_or(dir + "/" + images_stem + ".gz"),
                       labels.value_or(dir + "/" + labels_stem + ".gz"), limit, side);
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
                                std::optional<int64_t> test_limit, std::optional<int> side) {
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
  out.train = load_split(out.dir, kStems[0], kStems[1], train_limit, side);
  out.test = load_split(out.dir, kStems[2], kStems[3], test_limit, side);
  return out;
}

Dataset read_idx_pair(const std::string& images_path, const std::string& labels_path,
                      std::optional<int64_t> limit, std::optional<int> side) {
  if (limit && *limit < 1) {
    throw Error(images_path + ": example limit must be >= 1, got " + std::to_string(*limit));
  }
  const FilePtr images_file = open_file(images_path);
  IdxStream images_stream(images_path, file_reader(images_file.get(), images_path));
  const IdxImages images = read_images(images_stream, images_path, side);
  const FilePtr labels_file = open_file(labels_path);
  IdxStream labels_stream(labels_path, file_reader(labels_file.get(), labels_path));
  const std::vector<uint8_t> labels = read_labels(labels_stream, labels_path);
  return to_dataset(images, labels, images_path, labels_path, limit);
}

Dataset read_idx_pair_from_memory(std::span<const uint8_t> images_bytes,
                                  std::span<const uint8_t> labels_bytes,
                                  std::optional<int64_t> limit, std::optional<int> side) {
  IdxStream images_stream("images", memory_reader(images_bytes));
  const IdxImages images = read_images(images_stream, "images", side);
  IdxStream labels_stream("labels", memory_reader(labels_bytes));
  const std::vector<uint8_t> labels = read_labels(labels_stream, "labels");
  return to_dataset(images, labels, "images", "labels", limit);
}

}  // namespace paralab

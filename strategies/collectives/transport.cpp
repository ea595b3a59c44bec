#include "strategies/collectives/transport.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "core/device.h"
#include "core/error.h"
#include "core/ops.h"

namespace paralab {

void Transport::check_peer(int peer) const {
  PARALAB_REQUIRE(peer >= 0 && peer < size() && peer != rank(),
                  "transport: rank " + std::to_string(rank()) + " cannot talk to peer " +
                      std::to_string(peer) + " in a group of " + std::to_string(size()));
}

Transport::ReceiveTimes Transport::receive_times(Device& device) const {
  ReceiveTimes t;
  for (const auto& m : receive_marks_) {
    t.wait_ms += device.elapsed_ms(m[0], m[1]);
    t.move_ms += device.elapsed_ms(m[1], m[2]);
  }
  t.receives = static_cast<int64_t>(receive_marks_.size());
  return t;
}

Tensor Transport::scratch(Device& device, int64_t n) {
  if (!scratch_.defined() || scratch_.numel() < n) {
    // The buffer it replaces may still be read by queued work (a receive and its add, on a
    // device that queues work, perhaps on its communication stream, which the allocator does
    // not order against): kept for the transport's life, not handed back. Doubling bounds what
    // is kept by the size of the newest buffer.
    const int64_t had = scratch_.defined() ? scratch_.numel() : 0;
    if (had) retired_scratch_.push_back(std::move(scratch_));
    scratch_ = Tensor::empty(device, {std::max<int64_t>({n, 2 * had, 1})});
  }
  return scratch_.view(0, {n});
}

namespace {

// LocalFabric's send: the receiver reads `buf` directly.
struct LocalRequest final : Transport::Request {
  Tensor buf;                     // the sender's buffer (shares its storage)
  Event ready;                    // the sender's work that produced buf
  Event consumed;                 // the receiver's copy (or add) that reads buf
  std::atomic<bool> done{false};  // set by the receiver once it has queued that copy
  std::mutex* mu = nullptr;       // the mailbox's: sleepers wait on its cv
  std::condition_variable* cv = nullptr;
};

// Why spin first: a condition-variable wake-up costs tens of microseconds on a loaded VM,
// several times a 256 KiB copy, and every ring step has two hand-offs. Ranks spin this many
// polls (~20 us) before they sleep, so that a peer that is about to answer is not missed,
// while a peer that is still computing costs little CPU.
constexpr int kSpinPolls = 4000;

template <typename Ready>
bool spin_until(Ready ready) {
  for (int i = 0; i < kSpinPolls; ++i) {
    if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  return false;
}

}  // namespace

struct LocalFabric::Impl {
  struct Mailbox {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::shared_ptr<LocalRequest>> queue;
    std::atomic<int> queued{0};  // queue.size(), readable without the lock (for spinning)
  };

  class Endpoint final : public Transport {
   public:
    Endpoint(Impl& fabric, int rank, Device& device)
        : fabric_(fabric), rank_(rank), device_(device) {}
    int rank() const override { return rank_; }
    int size() const override { return fabric_.size; }

    Handle isend(int peer, const Tensor& buf) override {
      check_peer(peer);
      // The peer's copy must start after the work that produced buf: an event it waits on
      // (CUDA; the host does not wait), nothing on the CPU, whose work is done when queued.
      auto req = std::make_shared<LocalRequest>();
      req->buf = buf;
      req->ready = device_.record();
      Mailbox& box = fabric_.box(rank_, peer);
      req->mu = &box.mu;
      req->cv = &box.cv;
      {
        std::lock_guard lock(box.mu);
        box.queue.push_back(req);
        box.queued.fetch_add(1, std::memory_order_release);
      }
      box.cv.notify_all();
      bytes_sent_ += static_cast<int64_t>(buf.bytes());
      return req;
    }

    void wait(const Handle& handle) override {
      PARALAB_REQUIRE(handle != nullptr, "transport: wait() on an empty request");
      auto* req = dynamic_cast<LocalRequest*>(handle.get());
      PARALAB_REQUIRE(req != nullptr, "transport: wait() on another transport's request");
      if (!spin_until([&] { return req->done.load(std::memory_order_acquire); })) {
        std::unique_lock lock(*req->mu);
        req->cv->wait(lock, [&] { return req->done || fabric_.aborted; });
        if (!req->done) fabric_.check_aborted(rank_);
      }
      // Whatever this rank queues next (e.g. overwriting buf) waits for the peer's copy.
      device_.wait(req->consumed);
    }

    void recv(int peer, Tensor& buf) override { receive(peer, buf, false); }
    void recv_reduce(int peer, Tensor& buf) override { receive(peer, buf, true); }

    void barrier() override {
      std::unique_lock lock(fabric_.barrier_mu);
      const uint64_t gen = fabric_.barrier_gen;
      if (++fabric_.barrier_count == fabric_.size) {
        fabric_.barrier_count = 0;
        ++fabric_.barrier_gen;
        fabric_.barrier_cv.notify_all();
      } else {
        fabric_.barrier_cv.wait(lock,
                                [&] { return fabric_.barrier_gen != gen || fabric_.aborted; });
      }
      fabric_.check_aborted(rank_);
    }

   private:
    void receive(int peer, Tensor& buf, bool reduce) {
      check_peer(peer);
      const bool timed = receive_timing();
      const TimeMark called = timed ? device_.mark() : TimeMark{};
      Mailbox& box = fabric_.box(peer, rank_);
      std::shared_ptr<LocalRequest> req;
      spin_until(
          [&] { return box.queued.load(std::memory_order_acquire) > 0 || fabric_.aborted.load(); });
      {
        std::unique_lock lock(box.mu);
        box.cv.wait(lock, [&] { return !box.queue.empty() || fabric_.aborted; });
        fabric_.check_aborted(rank_);
        req = box.queue.front();
        box.queue.pop_front();
        box.queued.fetch_sub(1, std::memory_order_relaxed);
      }
      PARALAB_REQUIRE(req->buf.numel() == buf.numel(),
                      "transport: rank " + std::to_string(rank_) + " expected " +
                          std::to_string(buf.numel()) + " values from rank " +
                          std::to_string(peer) + ", got " + std::to_string(req->buf.numel()));
      // The receiver's device reads the sender's memory directly: one copy, no staging, queued
      // after the sender's work and before this rank's next.
      if (buf.numel()) {
        device_.wait(req->ready);
        const TimeMark can_move = timed ? device_.mark() : TimeMark{};
        if (reduce)
          device_.ops().add_inplace(buf, req->buf);
        else
          device_.copy_on_device(buf.raw(), req->buf.raw(), buf.bytes());
        req->consumed = device_.record();
        if (timed) note_receive(called, can_move, device_.mark());
      }
      {
        std::lock_guard lock(box.mu);
        req->done.store(true, std::memory_order_release);
      }
      box.cv.notify_all();
    }

    Impl& fabric_;
    int rank_;
    Device& device_;
  };

  explicit Impl(const std::vector<Device*>& devices)
      : size(static_cast<int>(devices.size())), boxes(static_cast<std::size_t>(size * size)) {
    for (int r = 0; r < size; ++r)
      endpoints.push_back(
          std::make_unique<Endpoint>(*this, r, *devices[static_cast<std::size_t>(r)]));
  }

  Mailbox& box(int from, int to) { return boxes[static_cast<std::size_t>(from * size + to)]; }

  void check_aborted(int rank) const {
    if (aborted) throw PeerFailed("transport: rank " + std::to_string(rank) + ": a peer failed");
  }

  int size;
  std::vector<Mailbox> boxes;
  std::atomic<bool> aborted{false};
  std::mutex barrier_mu;
  std::condition_variable barrier_cv;
  int barrier_count = 0;
  uint64_t barrier_gen = 0;
  std::vector<std::unique_ptr<Endpoint>> endpoints;
};

LocalFabric::LocalFabric(std::vector<Device*> devices)
    : devices_(std::move(devices)), impl_(std::make_unique<Impl>(devices_)) {
  PARALAB_REQUIRE(!devices_.empty(), "transport: a group needs at least one device");
}

LocalFabric::~LocalFabric() = default;

void LocalFabric::abort() {
  impl_->aborted = true;
  for (auto& box : impl_->boxes) {
    std::lock_guard lock(box.mu);
    box.cv.notify_all();
  }
  std::lock_guard lock(impl_->barrier_mu);
  impl_->barrier_cv.notify_all();
}

Transport& LocalFabric::endpoint(int rank) {
  PARALAB_REQUIRE(rank >= 0 && rank < size(), "transport: no rank " + std::to_string(rank));
  return *impl_->endpoints[static_cast<std::size_t>(rank)];
}

}  // namespace paralab

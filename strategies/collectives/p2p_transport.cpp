#include "strategies/collectives/p2p_transport.h"

#include <algorithm>
#include <deque>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/ops.h"

namespace paralab {

namespace {

// One group of NCCL calls: group_start() now, group_end() by end(); a failed send or receive
// still ends the group (on unwinding), so that the thread's later NCCL calls are not left
// inside it.
class GroupScope {
 public:
  explicit GroupScope(NativePointToPoint& p2p) : p2p_(p2p) { p2p_.group_start(); }
  GroupScope(const GroupScope&) = delete;
  GroupScope& operator=(const GroupScope&) = delete;
  ~GroupScope() {
    if (!ended_) try {
        p2p_.group_end();
      } catch (...) {  // the error being thrown is the one to report
      }
  }
  void end() {
    ended_ = true;
    p2p_.group_end();
  }

 private:
  NativePointToPoint& p2p_;
  bool ended_ = false;
};

struct PendingSend final : Transport::Request {
  Tensor buf;
  int peer = 0;
  bool issued = false;
};

class PointToPointTransport final : public Transport {
 public:
  PointToPointTransport(Device& device, std::unique_ptr<NativePointToPoint> p2p,
                        std::function<void()> barrier)
      : device_(device), p2p_(std::move(p2p)), barrier_(std::move(barrier)) {}

  int rank() const override { return p2p_->rank(); }
  int size() const override { return p2p_->size(); }

  Handle isend(int peer, const Tensor& buf) override {
    check_peer(peer);
    auto req = std::make_shared<PendingSend>();
    req->buf = buf;
    req->peer = peer;
    pending_.push_back(req);
    bytes_sent_ += static_cast<int64_t>(buf.bytes());
    return req;
  }

  void wait(const Handle& handle) override {
    auto* req = dynamic_cast<PendingSend*>(handle.get());
    PARALAB_REQUIRE(req != nullptr, "transport: wait() on another transport's request");
    if (!req->issued) group(nullptr, 0, pending_.size());  // all noted sends, one group
  }

  void recv(int peer, Tensor& buf) override { group(&buf, peer, 1); }
  void recv_after_sends(int peer, Tensor& buf) override { group(&buf, peer, pending_.size()); }

  void recv_reduce(int peer, Tensor& buf) override {
    Tensor part = scratch(device_, buf.numel());
    group(&part, peer, 1);
    if (buf.numel()) device_.ops().add_inplace(buf, part);  // after the receive, on the stream
  }

  void barrier() override {
    if (!pending_.empty()) group(nullptr, 0, pending_.size());
    barrier_();
  }

  // A whole step as one group: its sends (and any noted before it) and its receives, which NCCL
  // progresses together, so a ring step cut into pieces, or a parent's receives from both its
  // children, is one group launch instead of one per piece or child. Every rank groups its own
  // step, so each send still meets its receive. Adds follow the group on the stream, in the
  // receives' order, from slices of one scratch buffer.
  //
  // Up to kMaxStepGroupOps operations (in every group this transport makes): NCCL cuts a group too
  // large for one launch into several, each rank by its own list, and a send may then sit in a
  // later launch than its receive on the peer (a hang; frameworks cap their batched point-to-point
  // groups for it, and NCCL's guides up to 2.11 state a limit of 2,048 operations a group). A
  // larger step (a ring step of a large message in 256 KiB pieces) goes as the base transport moves
  // it: each receive in a group with one send, the pieces in order. Ranks on either side of the
  // bound still meet: a send's group only waits for receives its peers have posted or will post in
  // order.
  static constexpr std::size_t kMaxStepGroupOps = 128;
  void step(std::span<const StepSend> sends, std::span<const StepReceive> receives) override {
    if (sends.empty() && receives.empty()) return;  // nothing of this rank's in the step
    std::size_t ops = pending_.size();
    for (const StepSend& s : sends) ops += s.buf.numel() ? 1 : 0;
    for (const StepReceive& r : receives) ops += r.buf.numel() ? 1 : 0;
    if (ops > kMaxStepGroupOps) {
      Transport::step(sends, receives);
      return;
    }
    int64_t scratch_floats = 0;
    for (const StepReceive& r : receives) {
      check_peer(r.peer);
      if (r.reduce) scratch_floats += r.buf.numel();
    }
    for (const StepSend& s : sends) check_peer(s.peer);
    // Defined even when every add is empty (scratch gives at least one float): an empty receive
    // still takes its view, and a throw here would leave the peers' receives unmet.
    const Tensor landing = scratch(device_, scratch_floats);
    std::vector<Tensor> into;  // every receive's buffer, alive until the group ends
    into.reserve(receives.size());
    int64_t at = 0;
    for (const StepReceive& r : receives) {
      const int64_t n = r.buf.numel();
      into.push_back(r.reduce ? landing.view(at, {n}) : r.buf);
      if (r.reduce) at += n;
    }
    GroupScope scope(*p2p_);
    for (const auto& pending : pending_) {
      if (pending->buf.numel()) p2p_->send(pending->buf, pending->peer);
      pending->issued = true;
    }
    pending_.clear();
    for (const StepSend& s : sends) {
      if (s.buf.numel()) p2p_->send(s.buf, s.peer);
      bytes_sent_ += static_cast<int64_t>(s.buf.bytes());
    }
    for (std::size_t i = 0; i < receives.size(); ++i)
      if (into[i].numel()) p2p_->recv(into[i], receives[i].peer);
    scope.end();
    for (std::size_t i = 0; i < receives.size(); ++i)
      if (receives[i].reduce && into[i].numel()) {
        Tensor buf = receives[i].buf;
        device_.ops().add_inplace(buf, into[i]);
      }
  }

  NativePointToPoint* native() override { return p2p_.get(); }

 private:
  // The `sends` oldest noted sends and, unless null, one receive into `into` from `peer`, as one
  // group. Why one send per receive: a ring step cut into pieces notes all its sends, then
  // receives piece after piece; its peer does the same, so send i must travel with receive i (a
  // group holding every send would wait for receives the peer queues only after its own such
  // group). Why every send at wait(): a tree's leaf notes all its chunks for the parent and only
  // then receives the total; the parent takes those chunks one by one before it sends anything.
  // A pipeline's stage (recv_after_sends) may hold several sends before a receive: after two
  // forwards, two activations, which its peer needs both of before it sends the gradient the
  // stage waits for; they all go with that receive (GroupScope ends the group on a failure too).
  // More than kMaxStepGroupOps sends (a tree's leaf with a large message in pieces) go first, in
  // groups of that many, oldest first: their receiver takes them in order, so no group waits for
  // one after it.
  void group(Tensor* into, int peer, std::size_t sends) {
    if (into) check_peer(peer);
    sends = std::min(sends, pending_.size());
    while (true) {
      const std::size_t room = kMaxStepGroupOps - (into && into->numel() ? 1 : 0);
      const std::size_t now = std::min(sends, room);
      const bool last = now == sends;
      GroupScope scope(*p2p_);
      for (std::size_t i = 0; i < now; ++i) {
        PendingSend& s = *pending_[i];
        if (s.buf.numel()) p2p_->send(s.buf, s.peer);
        s.issued = true;
      }
      pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(now));
      sends -= now;
      if (last && into && into->numel()) p2p_->recv(*into, peer);
      scope.end();
      if (last) return;
    }
  }

  Device& device_;
  std::unique_ptr<NativePointToPoint> p2p_;
  std::function<void()> barrier_;
  std::deque<std::shared_ptr<PendingSend>> pending_;  // noted, not yet issued, oldest first
};

}  // namespace

std::unique_ptr<Transport> make_point_to_point_transport(Device& device,
                                                         std::unique_ptr<NativePointToPoint> p2p,
                                                         std::function<void()> barrier) {
  return std::make_unique<PointToPointTransport>(device, std::move(p2p), std::move(barrier));
}

}  // namespace paralab

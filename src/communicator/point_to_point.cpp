// Point to point: messages between two ranks, matched in order per (peer, tag); device buffers
// travel through a pinned staging slot. A send or receive on device buffers while a CUDA stream
// is set takes its place among the peer's messages when it is called and moves its data once the
// stream reaches it; a blocking one also holds the stream until it is done (stream_order.cpp).
#include "collectives/staging.hpp"
#include "communicator/communicator_impl.hpp"
#include "communicator/runtime.hpp"
#include "core/dtype.hpp"
#include "core/status.hpp"

namespace holmes::detail {
namespace {

// The sequence number of the next point-to-point message with `peer` and `tag`, counted on.
std::uint64_t next_p2p(std::vector<std::uint64_t>& untagged,
                       std::map<std::pair<int, std::uint32_t>, std::uint64_t>& tagged, int peer,
                       std::uint32_t tag) {
  if (tag == 0) return untagged[static_cast<std::size_t>(peer)]++;
  return tagged[{peer, tag}]++;
}

}  // namespace

std::shared_ptr<RequestImpl> CommunicatorImpl::point_to_point(P2pDirection direction,
                                                              const void* buffer, std::size_t count,
                                                              hm_dtype_t dtype, int peer,
                                                              CallMode mode,
                                                              std::uint32_t user_tag) {
  const bool is_send = direction == P2pDirection::kSend;
  const char* name = is_send ? "send" : "recv";
  const bool any_source = peer == HM_ANY_SOURCE;
  require(user_tag <= kMaxUserTag, "{}: tag {} is outside [0, {}]", name, user_tag, kMaxUserTag);
  require(dtype_valid(dtype), "{}: unknown dtype {} (valid: 0..{})", name, static_cast<int>(dtype),
          HM_DTYPE_COUNT - 1);
  require(!(any_source && is_send), "send: HM_ANY_SOURCE names no peer (it is for receives)");
  require(!any_source || size_ > 1,
          "recv from HM_ANY_SOURCE: rank {} is alone in its communicator, nobody can send", rank_);
  require(any_source || (peer >= 0 && peer < size_), "{}: peer {} is outside [0, {})", name, peer,
          size_);
  require(peer != rank_, "{}: peer {} is this rank; messages to self are not supported", name,
          peer);
  require(count <= kMaxBufferBytes / dtype_size(dtype), "{}: count {} of {} overflows", name, count,
          dtype_name(dtype));
  require(buffer != nullptr || count == 0, "{}: buffer is NULL with count {}", name, count);
  check_usable();
  const std::size_t bytes = count * dtype_size(dtype);
  // Messages between two ranks are matched in order per tag: the n-th send to a peer with a tag
  // meets that peer's n-th receive from us with that tag. The signature lets the receiver check
  // count and dtype.
  const auto signature = collective_signature(CollectiveKind::kBarrier, count, dtype, -1, -1);
  auto request = std::make_shared<RequestImpl>();
  request->comm = shared_from_this();
  request->peer = any_source ? -1 : peer;
  request->receive = !is_send;
  DeviceMemory* device = Runtime::get().device_memory();
  if (device != nullptr) {
    device = bytes > 0 && device->is_device(buffer) ? &device->bound_to(buffer) : nullptr;
  }
  const bool on_stream = ordered_on_stream(device, mode);
  // A nonblocking send or receive on device buffers while a stream is set moves its data once
  // the stream has reached the call, as the nonblocking collectives start (dispatch.cpp), and
  // holds no gate: the send copies the buffer out on the op queue's worker, after the work that
  // writes it; the receive copies in, in wait(), after the work before it that still uses the
  // buffer.
  std::shared_ptr<DeviceMemory::StreamPoint> start;
  if (device != nullptr && mode == CallMode::kNonblocking && cuda_stream_.has_value()) {
    start = device->mark(*cuda_stream_);
  }
  if (is_send && (on_stream || start != nullptr)) {
    const auto tag = p2p_tag(user_tag, next_p2p(sent_to_, tagged_sent_to_, peer, user_tag));
    request->what = fmt::format("send to rank {}", peer);
    // Run by the proxy once the stream has written the buffer: copied out into a slot, which
    // lives until the send is over, and sent.
    auto send_staged = [this, device, buffer, bytes, peer, tag, signature] {
      auto slot = staging(*device).acquire(bytes, Deadline::after(timeout_));
      device->to_host(slot.get(), buffer, bytes);
      auto sent = transport_->isend(peer, tag, signature, {slot.get(), bytes});
      sent->on_complete([slot](const Completion&) {});
      return sent;
    };
    if (on_stream) {
      enqueue_on_stream(*device, request->what, [this, request, send_staged] {
        request->request = send_staged();
        wait(*request);
      });
      return nullptr;
    }
    auto sent = std::make_shared<Completion>();
    request->request = sent;
    queue_.submit([this, start, sent, send_staged, what = request->what] {
      try {
        wait_for_stream(*start, what.c_str());
        send_staged()->on_complete(
            [sent](const Completion& done) { sent->complete(done.status(), done.message()); });
      } catch (const Error& e) {
        sent->complete(e.status(), e.what());
      } catch (const std::exception& e) {
        sent->complete(HM_ERR_INTERNAL, e.what());
      }
    });
    return request;
  }
  // Device buffers travel through a pinned slot: copied out before the send, in after the
  // receive (in wait()).
  std::shared_ptr<std::byte> slot;
  if (device != nullptr) slot = staging(*device).acquire(bytes, Deadline::after(timeout_));
  if (is_send) {
    const auto tag = p2p_tag(user_tag, next_p2p(sent_to_, tagged_sent_to_, peer, user_tag));
    request->what = fmt::format("send to rank {}", peer);
    const auto* data = static_cast<const std::byte*>(buffer);
    if (slot) {
      device->to_host(slot.get(), buffer, bytes);
      data = slot.get();
    }
    request->request = transport_->isend(peer, tag, signature, {data, bytes});
    if (slot) request->request->on_complete([slot](const Completion&) {});
  } else {
    auto* target = static_cast<std::byte*>(const_cast<void*>(buffer));
    const std::span<std::byte> into{slot ? slot.get() : target, bytes};
    if (any_source) {
      // Posted once the arrival order names its message (resolve_source).
      request->what = user_tag == 0 ? std::string("recv from any source")
                                    : fmt::format("recv from any source with tag {}", user_tag);
      request->any = std::make_unique<AnySourceReceive>(
          AnySourceReceive{transport_->arrivals().expect_any(user_tag), into, signature});
    } else {
      const auto tag = p2p_tag(user_tag, transport_->arrivals().claim(peer, user_tag));
      request->what = fmt::format("recv from rank {}", peer);
      request->request = transport_->irecv(peer, tag, signature, into);
    }
    if (slot) {
      request->finish = [this, device, target, slot, bytes, start, what = request->what]() mutable {
        if (start != nullptr) wait_for_stream(*start, what.c_str());
        device->from_host(target, slot.get(), bytes);
        slot.reset();
      };
    }
  }
  if (on_stream) {
    // Posted already (into the slot); the proxy copies it in once the stream has reached the call,
    // so no work before it on the stream still uses the buffer.
    enqueue_on_stream(*device, request->what, [this, request] { wait(*request); });
    return nullptr;
  }
  if (mode == CallMode::kBlocking) {
    wait(*request);
    return nullptr;
  }
  return request;
}

}  // namespace holmes::detail

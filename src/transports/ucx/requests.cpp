#include "transports/ucx/transport.hpp"

#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::ucx {

Engine::Op* Engine::launch(
    std::unique_ptr<Op> op,
    const std::function<ucs_status_ptr_t(Op&, ucp_request_param_t&)>& start) {
  Op* raw = op.get();
  raw->engine = this;
  in_flight_.emplace(raw, std::move(op));
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  if (raw->kind == Op::Kind::kReceive) {
    param.cb.recv_am = &Engine::receive_callback;
  } else {
    param.cb.send = &Engine::send_callback;
  }
  if (raw->kind == Op::Kind::kSend || raw->kind == Op::Kind::kReceive) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    param.memory_type = UCS_MEMORY_TYPE_HOST;
  }
  param.user_data = raw;
  const ucs_status_ptr_t request = start(*raw, param);
  if (request == nullptr) {
    op_done(raw, UCS_OK);
  } else if (UCS_PTR_IS_ERR(request)) {
    op_done(raw, UCS_PTR_STATUS(request));
  }
  // Otherwise the callback reports; `raw` stays valid until then.
  return raw;
}

void Engine::send_callback(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<Op*>(user_data);
  op->engine->op_done(op, status);
  ucp_request_free(request);
}

void Engine::receive_callback(void* request, ucs_status_t status, std::size_t, void* user_data) {
  auto* op = static_cast<Op*>(user_data);
  op->engine->op_done(op, status);
  ucp_request_free(request);
}

void Engine::op_done(Op* raw, ucs_status_t status) {
  auto node = in_flight_.extract(raw);
  if (node.empty()) return;
  const std::unique_ptr<Op> op = std::move(node.mapped());
  if (tearing_down_) {
    if (op->caller) op->caller->complete(closed_.status(), closed_.why());
    return;
  }
  switch (op->kind) {
    case Op::Kind::kSend:
      send_done(*op, status);
      break;
    case Op::Kind::kReceive:
      receive_done(*op, status);
      break;
    case Op::Kind::kFlush:
      flush_done(*op, status);
      break;
    case Op::Kind::kGoodbye:
    case Op::Kind::kClose:
      if (status != UCS_OK && status != UCS_ERR_CANCELED) {
        HM_LOG_DEBUG("ucx rank {}: closing the endpoint to rank {}: {}", directory_.rank(),
                     op->peer, ucs_status_string(status));
      }
      break;
  }
}

void Engine::send_done(Op& op, ucs_status_t status) {
  if (closed_.closed()) {
    op.caller->complete(closed_.status(), closed_.why());
    return;
  }
  const auto& peer = peers_[static_cast<std::size_t>(op.peer)];
  if (peer.failure.failed()) {
    op.caller->complete(peer.failure.status, peer.failure.message);
  } else if (status == UCS_OK) {
    op.caller->complete();
  } else if (peer.gone) {
    op.caller->complete(
        HM_ERR_PEER_FAILED,
        fmt::format("{} closed its ucx endpoint before taking this message", peer_name(op.peer)));
  } else {
    const auto message =
        fmt::format("ucx: sending to {} failed: {}", peer_name(op.peer), ucs_status_string(status));
    op.caller->complete(HM_ERR_PEER_FAILED, message);
    later_.push_back(
        [this, p = op.peer, message] { fail_peer_now(p, HM_ERR_PEER_FAILED, message); });
  }
}

void Engine::receive_done(Op& op, ucs_status_t status) {
  if (op.receive) --op.receive->writers;
  if (status == UCS_OK) {
    if (!closed_.closed()) matcher_.landed(op.peer, op.fragment, op.landing);
  } else if (!closed_.closed()) {
    const auto message =
        fmt::format("ucx: receiving a {}-byte message from {} failed: {}", op.fragment.total,
                    peer_name(op.peer), ucs_status_string(status));
    later_.push_back(
        [this, p = op.peer, message] { fail_peer_now(p, HM_ERR_PEER_FAILED, message); });
  }
  if (op.receive && op.receive->writers == 0 && op.receive->matched->done()) {
    finish_receive(op.receive);
  }
}

void Engine::flush_done(Op& op, ucs_status_t status) {
  auto& peer = peers_[static_cast<std::size_t>(op.peer)];
  peer.flushing = false;
  if (status == UCS_OK && !peer.failure.failed() && peer.ep != nullptr) {
    peer.connected = true;
    describe_link(op.peer);
  } else if (status != UCS_OK && !closed_.closed() && !peer.failure.failed()) {
    const auto message =
        fmt::format("ucx: cannot connect to {}: {}", peer_name(op.peer), ucs_status_string(status));
    later_.push_back([this, p = op.peer, message] { fail_peer_now(p, HM_ERR_TRANSPORT, message); });
  }
  check_connected();
}

}  // namespace holmes::ucx

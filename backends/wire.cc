#include "backends/wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace attnkit::backends::wire {

void Writer::PutString(std::string_view s) {
  Put<uint32_t>(static_cast<uint32_t>(s.size()));
  const size_t at = buf_.size();
  buf_.resize(at + s.size());
  if (!s.empty()) std::memcpy(buf_.data() + at, s.data(), s.size());
}

void Writer::PutInts(std::span<const int64_t> v) {
  Put<uint32_t>(static_cast<uint32_t>(v.size()));
  for (int64_t x : v) Put(x);
}

void Writer::PutProblem(const AttentionProblem& p) {
  Put(p.batch);
  Put(p.q_heads);
  Put(p.kv_heads);
  Put(p.head_dim);
  PutInts(p.q_lens);
  PutInts(p.kv_lens);
  Put(static_cast<uint8_t>(p.mask));
  Put(p.window);
  Put(static_cast<uint8_t>(p.scale.has_value()));
  Put(p.scale.value_or(0.0f));
  Put(static_cast<uint8_t>(p.dtype));
  Put(static_cast<uint8_t>(p.layout));
  // Unset and set-to-dtype differ in the problem's one-line form (a
  // reproducer), so the worker gets the optional as it is.
  Put(static_cast<uint8_t>(p.kv_dtype.has_value()));
  Put(static_cast<uint8_t>(p.kv_dtype.value_or(DType::kF32)));
}

void Writer::PutBlockProblem(const AttentionBlockProblem& p) {
  PutProblem(p.attention);
  Put(p.hidden);
  Put(static_cast<uint8_t>(p.weight_dtype));
  Put(static_cast<uint8_t>(p.qkv_bias));
  Put(static_cast<uint8_t>(p.output_projection));
}

void Writer::PutStatus(const Status& s) {
  Put(static_cast<uint32_t>(s.code()));
  PutString(s.message());
}

void Writer::PutTensor(const TensorRef& t) {
  Put(t.segment);
  Put(t.offset);
  Put(static_cast<uint8_t>(t.dtype));
  for (int64_t x : t.shape) Put(x);
  for (int64_t x : t.strides) Put(x);
}

void Writer::PutCounts(const accounting::Counts& c) {
  for (int64_t x : {c.allocs, c.bytes_allocated, c.frees, c.bytes_freed,
                    c.bytes_copied, c.live_bytes, c.peak_live_bytes}) {
    Put(x);
  }
}

bool Reader::GetString(std::string& s) {
  uint32_t n = 0;
  if (!Get(n) || data_.size() - at_ < n) return Fail();
  s.assign(reinterpret_cast<const char*>(data_.data() + at_), n);
  at_ += n;
  return true;
}

bool Reader::GetInts(std::vector<int64_t>& v) {
  uint32_t n = 0;
  if (!Get(n) || (data_.size() - at_) / sizeof(int64_t) < n) return Fail();
  v.resize(n);
  for (int64_t& x : v) Get(x);
  return ok_;
}

namespace {
template <typename E>
bool ToEnum(uint8_t raw, E max, E& out) {
  if (raw > static_cast<uint8_t>(max)) return false;
  out = static_cast<E>(raw);
  return true;
}
}  // namespace

bool Reader::GetProblem(AttentionProblem& p) {
  uint8_t mask = 0, has_scale = 0, dtype = 0, layout = 0, has_kv_dtype = 0,
          kv_dtype = 0;
  float scale = 0;
  if (!Get(p.batch) || !Get(p.q_heads) || !Get(p.kv_heads) ||
      !Get(p.head_dim) || !GetInts(p.q_lens) || !GetInts(p.kv_lens) ||
      !Get(mask) || !Get(p.window) || !Get(has_scale) || !Get(scale) ||
      !Get(dtype) || !Get(layout) || !Get(has_kv_dtype) || !Get(kv_dtype)) {
    return Fail();
  }
  DType kv = DType::kF32;
  if (!ToEnum(mask, MaskKind::kBias, p.mask) ||
      !ToEnum(dtype, DType::kBF16, p.dtype) ||
      !ToEnum(layout, KvLayout::kTransposedV, p.layout) || has_kv_dtype > 1 ||
      !ToEnum(kv_dtype, DType::kI8, kv)) {
    return Fail();
  }
  p.scale = has_scale ? std::optional<float>(scale) : std::nullopt;
  p.kv_dtype = has_kv_dtype ? std::optional<DType>(kv) : std::nullopt;
  return true;
}

bool Reader::GetBlockProblem(AttentionBlockProblem& p) {
  uint8_t weight_dtype = 0, qkv_bias = 0, output_projection = 0;
  if (!GetProblem(p.attention) || !Get(p.hidden) || !Get(weight_dtype) ||
      !Get(qkv_bias) || !Get(output_projection) || qkv_bias > 1 ||
      output_projection > 1 ||
      !ToEnum(weight_dtype, DType::kBF16, p.weight_dtype)) {
    return Fail();
  }
  p.qkv_bias = qkv_bias == 1;
  p.output_projection = output_projection == 1;
  return true;
}

bool Reader::GetStatus(Status& s) {
  uint32_t code = 0;
  std::string message;
  if (!Get(code) || !GetString(message)) return Fail();
  if (code > static_cast<uint32_t>(StatusCode::kInternal)) return Fail();
  s = code == 0 ? Status::Ok()
                : Status(static_cast<StatusCode>(code), std::move(message));
  return true;
}

bool Reader::GetTensor(TensorRef& t) {
  uint8_t dtype = 0;
  if (!Get(t.segment) || !Get(t.offset) || !Get(dtype)) return Fail();
  for (int64_t& x : t.shape) Get(x);
  for (int64_t& x : t.strides) Get(x);
  if (!ok_ || !ToEnum(dtype, DType::kI8, t.dtype)) return Fail();
  return true;
}

bool Reader::GetCounts(accounting::Counts& c) {
  for (int64_t* x : {&c.allocs, &c.bytes_allocated, &c.frees, &c.bytes_freed,
                     &c.bytes_copied, &c.live_bytes, &c.peak_live_bytes}) {
    if (!Get(*x)) return false;
  }
  return true;
}

bool SendMessage(int sock, std::span<const uint8_t> msg,
                 std::span<const int> fds) {
  iovec iov{const_cast<uint8_t*>(msg.data()), msg.size()};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (!fds.empty()) {
    if (fds.size() > static_cast<size_t>(kMaxFds)) return false;
    const size_t bytes = sizeof(int) * fds.size();
    h.msg_control = control;
    h.msg_controllen = CMSG_SPACE(bytes);
    cmsghdr* c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(bytes);
    std::memcpy(CMSG_DATA(c), fds.data(), bytes);
  }
  while (true) {
    const ssize_t n = sendmsg(sock, &h, MSG_NOSIGNAL);
    if (n >= 0) return static_cast<size_t>(n) == msg.size();
    if (errno != EINTR) return false;
  }
}

long RecvMessage(int sock, std::vector<uint8_t>& buf, std::vector<int>* fds) {
  if (buf.size() < kMaxMessage) buf.resize(kMaxMessage);
  iovec iov{buf.data(), buf.size()};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  h.msg_control = control;
  h.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(sock, &h, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (fds != nullptr) {
        fds->push_back(fd);
      } else {
        close(fd);
      }
    }
  }
  if ((h.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    errno = EMSGSIZE;
    return -1;
  }
  return static_cast<long>(n);
}

}  // namespace attnkit::backends::wire

// The messages between a RemoteBackend (backends/remote.h) and its worker
// process (backends/worker_main.cc): one request, one response, each one
// SOCK_SEQPACKET message, shared-memory segments passed as file descriptors
// (SCM_RIGHTS) the first time a request refers to them. Tensors travel as
// (segment, byte offset, dtype, shape, strides), never as bytes.
//
// Encoding: little-endian host integers, length-prefixed strings and
// arrays. The Reader bounds-checks every read (a short or garbled message is
// a Status, never a read past the buffer).
#ifndef ATTNKIT_BACKENDS_WIRE_H_
#define ATTNKIT_BACKENDS_WIRE_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "runtime/accounting.h"
#include "runtime/attention_block.h"
#include "runtime/backend.h"
#include "runtime/problem.h"
#include "runtime/status.h"

namespace attnkit::backends::wire {

// The largest message either side sends or accepts.
inline constexpr size_t kMaxMessage = size_t{192} << 10;
// File descriptors one request may carry.
inline constexpr int kMaxFds = 64;

enum class Op : uint32_t {
  kHello = 1,       // -> status, backend name
  kSupports,        // problem -> status
  kReserve,         // problem -> status
  kAttention,       // problem, q, k, v, bias, out, k_scale, v_scale
                    //   -> status, counts
  kAppend,          // k_cache, v_cache, new_k, new_v, k_scale, v_scale,
                    //   positions, new_lens -> status, counts
  kSupportsBlock,   // block problem -> status
  kAttentionBlock,  // block problem, x, wq, wk, wv, bq, bk, bv, wo, bias,
                    //   k_cache, v_cache, out -> status, counts
};

// A tensor in a segment. segment 0: the null view; kEmptySegment: a view
// with no element (any non-null pointer will do).
inline constexpr uint64_t kEmptySegment = ~uint64_t{0};
struct TensorRef {
  uint64_t segment = 0;
  uint64_t offset = 0;  // bytes from the segment's base
  DType dtype = DType::kF32;
  std::array<int64_t, 4> shape{};
  std::array<int64_t, 4> strides{};
};

class Writer {
 public:
  // Appends to `buf`.
  explicit Writer(std::vector<uint8_t>& buf) : buf_(buf) {}
  template <typename T>
  void Put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = buf_.size();
    buf_.resize(at + sizeof(T));
    std::memcpy(buf_.data() + at, &v, sizeof(T));
  }
  void PutString(std::string_view s);
  void PutInts(std::span<const int64_t> v);
  void PutProblem(const AttentionProblem& p);
  void PutBlockProblem(const AttentionBlockProblem& p);
  void PutStatus(const Status& s);
  void PutTensor(const TensorRef& t);
  void PutCounts(const accounting::Counts& c);
  size_t size() const { return buf_.size(); }

 private:
  std::vector<uint8_t>& buf_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> data) : data_(data) {}
  template <typename T>
  bool Get(T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (data_.size() - at_ < sizeof(T)) return Fail();
    std::memcpy(&v, data_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  bool GetString(std::string& s);
  // Into an existing vector (its capacity is reused).
  bool GetInts(std::vector<int64_t>& v);
  bool GetProblem(AttentionProblem& p);
  bool GetBlockProblem(AttentionBlockProblem& p);
  bool GetStatus(Status& s);
  bool GetTensor(TensorRef& t);
  bool GetCounts(accounting::Counts& c);
  bool ok() const { return ok_; }
  bool done() const { return ok_ && at_ == data_.size(); }

 private:
  bool Fail() {
    ok_ = false;
    return false;
  }
  std::span<const uint8_t> data_;
  size_t at_ = 0;
  bool ok_ = true;
};

// One message on a SOCK_SEQPACKET socket, with up to kMaxFds descriptors.
// Send never raises SIGPIPE (a dead peer is an error return). Recv returns
// the message length, 0 at end of stream, -1 on error (errno set);
// received descriptors are appended to *fds (close-on-exec).
bool SendMessage(int sock, std::span<const uint8_t> msg,
                 std::span<const int> fds = {});
long RecvMessage(int sock, std::vector<uint8_t>& buf, std::vector<int>* fds);

}  // namespace attnkit::backends::wire

#endif  // ATTNKIT_BACKENDS_WIRE_H_

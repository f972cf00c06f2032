// A fixed-size, 64-byte-aligned, zero-initialized array: the storage behind the flat parameter,
// gradient, optimizer-state and activation buffers.
//
// Large buffers (kMappedBytes and up) are anonymous mappings aligned to 2 MiB and marked for
// transparent huge pages: the kernel hands them out as zeros, so nothing is cleared up front,
// and each page is faulted in where it is first written (by the thread that computes it), in
// 2 MiB pieces where the system allows. Writing every byte of a fresh buffer here, before the
// first step, cost a 10M-parameter GPT about as long as four training steps. Small buffers
// come from aligned_alloc and are cleared.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>

namespace cann {

namespace aligned_detail {
// Bytes at which a buffer becomes a mapping of its own.
constexpr size_t kMappedBytes = size_t{4} << 20;
// Zeroed storage of at least `bytes` (a multiple of 64), 64-byte aligned; `mapped` is set to the
// length of the mapping (0 when the storage came from aligned_alloc). Fails the process when
// the memory cannot be had, naming the size.
void* allocate(size_t bytes, size_t* mapped);
void release(void* p, size_t mapped);
}  // namespace aligned_detail

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { resize(n); }

  // Discards the contents; the new buffer is all zero bytes.
  void resize(size_t n) {
    data_.reset();
    size_ = n;
    if (n == 0) return;
    size_t mapped = 0;
    void* p = aligned_detail::allocate((n * sizeof(T) + 63) / 64 * 64, &mapped);
    data_ = std::unique_ptr<T, Free>(static_cast<T*>(p), Free{mapped});
  }
  void zero() {
    if (size_) std::memset(data_.get(), 0, size_ * sizeof(T));
  }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  T& operator[](size_t i) { return data_.get()[i]; }
  const T& operator[](size_t i) const { return data_.get()[i]; }

 private:
  struct Free {
    size_t mapped = 0;
    void operator()(T* p) const { aligned_detail::release(p, mapped); }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

}  // namespace cann

// A fixed-size, 64-byte-aligned, zero-initialized array: the storage behind the flat parameter,
// gradient, optimizer-state and activation buffers.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/check.h"

namespace cann {

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { resize(n); }

  // Discards the contents; the new buffer is all zero bytes.
  void resize(size_t n) {
    size_ = n;
    if (n == 0) {
      data_.reset();
      return;
    }
    const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    CANN_CHECK(p != nullptr) << "out of memory allocating " << bytes << " bytes";
    std::memset(p, 0, bytes);
    data_.reset(static_cast<T*>(p));
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
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

}  // namespace cann

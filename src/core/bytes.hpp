// Little-endian encoding for everything Holmes puts on the wire. ByteReader checks every read
// against the end of its input, so decoders of untrusted bytes cannot run past a buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace holmes {

template <typename T>
void store_le(std::uint8_t* out, T value) {
  static_assert(std::is_unsigned_v<T>);
  for (std::size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<std::uint8_t>(value >> (8 * i));
}

template <typename T>
T load_le(const std::uint8_t* in) {
  static_assert(std::is_unsigned_v<T>);
  T value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(in[i]) << (8 * i);
  return value;
}

class ByteWriter {
 public:
  template <typename T>
  ByteWriter& put(T value) {
    const std::size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    store_le<T>(bytes_.data() + at, value);
    return *this;
  }
  ByteWriter& put_bytes(std::span<const std::uint8_t> data) {
    bytes_.insert(bytes_.end(), data.begin(), data.end());
    return *this;
  }
  ByteWriter& put_string(std::string_view text) {  // u32 length + bytes
    put<std::uint32_t>(static_cast<std::uint32_t>(text.size()));
    bytes_.insert(bytes_.end(), text.begin(), text.end());
    return *this;
  }
  std::vector<std::uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<std::uint8_t> bytes_;
};

// Reads from a span; any read past the end sets ok() to false and returns zeros/empties.
class ByteReader {
 public:
  explicit ByteReader(std::span<const std::uint8_t> data) : data_(data) {}

  template <typename T>
  T get() {
    if (!take(sizeof(T))) return T{};
    return load_le<T>(data_.data() + pos_ - sizeof(T));
  }
  // u32 length + bytes, refused when longer than max_length.
  std::string get_string(std::size_t max_length) {
    const auto length = get<std::uint32_t>();
    if (length > max_length || !take(length)) {
      ok_ = false;
      return {};
    }
    return std::string(reinterpret_cast<const char*>(data_.data() + pos_ - length), length);
  }
  std::span<const std::uint8_t> rest() {
    auto r = data_.subspan(pos_);
    pos_ = data_.size();
    return r;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  bool take(std::size_t n) {
    if (!ok_ || data_.size() - pos_ < n) {
      ok_ = false;
      return false;
    }
    pos_ += n;
    return true;
  }
  std::span<const std::uint8_t> data_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace holmes

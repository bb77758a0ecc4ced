#include "safetensors_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>

namespace wsync_bench {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit

// A recursive-descent parser of the JSON subset a safetensors header uses.
class HeaderParser {
 public:
  explicit HeaderParser(const std::string& text) : s_(text) {}

  bool parse(std::vector<SafetensorsEntry>* entries, std::string* error) {
    if (!expect('{')) return fail(error);
    if (peek() == '}') return ++i_, true;
    do {
      std::string name;
      if (!string(&name) || !expect(':')) return fail(error);
      if (name == "__metadata__") {
        if (!skipValue()) return fail(error);
        continue;
      }
      SafetensorsEntry e;
      e.name = name;
      uint64_t begin = 0, end = 0;
      if (!tensor(&e, &begin, &end)) return fail(error);
      e.bytes = end - begin;
      e.data = reinterpret_cast<const void*>(static_cast<uintptr_t>(begin));  // an offset for now
      entries->push_back(e);
    } while (accept(','));
    if (!expect('}')) return fail(error);
    skipSpace();
    if (i_ != s_.size()) return fail(error);
    return true;
  }

 private:
  bool fail(std::string* error) const {
    *error = "malformed safetensors header near byte " + std::to_string(i_);
    return false;
  }
  void skipSpace() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_])))
      ++i_;
  }
  char peek() {
    skipSpace();
    return i_ < s_.size() ? s_[i_] : '\0';
  }
  bool accept(char c) {
    if (peek() != c) return false;
    ++i_;
    return true;
  }
  bool expect(char c) { return accept(c); }
  bool string(std::string* out) {
    if (!expect('"')) return false;
    out->clear();
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\') {
        if (++i_ >= s_.size()) return false;
      }
      out->push_back(s_[i_++]);
    }
    return i_ < s_.size() && s_[i_++] == '"';
  }
  bool integer(int64_t* out) {
    skipSpace();
    const size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])))
      ++i_;
    if (i_ == start || i_ - start > 19) return false;
    *out = std::stoll(s_.substr(start, i_ - start));
    return true;
  }
  bool integers(std::vector<int64_t>* out) {
    if (!expect('[')) return false;
    if (accept(']')) return true;
    do {
      int64_t v = 0;
      if (!integer(&v)) return false;
      out->push_back(v);
    } while (accept(','));
    return expect(']');
  }
  bool tensor(SafetensorsEntry* e, uint64_t* begin, uint64_t* end) {
    if (!expect('{')) return false;
    std::vector<int64_t> offsets;
    do {
      std::string key;
      if (!string(&key) || !expect(':')) return false;
      if (key == "dtype") {
        if (!string(&e->dtype)) return false;
      } else if (key == "shape") {
        if (!integers(&e->shape)) return false;
      } else if (key == "data_offsets") {
        if (!integers(&offsets)) return false;
      } else if (!skipValue()) {
        return false;
      }
    } while (accept(','));
    if (!expect('}') || offsets.size() != 2 || offsets[0] < 0 || offsets[1] < offsets[0])
      return false;
    *begin = static_cast<uint64_t>(offsets[0]);
    *end = static_cast<uint64_t>(offsets[1]);
    return true;
  }
  bool skipValue(int depth = 0) {
    if (depth > 16) return false;
    const char c = peek();
    if (c == '"') {
      std::string ignored;
      return string(&ignored);
    }
    if (c == '{' || c == '[') {
      ++i_;
      const char close = c == '{' ? '}' : ']';
      if (accept(close)) return true;
      do {
        if (c == '{') {
          std::string key;
          if (!string(&key) || !expect(':')) return false;
        }
        if (!skipValue(depth + 1)) return false;
      } while (accept(','));
      return expect(close);
    }
    int64_t ignored = 0;
    return integer(&ignored);
  }

  const std::string& s_;
  size_t i_ = 0;
};

std::string jsonHeader(const std::vector<SafetensorsEntry>& entries) {
  std::string h = "{";
  uint64_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    h += (h.size() > 1 ? "," : "") + std::string("\"") + e.name + "\":{\"dtype\":\"" + e.dtype +
         "\",\"shape\":[";
    for (size_t d = 0; d < e.shape.size(); ++d)
      h += (d ? "," : "") + std::to_string(e.shape[d]);
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + e.bytes) +
         "]}";
    offset += e.bytes;
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  return h;
}

}  // namespace

bool writeSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                      std::string* error) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::string header = jsonHeader(entries);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(length), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const SafetensorsEntry& e : entries)
    out.write(static_cast<const char*>(e.data), static_cast<std::streamsize>(e.bytes));
  out.close();
  if (!out) {
    *error = "writing " + path + " failed: " + std::strerror(errno);
    return false;
  }
  return true;
}

bool SafetensorsFile::open(const std::string& path, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    *error = "opening " + path + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  size_ = static_cast<uint64_t>(st.st_size);
  map_ = size_ >= 8 ? mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    *error = "mapping " + path + " (" + std::to_string(size_) + " bytes) failed";
    return false;
  }
  const auto* bytes = static_cast<const uint8_t*>(map_);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i)
    header_bytes = (header_bytes << 8) | bytes[i];
  if (header_bytes > kMaxHeaderBytes || 8 + header_bytes > size_) {
    *error = path + ": header length " + std::to_string(header_bytes) + " does not fit the file";
    return false;
  }
  const std::string header(reinterpret_cast<const char*>(bytes + 8), header_bytes);
  if (!HeaderParser(header).parse(&entries_, error)) {
    *error = path + ": " + *error;
    return false;
  }
  const uint64_t data_start = 8 + header_bytes;
  for (SafetensorsEntry& e : entries_) {
    const auto begin = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(e.data));
    if (data_start + begin + e.bytes > size_) {
      *error = path + ": tensor '" + e.name + "' lies outside the file";
      return false;
    }
    e.data = bytes + data_start + begin;
  }
  return true;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, size_);
}

}  // namespace wsync_bench

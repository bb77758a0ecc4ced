// Fuzz target: the CUDA IPC backend's wire formats that peers send (transport/cuda_ipc/
// cuda_ipc_encoding.h): process addresses and exposed-memory descriptors. Input: one byte choosing
// the decoder (bit 0: address or descriptor), then the bytes. What decodes must re-encode to bytes
// that decode again and re-encode identically.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "transport/cuda_ipc/cuda_ipc_encoding.h"

namespace {

void fuzzAddress(const std::vector<uint8_t>& bytes) {
  wsync::Result<wsync::CudaIpcProcessInfo> first = wsync::decodeCudaIpcAddress(bytes);
  if (!first.isOk()) {
    WSYNC_FUZZ_CHECK(first.status().code() == WSYNC_ERR_PROTOCOL);
    return;
  }
  const std::vector<uint8_t> again = wsync::encodeCudaIpcAddress(*first);
  wsync::Result<wsync::CudaIpcProcessInfo> second = wsync::decodeCudaIpcAddress(again);
  WSYNC_FUZZ_CHECK(second.isOk());
  WSYNC_FUZZ_CHECK(wsync::encodeCudaIpcAddress(*second) == again);
}

void fuzzDescriptor(const std::vector<uint8_t>& bytes) {
  wsync::CudaIpcDescriptor first;
  if (!wsync::decodeCudaIpcDescriptor(bytes, first).empty()) return;
  const std::vector<uint8_t> again = wsync::encodeCudaIpcDescriptor(first);
  wsync::CudaIpcDescriptor second;
  WSYNC_FUZZ_CHECK(wsync::decodeCudaIpcDescriptor(again, second).empty());
  WSYNC_FUZZ_CHECK(wsync::encodeCudaIpcDescriptor(second) == again);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::vector<uint8_t> bytes(data + 1, data + size);
  if ((data[0] & 1) == 0) {
    fuzzAddress(bytes);
  } else {
    fuzzDescriptor(bytes);
  }
  return 0;
}

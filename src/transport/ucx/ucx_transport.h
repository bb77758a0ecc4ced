// The UCX backend of WriteTransport: ucp_put_nbx into memory registered with ucp_mem_map, remote
// keys packed into ExposedMemory::descriptor(). Host memory: shared memory (sysv/posix/cma)
// within a node, whatever UCX finds (RDMA, TCP) across nodes.
// With Debian's UCX 1.13, writes into allocateExposed() memory over shared memory are truly
// one-sided; writes into expose()d (caller-allocated) memory are emulated with active messages
// and land only while the target calls progress().
// Regions UCX maps into this process (ucp_rkey_ptr succeeds: a peer's allocateExposed() memory
// over shared memory) are written with CPU copies instead of puts (common/fast_copy.h: streaming
// stores for large ones). Contiguous writes are copied in write(); strided ones at the next
// flush(), with the writes from adjoining source columns interleaved row by row so that each
// source row is read once.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "common/status.h"
#include "transport/write_transport.h"

namespace wsync {

struct UcxTransportOptions {
  // Writes posted but not yet complete locally; beyond this write() progresses until half of
  // them completed, so millions of small writes do not pile up requests.
  size_t max_in_flight = 1024;
  // How long write() waits for that room before WSYNC_ERR_TIMEOUT (the target may not progress).
  std::chrono::milliseconds post_timeout{30000};
  // How long the destructor waits to flush unflushed writes and to close each endpoint.
  std::chrono::milliseconds close_timeout{5000};
  // Every write source and every region this transport exposes is host memory, so mapped peer
  // regions may be written with CPU copies. false (device memory with a UCX that handles CUDA):
  // every write is a UCX put, and this transport's descriptors tell writers never to map them.
  bool host_memory_only = true;
};

// A UCX context (RMA feature, configured from UCX's UCX_* environment) with one worker in
// UCS_THREAD_MODE_MULTI. UNSUPPORTED when UCX cannot give that thread mode.
Result<std::unique_ptr<WriteTransport>> createUcxTransport(const UcxTransportOptions& options = {});

// Descriptor extensions: bytes that a backend built on this one (the staged UCX backend) appends
// to one of this backend's memory descriptors for its own writers. attach() accepts and ignores
// them, so plain UCX writers can still attach the memory.
std::vector<uint8_t> withDescriptorExtension(const std::vector<uint8_t>& descriptor,
                                             const std::vector<uint8_t>& extension);
// The extension of a UCX memory descriptor; empty when it has none or is malformed.
std::vector<uint8_t> descriptorExtension(const std::vector<uint8_t>& descriptor);

}  // namespace wsync

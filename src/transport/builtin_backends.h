// The backends of this build, defined in builtin_backends.cc, which CMake generates from the
// backend folders' registrations (wsync_transport_backend in transport/CMakeLists.txt).
#pragma once

#include <vector>

#include "transport/backend.h"

namespace wsync {

std::vector<const WriteBackend*> builtinWriteBackends();
std::vector<const BroadcastBackend*> builtinBroadcastBackends();

}  // namespace wsync

#include "common/status.h"

namespace wsync {

std::string Status::toString() const {
  std::string s = wsync_status_string(code_);
  if (!message_.empty()) s += ": " + message_;
  return s;
}

}  // namespace wsync

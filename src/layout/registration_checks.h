// Checks of what a registration claims, done where it enters (wsync_register_buffer on the rank,
// the coordinator's decoding of every rank's registration) and before anything is sized by it.
// All arithmetic is overflow-safe: a box at offset INT64_MAX or a [2^32, 2^32] tensor is an
// INVALID_ARGUMENT naming the tensor and the offending field, never a wrapped-around size.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "layout/registration.h"

namespace wsync {

// The most elements a tensor or a buffer may have (2^56: its bytes, at 8 per element, fit int64).
inline constexpr int64_t kMaxRegisteredElements = int64_t{1} << 56;

// `tensor`'s global shape: rank in [0, kMaxRank], every dimension > 0, at most
// kMaxRegisteredElements elements.
Status checkTensorDecl(const TensorDecl& tensor);

// One piece of a buffer of `num_elements` elements holding part of `tensor`: ranks agree, the
// box lies inside the global shape, the strides are non-negative with an innermost 1, and every
// element of the box lands inside the buffer. `where` (e.g. "buffer 'w'") prefixes the message.
Status checkPiece(const TensorDecl& tensor, const Piece& piece, int64_t num_elements,
                  const std::string& where);

// Every tensor and every piece of `reg` (tensor indices in range, buffer sizes bounded).
Status checkRegistration(const Registration& reg);

}  // namespace wsync

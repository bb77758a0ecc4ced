/* wsync: weight synchronization from RL trainers to rollout engines. The public C API.
 * This file is filled by the end-to-end work; for now it carries the shared types. */
#ifndef WSYNC_WSYNC_H_
#define WSYNC_WSYNC_H_

#include "wsync/wsync_types.h"

#endif /* WSYNC_WSYNC_H_ */

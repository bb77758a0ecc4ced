# The broadcast backend rule (MPI for host jobs, NCCL for device jobs on distinct GPUs, writes
# otherwise) and the coordinator's NCCL world in its plan assignments.
wsync_add_unit_test(wsync_broadcast_backend_test ${CMAKE_CURRENT_LIST_DIR}/broadcast_backend_test.cc)

# The NCCL broadcaster's bucketing plan (host logic in transport/nccl/nccl_broadcaster.h): built
# wherever the NCCL backend is (a CUDA build; no GPU needed to run it).
if(TARGET wsync_transport_nccl)
  wsync_add_unit_test(wsync_nccl_bucketing_test ${CMAKE_CURRENT_LIST_DIR}/nccl_bucketing_test.cc)
endif()

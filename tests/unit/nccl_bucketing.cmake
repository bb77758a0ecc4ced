# The NCCL broadcaster's bucketing plan (header-only host logic): runs in every build, GPU or not.
wsync_add_unit_test(wsync_nccl_bucketing_test ${CMAKE_CURRENT_LIST_DIR}/nccl_bucketing_test.cc)

# The coordinator protocol's message codecs (round trips, truncation, NCCL world checks).
wsync_add_unit_test(wsync_protocol_test ${CMAKE_CURRENT_LIST_DIR}/protocol_test.cc)

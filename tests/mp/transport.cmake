# WriteTransport conformance: 2 ranks, rank 1 exposes memory and rank 0 writes into it.
add_executable(wsync_write_transport_conformance_test
  ${CMAKE_CURRENT_LIST_DIR}/write_transport_conformance_test.cc)
target_link_libraries(wsync_write_transport_conformance_test
  PRIVATE wsync_core wsync_test_support GTest::gtest)
wsync_add_mpi_test(wsync_transport_conformance 2 wsync_write_transport_conformance_test)

# Issue 12 defects that need real MPI jobs.
if(TARGET wsync)
  add_executable(wsync_ready_contract_test ${CMAKE_CURRENT_LIST_DIR}/ready_contract_test.cc)
  target_link_libraries(wsync_ready_contract_test PRIVATE wsync wsync_test_support GTest::gtest wsync_mpi)
  wsync_add_mpi_test(wsync_ready_contract 3 wsync_ready_contract_test)
endif()

wsync_add_unit_test(wsync_fd_exchange_test
  ${CMAKE_CURRENT_LIST_DIR}/fd_exchange_test.cc)

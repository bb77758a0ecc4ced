# A hostile client against a real standalone wsync-coordinator whose job streams versions (label
# fault): floods, garbage, truncated and oversized frames, missing and wrong secrets, while a
# replica joins; the job stays bit-exact and the coordinator's memory flat. See run_hostile.sh.
if(TARGET wsync-fault-rank)
  add_executable(wsync-hostile-client ${CMAKE_CURRENT_LIST_DIR}/hostile_client.cc)
  target_link_libraries(wsync-hostile-client PRIVATE wsync_control wsync_test_support
                                                     cxxopts::cxxopts)
  if(TARGET PkgConfig::CPP_HTTPLIB)
    target_link_libraries(wsync-hostile-client PRIVATE PkgConfig::CPP_HTTPLIB)
    target_compile_definitions(wsync-hostile-client PRIVATE WSYNC_HOSTILE_HAVE_HTTPLIB=1)
  endif()
  # The coordinator's resident memory may grow by at most 2 MiB after the warm-up while tens of
  # thousands of connections are refused (< 50 bytes each). Under AddressSanitizer freed memory
  # sits in its quarantine, so there the growth is printed, not checked.
  set(hostile_rss_growth_kib 2048)
  if(WSYNC_SANITIZE)
    set(hostile_rss_growth_kib -1)
  endif()
  add_test(NAME wsync_fault_hostile_client
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/run_hostile.sh $<TARGET_FILE:wsync-coordinator>
            $<TARGET_FILE:wsync-fault-rank> $<TARGET_FILE:wsync-hostile-client> 12
            ${hostile_rss_growth_kib})
  set_tests_properties(wsync_fault_hostile_client PROPERTIES LABELS "fault;mp" TIMEOUT 300
                                                             PROCESSORS 2)
endif()

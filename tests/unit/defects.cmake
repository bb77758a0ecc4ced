# Regression tests for defects found by an outside probe (issue 12): bounds checked at the call.
wsync_add_unit_test(wsync_defects_test ${CMAKE_CURRENT_LIST_DIR}/defects_test.cc)
target_link_libraries(wsync_defects_test PRIVATE wsync)
# The same, for defects that need a running job (in-process coordinator, ranks on threads).
wsync_add_unit_test(wsync_defects_job_test ${CMAKE_CURRENT_LIST_DIR}/defects_job_test.cc)
target_link_libraries(wsync_defects_job_test PRIVATE wsync)

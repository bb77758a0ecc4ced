# Planning a peer cold start (plan/replica_plan.h, makeColdFillPlan), checked element by element
# with the reference executor.
wsync_add_unit_test(wsync_cold_fill_plan_test ${CMAKE_CURRENT_LIST_DIR}/cold_fill_plan_test.cc)
target_link_libraries(wsync_cold_fill_plan_test PRIVATE wsync_reference_executor)

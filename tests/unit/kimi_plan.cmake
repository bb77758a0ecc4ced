# The planner on the Kimi-K2 layout of the model zoo (benchmarks/, target wsync_model_zoo): its plan's
# counts, bytes and a hash of every write op are pinned, so that planner speedups keep it identical.
if(TARGET wsync_model_zoo)
  wsync_add_unit_test(wsync_kimi_plan_test ${CMAKE_CURRENT_LIST_DIR}/kimi_plan_test.cc)
  target_link_libraries(wsync_kimi_plan_test PRIVATE wsync_model_zoo)
endif()

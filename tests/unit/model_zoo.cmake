# The model zoo and its layouts live in benchmarks/ (target wsync_model_zoo), built when
# WSYNC_BUILD_BENCHMARKS is on.
if(TARGET wsync_model_zoo)
  wsync_add_unit_test(wsync_model_zoo_test ${CMAKE_CURRENT_LIST_DIR}/model_zoo_test.cc)
  target_link_libraries(wsync_model_zoo_test PRIVATE wsync_model_zoo)
endif()

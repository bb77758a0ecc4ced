# The cluster model lives in benchmarks/cluster_model/ (target wsync_cluster_model), built when
# WSYNC_BUILD_BENCHMARKS is on.
if(TARGET wsync_cluster_model)
  wsync_add_unit_test(wsync_cluster_model_test ${CMAKE_CURRENT_LIST_DIR}/cluster_model_test.cc)
  target_link_libraries(wsync_cluster_model_test PRIVATE wsync_cluster_model)
endif()

# The cluster model lives in benchmarks/cluster_model/ (target wsync_cluster_model), built when
# WSYNC_BUILD_BENCHMARKS is on.
if(TARGET wsync_cluster_model)
  wsync_add_unit_test(wsync_cluster_model_test ${CMAKE_CURRENT_LIST_DIR}/cluster_model_test.cc)
  target_link_libraries(wsync_cluster_model_test PRIVATE wsync_cluster_model)
endif()

# The model against real jobs: network namespaces joined by tc-limited veth links (root; skipped
# with 77 where namespaces cannot be created), two shapes, measured within 15% of the prediction.
# Label `cluster` only: it is bandwidth-bound by design and stays out of the sanitizer stages.
if(TARGET wsync-cluster-rank AND TARGET wsync-cluster-model)
  add_test(NAME wsync_cluster_validate
           COMMAND bash ${PROJECT_SOURCE_DIR}/benchmarks/cluster_validate.sh ${PROJECT_BINARY_DIR}
                   single a)
  set_tests_properties(wsync_cluster_validate PROPERTIES
    ENVIRONMENT "MAX_RATIO_ERROR=0.15;VERSIONS=3" SKIP_RETURN_CODE 77 LABELS cluster
    TIMEOUT 300 RUN_SERIAL TRUE)
endif()

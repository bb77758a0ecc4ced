# Soak (label fault): 2 trainers -> 2 one-rank replicas under mpirun with wsync-coordinator as its
# own process, host memory, checksums on (every version's checksums equal on every rollout: no
# failure, no re-send), every version verified on every rollout, resident memory of every
# process (the coordinator's through /metrics) flat after warm-up. ctest runs 2,000 versions;
# tests/fault/soak.sh runs 10,000.
if(TARGET wsync AND TARGET wsync-coordinator)
  add_executable(wsync_soak_test ${CMAKE_CURRENT_LIST_DIR}/soak_test.cc)
  target_link_libraries(wsync_soak_test PRIVATE wsync wsync_mpi)
  set(soak_metrics_port 0)
  if(TARGET wsync_metrics_http)
    target_link_libraries(wsync_soak_test PRIVATE PkgConfig::CPP_HTTPLIB)
    target_compile_definitions(wsync_soak_test PRIVATE WSYNC_HAVE_METRICS_HTTP=1)
    set(soak_metrics_port 19464)
  endif()
  add_test(NAME wsync_soak_2000_versions
    COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --mca btl self,vader
            -n 1 $<TARGET_FILE:wsync-coordinator> --mpi --quiet --max-staleness 0 --checksums
                 --metrics-port ${soak_metrics_port}
            : -n 4 $<TARGET_FILE:wsync_soak_test> --versions 2000 --warmup 500
                 --metrics-port ${soak_metrics_port})
  set_tests_properties(wsync_soak_2000_versions PROPERTIES LABELS fault TIMEOUT 120 PROCESSORS 2)
endif()

# The coordinator's metrics (coordinator/metrics.h) fed by a real version sequencer, the Delivered
# stats codec, the bytes a plan delivers per replica and the Prometheus text.
wsync_add_unit_test(wsync_metrics_test ${CMAKE_CURRENT_LIST_DIR}/metrics_test.cc)

# A real in-process job (explicit bootstrap, UCX writes) whose /metrics is scraped over HTTP.
if(TARGET wsync_metrics_http AND TARGET wsync)
  wsync_add_unit_test(wsync_metrics_job_test ${CMAKE_CURRENT_LIST_DIR}/metrics_job_test.cc)
  target_link_libraries(wsync_metrics_job_test PRIVATE wsync wsync_metrics_http PkgConfig::CPP_HTTPLIB)
endif()

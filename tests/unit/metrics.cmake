# The coordinator's metrics (coordinator/metrics.h) fed by a real version sequencer, the Delivered
# stats codec, the bytes a plan delivers per replica and the Prometheus text.
wsync_add_unit_test(wsync_metrics_test ${CMAKE_CURRENT_LIST_DIR}/metrics_test.cc)

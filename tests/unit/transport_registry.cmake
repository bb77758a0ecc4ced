# The registry's choice of a target backend from the device-transport option (an enum; each
# descriptor says which choices it serves). No GPU needed: descriptors and error paths only.
wsync_add_unit_test(wsync_transport_registry_test
  ${CMAKE_CURRENT_LIST_DIR}/transport_registry_test.cc)

# WSYNC_SANITIZE="address;undefined" or "thread": instrument every target of this project.
if(WSYNC_SANITIZE)
  string(REPLACE ";" "," _wsync_sanitizers "${WSYNC_SANITIZE}")
  message(STATUS "wsync: sanitizers ${_wsync_sanitizers}")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=${_wsync_sanitizers}>
                      $<$<COMPILE_LANGUAGE:CXX,C>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX,C>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${_wsync_sanitizers})
endif()

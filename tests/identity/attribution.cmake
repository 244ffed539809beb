# Socket attribution: sock_diag, cookie registry, holder search, attribute.
tether_unit_test(attr_cookies SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/attr_cookies.c
                 LIBS tether_identity)
tether_c_test(attr_sockdiag LABEL integration
              SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/attr_sockdiag.c
              LIBS tether_identity TIMEOUT 30)
tether_c_test(attr_attribution LABEL integration
              SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/attr_attribution.c
              LIBS tether_identity TIMEOUT 60)
# The same program with every kernel feature forced to its fallback
# (pid + start_time keys, procfs instead of PIDFD_GET_INFO).
add_test(NAME attr_attribution_fallback COMMAND attr_attribution)
set_tests_properties(attr_attribution_fallback PROPERTIES LABELS integration TIMEOUT 60
  ENVIRONMENT "TETHER_FORCE_FALLBACK=all;TETHER_BIN=${CMAKE_BINARY_DIR}/bin;TETHER_SRC=${CMAKE_SOURCE_DIR}")

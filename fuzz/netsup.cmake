# net-supervisor: the proxy request parser.
tether_fuzz_target(fuzz_http SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_http.c LIBS tether_netsup)
# the corporate upstream proxy's reply parser and no-upstream list
tether_fuzz_target(fuzz_upstream SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_upstream.c LIBS tether_netsup)
# net-supervisor: the transparent flow's peek (TLS SNI, HTTP Host).
tether_fuzz_target(fuzz_flowpeek SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_flowpeek.c LIBS tether_netsup)
# the request gate of inspected TLS connections (tls_http.h)
tether_fuzz_target(fuzz_tls_http SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_tls_http.c LIBS tether_netsup)
# credential placeholder substitution in request heads (credsub.h)
tether_fuzz_target(fuzz_credsub SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_credsub.c LIBS tether_netsup)
# HTTP/2 inside inspected TLS connections (tls_h2.h)
tether_fuzz_target(fuzz_tls_h2 SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_tls_h2.c LIBS tether_netsup)

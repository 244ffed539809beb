# Identity strategies of the net-supervisor (local, delegated), against
# real processes, and against the real proc-side identity service.
foreach(h ident_anchor ident_workload)
  add_executable(${h} ${h}.c)
  set_target_properties(${h} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
endforeach()

tether_c_test(test_ident_local LABEL integration SOURCES test_ident_local.c
  LIBS tether_netsup tether_policy tether_launcher PkgConfig::SODIUM TIMEOUT 90)
add_dependencies(test_ident_local ident_anchor ident_workload)
add_test(NAME test_ident_local_fallback COMMAND test_ident_local)
set_tests_properties(test_ident_local_fallback PROPERTIES LABELS integration TIMEOUT 90
  ENVIRONMENT "TETHER_FORCE_FALLBACK=all")

# The local strategy's verified-flow cache: every change invalidates it.
tether_c_test(test_ident_local_cache LABEL integration SOURCES test_ident_local_cache.c cmd_tree.c
  LIBS tether_netsup PkgConfig::SODIUM TIMEOUT 60)
set_tests_properties(test_ident_local_cache PROPERTIES SKIP_RETURN_CODE 77)
add_dependencies(test_ident_local_cache ident_workload)
add_test(NAME test_ident_local_cache_fallback COMMAND test_ident_local_cache)
set_tests_properties(test_ident_local_cache_fallback PROPERTIES LABELS integration TIMEOUT 60
  SKIP_RETURN_CODE 77 ENVIRONMENT "TETHER_FORCE_FALLBACK=all")
# Every flow through the thread pool: the same cases where the loop answers none.
add_test(NAME test_ident_local_cache_pool COMMAND test_ident_local_cache --pool-only)
set_tests_properties(test_ident_local_cache_pool PROPERTIES LABELS integration TIMEOUT 60
  SKIP_RETURN_CODE 77)

tether_c_test(test_ident_delegated LABEL integration SOURCES test_ident_delegated.c
  LIBS tether_netsup PkgConfig::SODIUM TIMEOUT 60)

# Against the real proc-side identity service (proc-supervisor/idservice.c).
tether_c_test(test_ident_idservice LABEL integration SOURCES test_ident_idservice.c
  LIBS tether_netsup tether_procsup PkgConfig::SODIUM TIMEOUT 60)
add_dependencies(test_ident_idservice ident_workload)
# Its pinned-chain cache: every change makes it walk again.
tether_c_test(test_ident_idservice_chain LABEL integration SOURCES test_ident_idservice_chain.c cmd_tree.c
  LIBS tether_netsup tether_procsup PkgConfig::SODIUM TIMEOUT 60)
set_tests_properties(test_ident_idservice_chain PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME test_ident_idservice_chain_fallback COMMAND test_ident_idservice_chain)
set_tests_properties(test_ident_idservice_chain_fallback PROPERTIES LABELS integration TIMEOUT 60
  SKIP_RETURN_CODE 77 ENVIRONMENT "TETHER_FORCE_FALLBACK=all")

# The daemon end to end with --identity local / delegated.
tether_script_test(test_netsup_identity LABEL integration SCRIPT test_netsup_identity.sh TIMEOUT 60)

# Connect-time identity: the proc-supervisor's identity feed read by the
# local strategy (fast path, forced fallback, an inherited socket, a forged feed).
tether_script_test(test_identity_feed LABEL integration SCRIPT test_identity_feed.sh TIMEOUT 120)
# Its reader and wire format alone: table, waits, eviction, a malformed
# line, a peer that is not the anchor, the decoder's refusals.
tether_c_test(test_identity_feed_table LABEL unit SOURCES test_identity_feed_table.c LIBS tether_netsup TIMEOUT 60)
set_tests_properties(test_identity_feed_table PROPERTIES SKIP_RETURN_CODE 77)

# Connect-time identity pushes (protocol 1.3) against a stand-in proc side
# that pushes by hand: fast path, waited push, fallback (no push / late /
# disabled), refused pushes (bad MAC, foreign nonce, wrong tuple, replay).
tether_c_test(test_ident_push LABEL integration SOURCES test_ident_push.c
  LIBS tether_netsup PkgConfig::SODIUM TIMEOUT 60)

# identity lineage: member table, ancestry walk, tether inspect (h2lineage).
# Every test also runs with TETHER_FORCE_FALLBACK=all (no pidfs inode, no
# PIDFD_GET_INFO, no cgroup v2): the *_fallback variants.
set(_lin ${CMAKE_CURRENT_LIST_DIR})

function(lineage_fallback_variant name)
  get_test_property(${name} ENVIRONMENT _env)
  if(ARGN)
    add_test(NAME ${name}_fallback COMMAND ${ARGN})
  else()
    add_test(NAME ${name}_fallback COMMAND ${name})
  endif()
  get_test_property(${name} LABELS _labels)
  get_test_property(${name} TIMEOUT _timeout)
  set_tests_properties(${name}_fallback PROPERTIES LABELS "${_labels}" TIMEOUT ${_timeout})
  if(_env)
    set_tests_properties(${name}_fallback PROPERTIES ENVIRONMENT "${_env}")
  endif()
  set_property(TEST ${name}_fallback APPEND PROPERTY ENVIRONMENT TETHER_FORCE_FALLBACK=all)
endfunction()

tether_unit_test(lineage_unit SOURCES ${_lin}/lineage_unit.c LIBS tether_identity TIMEOUT 30)
lineage_fallback_variant(lineage_unit)

foreach(t daemonize adopted vminit vanished pidreuse)
  tether_c_test(lineage_${t} LABEL integration SOURCES ${_lin}/lineage_${t}.c
                LIBS tether_identity TIMEOUT 30)
  lineage_fallback_variant(lineage_${t})
endforeach()

tether_script_test(lineage_inspect LABEL integration SCRIPT lineage_inspect.sh TIMEOUT 30)
lineage_fallback_variant(lineage_inspect bash ${_lin}/lineage_inspect.sh)

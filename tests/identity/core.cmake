# identity core: procfs parsers, ProcessRef, exe verification (h1core).
tether_unit_test(core_procfs SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_procfs.c
                 LIBS tether_identity)
tether_c_test(core_procref LABEL integration
              SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_procref.c
              LIBS tether_identity TIMEOUT 60)
tether_c_test(core_pidreuse LABEL integration
              SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_pidreuse.c
              LIBS tether_identity TIMEOUT 60)
tether_c_test(core_exe LABEL integration
              SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_exe.c
              LIBS tether_identity PkgConfig::UV TIMEOUT 60)
tether_c_test(core_procfs_pidns LABEL integration
              SOURCES ${CMAKE_CURRENT_LIST_DIR}/core_procfs_pidns.c
              LIBS tether_identity TIMEOUT 30)

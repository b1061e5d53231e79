include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
get_property(kevo_targets GLOBAL PROPERTY KEVO_EXPORTED_TARGETS)
install(TARGETS ${kevo_targets} kevo_warnings EXPORT kevoTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(KEVO_WITH_MPI)
  install(DIRECTORY include/kevo DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
else()  # no kevo_mpi library: no kevo/mpi headers either
  install(DIRECTORY include/kevo DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} PATTERN "mpi" EXCLUDE PATTERN "mpi.hpp" EXCLUDE)
endif()
if(EXISTS "${PROJECT_SOURCE_DIR}/targets")
  install(DIRECTORY targets/ DESTINATION ${CMAKE_INSTALL_DATADIR}/kevo/targets)
endif()
install(EXPORT kevoTargets NAMESPACE kevo:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kevo)
configure_package_config_file(cmake/kevoConfig.cmake.in
  "${PROJECT_BINARY_DIR}/kevoConfig.cmake"
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kevo)
write_basic_package_version_file("${PROJECT_BINARY_DIR}/kevoConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/kevoConfig.cmake" "${PROJECT_BINARY_DIR}/kevoConfigVersion.cmake"
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kevo)

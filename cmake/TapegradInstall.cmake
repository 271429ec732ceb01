# install() + export so that another project can find_package(tapegrad) and link tapegrad::tapegrad.
# tests/downstream proves it (ctest case "downstream_find_package").
include(CMakePackageConfigHelpers)

# The library and the components that need nothing more (tapegrad::plot, tapegrad::program): one export set,
# so find_package(tapegrad) defines all three; a project links the ones it uses.
install(TARGETS tapegrad tapegrad_plot tapegrad_program EXPORT tapegradTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The public headers (cmake/TapegradHeaders.cmake) under include/tapegrad/, the umbrella header, and the
# headers of tapegrad::plot and tapegrad::program (include/tapegrad/train/plot/, .../train/program/).
foreach(h IN LISTS TAPEGRAD_PUBLIC_HEADERS TAPEGRAD_PLOT_HEADERS TAPEGRAD_PROGRAM_HEADERS)
  get_filename_component(dir ${h} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tapegrad/${dir})
endforeach()
install(FILES ${TAPEGRAD_UMBRELLA} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tapegrad)

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/tapegrad)
# tapegrad::mpi in an export set of its own, which the package loads only for find_package(tapegrad
# COMPONENTS mpi): a project that does not ask for it needs no MPI.
if(TAPEGRAD_HAVE_MPI)
  install(TARGETS tapegrad_mpi EXPORT tapegradMpiTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  foreach(h IN LISTS TAPEGRAD_MPI_HEADERS)
    get_filename_component(dir ${h} DIRECTORY)
    install(FILES ${PROJECT_SOURCE_DIR}/${h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tapegrad/${dir})
  endforeach()
  install(EXPORT tapegradMpiTargets NAMESPACE tapegrad:: DESTINATION ${config_dir})
endif()
install(EXPORT tapegradTargets NAMESPACE tapegrad:: DESTINATION ${config_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tapegradConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tapegradConfig.cmake INSTALL_DESTINATION ${config_dir})
# Semantic versioning from 1.0 (CHANGELOG.md): a 1.x release adds to 1.0 and breaks nothing of it, so
# find_package(tapegrad 1.0) takes any 1.x, and never a 2.0.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tapegradConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tapegradConfig.cmake ${PROJECT_BINARY_DIR}/tapegradConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/TapegradLibxsmm.cmake DESTINATION ${config_dir})

# libxsmm (Debian's libxsmm-dev ships static archives): defines tapegrad_libxsmm, an interface target
# that links libxsmm and then libxsmmnoblas (its BLAS stand-ins, which libxsmm's objects call, so they
# must come after it; pkg-config would list them before). Sets TAPEGRAD_LIBXSMM_FOUND.
set(TAPEGRAD_LIBXSMM_FOUND FALSE)
find_path(TAPEGRAD_LIBXSMM_INCLUDE libxsmm.h)
find_library(TAPEGRAD_LIBXSMM_LIB NAMES libxsmm.a xsmm)
find_library(TAPEGRAD_LIBXSMM_NOBLAS_LIB NAMES libxsmmnoblas.a xsmmnoblas)
if(TAPEGRAD_LIBXSMM_INCLUDE AND TAPEGRAD_LIBXSMM_LIB AND TAPEGRAD_LIBXSMM_NOBLAS_LIB)
  find_package(Threads REQUIRED)
  if(NOT TARGET tapegrad_libxsmm)
    add_library(tapegrad_libxsmm INTERFACE IMPORTED)
    set_target_properties(tapegrad_libxsmm PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${TAPEGRAD_LIBXSMM_INCLUDE}"
      INTERFACE_LINK_LIBRARIES "${TAPEGRAD_LIBXSMM_LIB};${TAPEGRAD_LIBXSMM_NOBLAS_LIB};Threads::Threads;${CMAKE_DL_LIBS};rt;m")
  endif()
  set(TAPEGRAD_LIBXSMM_FOUND TRUE)
endif()

# Install rules (included at the end of the top-level CMakeLists.txt).
#
# Two layouts from the same rules:
# - `cmake --install build --prefix P` (C and C++ users, distribution packages): P/include/mlajit/*.h,
#   P/<libdir>/libmlajit.so -> .so.<SOVERSION> -> .so.<VERSION>, P/bin/mlajit-warmup,
#   P/<libdir>/cmake/mlajit/ (find_package(mlajit) -> mlajit::mlajit, with a version file) and
#   P/<libdir>/pkgconfig/mlajit.pc. Every file is relocatable: nothing records the configure-time prefix,
#   so `--prefix` chosen at install time works.
# - a pip build (scikit-build-core defines SKBUILD; pyproject.toml sets the install dir to the Python
#   package's folder and CMAKE_INSTALL_LIBDIR=lib): the same tree inside site-packages/mlajit/, except that
#   the library is one file without SONAME symlinks (a wheel is a zip: symlinks would become copies).
# The installed library needs no source tree: the kernel templates are embedded (embed_kernels.cmake).
include(CMakePackageConfigHelpers)

if(DEFINED SKBUILD)
  set(MLAJIT_INSTALL_SONAME_LINKS OFF)
else()
  set(MLAJIT_INSTALL_SONAME_LINKS ON)
endif()

if(MLAJIT_INSTALL_SONAME_LINKS)
  # 0.x: a minor release may change the ABI (the struct_size scheme makes additions compatible, but 0.x
  # keeps the right to break), so the SONAME carries major.minor; from 1.0 on, the major alone.
  if(PROJECT_VERSION_MAJOR EQUAL 0)
    set(MLAJIT_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  else()
    set(MLAJIT_SOVERSION ${PROJECT_VERSION_MAJOR})
  endif()
  set_target_properties(mlajit PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${MLAJIT_SOVERSION})
endif()

set(MLAJIT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/mlajit)

install(TARGETS mlajit EXPORT mlajitTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT development
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/mlajit/mlajit.h ${CMAKE_SOURCE_DIR}/include/mlajit/mlajit.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mlajit COMPONENT development)
if(TARGET mlajit-warmup)
  # Exported too (mlajit::mlajit-warmup), so a project can warm its kernel cache as a build step.
  install(TARGETS mlajit-warmup EXPORT mlajitTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
endif()

install(EXPORT mlajitTargets NAMESPACE mlajit:: DESTINATION ${MLAJIT_INSTALL_CMAKEDIR} COMPONENT development)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/mlajitConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/generated/mlajitConfig.cmake
                              INSTALL_DESTINATION ${MLAJIT_INSTALL_CMAKEDIR})
# 0.x: only the same minor is compatible (see MLAJIT_SOVERSION); from 1.0 on, the same major.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_mlajit_compat SameMinorVersion)
else()
  set(_mlajit_compat SameMajorVersion)
endif()
write_basic_package_version_file(${CMAKE_BINARY_DIR}/generated/mlajitConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY ${_mlajit_compat})
install(FILES ${CMAKE_BINARY_DIR}/generated/mlajitConfig.cmake ${CMAKE_BINARY_DIR}/generated/mlajitConfigVersion.cmake
        DESTINATION ${MLAJIT_INSTALL_CMAKEDIR} COMPONENT development)

# pkg-config: the prefix is found relative to the .pc file (${pcfiledir}), so the file stays right for
# any --prefix given at install time and inside a relocated wheel.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(MLAJIT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(MLAJIT_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH _mlajit_pc_up "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
  string(REGEX REPLACE "/$" "" _mlajit_pc_up "${_mlajit_pc_up}")
  set(MLAJIT_PC_PREFIX "\${pcfiledir}/${_mlajit_pc_up}")
  set(MLAJIT_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(MLAJIT_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(MLAJIT_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${CMAKE_SOURCE_DIR}/cmake/mlajit.pc.in ${CMAKE_BINARY_DIR}/generated/mlajit.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/generated/mlajit.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT development)

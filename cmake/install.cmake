# Install rules (cmake --install BUILD_DIR [--prefix DIR]), with the GNU
# layout: the three programs in bin/, ticketing.h in include/,
# libticketing.so (with its soname links) and libticketing.a in lib/ (the
# platform's libdir), pkg-config's ticketing.pc and the CMake package
# (find_package(ticketing): ticketing::ticketing, the shared library, and
# ticketing::ticketing_static) under it, the shell completions of ticketctl
# and the LICENSE. The internal libraries (tk_core, tk_net, ...) are not
# installed: libticketing.a holds every core object it needs.
#
# Two components: Runtime (the programs, the completions and the LICENSE:
# what a server or an operator's machine needs; the container image is
# built from it) and Development (everything for building against
# libticketing). `cmake --install` without --component installs both.
include(CMakePackageConfigHelpers)

set(TK_INSTALL_PROGRAMS ticketingd ticketctl)
if(TARGET ticketing-bench)
  list(APPEND TK_INSTALL_PROGRAMS ticketing-bench)
endif()
install(TARGETS ${TK_INSTALL_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        COMPONENT Runtime)
install(FILES ${CMAKE_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT Runtime)

install(TARGETS ticketing_shared EXPORT ticketingTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Development)
install(TARGETS ticketing_static EXPORT ticketingStaticTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Development)
install(FILES ${CMAKE_SOURCE_DIR}/client/ticketing.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT Development)

# The CMake package. The shared library's targets need nothing else; the
# static library's need wolfSSL, which ticketingConfig.cmake finds with
# pkg-config first (so a project using only the shared library does not
# need wolfSSL's development files).
set(TK_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ticketing)
install(EXPORT ticketingTargets NAMESPACE ticketing:: DESTINATION ${TK_CMAKE_DIR}
        COMPONENT Development)
install(EXPORT ticketingStaticTargets NAMESPACE ticketing:: DESTINATION ${TK_CMAKE_DIR}
        COMPONENT Development)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/ticketingConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/ticketingConfig.cmake
                              INSTALL_DESTINATION ${TK_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ticketingConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ticketingConfig.cmake
              ${CMAKE_BINARY_DIR}/ticketingConfigVersion.cmake DESTINATION ${TK_CMAKE_DIR}
        COMPONENT Development)

# pkg-config. The prefix is found from the .pc file's own place, so the file
# stays right under any `cmake --install --prefix`.
if(IS_ABSOLUTE ${CMAKE_INSTALL_LIBDIR})
  message(FATAL_ERROR "CMAKE_INSTALL_LIBDIR must be relative to the prefix")
endif()
set(TK_PC_PREFIX "\${pcfiledir}")
string(REPLACE "/" ";" tk_parts "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
foreach(tk_part ${tk_parts})
  string(APPEND TK_PC_PREFIX "/..")
endforeach()
configure_file(${CMAKE_SOURCE_DIR}/cmake/ticketing.pc.in ${CMAKE_BINARY_DIR}/ticketing.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/ticketing.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT Development)

# Shell completions of ticketctl, where the tree has them.
if(EXISTS ${CMAKE_SOURCE_DIR}/client/completion/ticketctl.bash)
  install(FILES ${CMAKE_SOURCE_DIR}/client/completion/ticketctl.bash
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/bash-completion/completions RENAME ticketctl
          COMPONENT Runtime)
endif()
if(EXISTS ${CMAKE_SOURCE_DIR}/client/completion/_ticketctl)
  install(FILES ${CMAKE_SOURCE_DIR}/client/completion/_ticketctl
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/zsh/site-functions COMPONENT Runtime)
endif()

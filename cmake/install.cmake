# Install rules (README "Installation"): `cmake --install BUILD [--prefix P]`,
# `make install PREFIX=P DESTDIR=D` and debian/rules all come through here.
#   bin/kvrouter                      the service and tools
#   lib/libkvrouter.so.MAJOR(.MINOR.PATCH), libkvrouter.so, libkvrouter.a
#   include/kvrouter/*.h              the public API (version.h generated)
#   lib/pkgconfig/kvrouter.pc         for gateways: pkg-config --cflags --libs kvrouter
#   share/man/man1/kvrouter.1         kvrouter(1)
#   lib/systemd/system/kvrouter.service (KVR_SYSTEMD_UNITDIR)
#   etc/kvrouter/kvrouter.json        default config, never overwritten
set(KVR_SYSTEMD_UNITDIR "lib/systemd/system" CACHE STRING
    "systemd system unit directory (relative: under the install prefix)")

install(TARGETS kvrouter RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS kvrouter_shared kvrouter_static
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${KVR_PUBLIC_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvrouter)
install(FILES ${CMAKE_SOURCE_DIR}/dist/kvrouter.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

# kvrouter.pc, the unit and the config name install paths, so they are written
# at install time from the prefix of that install (`cmake --install --prefix P`
# must not leave the configure-time prefix in them).
install(CODE "
  set(KVR_SOURCE_DIR \"${CMAKE_SOURCE_DIR}\")
  set(KVR_BINARY_DIR \"${CMAKE_BINARY_DIR}\")
  set(KVR_VERSION \"${PROJECT_VERSION}\")
  set(KVR_REL_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(KVR_REL_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(KVR_REL_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(KVR_REL_SYSCONFDIR \"${CMAKE_INSTALL_SYSCONFDIR}\")
  set(KVR_REL_UNITDIR \"${KVR_SYSTEMD_UNITDIR}\")
  include(\"${CMAKE_SOURCE_DIR}/cmake/install_configured.cmake\")
")

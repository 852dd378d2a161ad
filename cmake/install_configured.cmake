# Runs inside `cmake --install` (see cmake/install.cmake): writes kvrouter.pc
# and the systemd unit with this installation's paths and installs them, and
# installs the default config unless one is already there (an operator's
# edited config survives `make install`; dpkg handles its own conffiles).

# A directory variable as an absolute path under CMAKE_INSTALL_PREFIX, which
# here is the install-time prefix. GNUInstallDirs' rule for /usr: its config
# lives in /etc, not /usr/etc.
function(kvr_full_dir out rel)
  if(IS_ABSOLUTE "${rel}")
    set(${out} "${rel}" PARENT_SCOPE)
  elseif(CMAKE_INSTALL_PREFIX STREQUAL "/usr" AND rel STREQUAL "etc")
    set(${out} "/etc" PARENT_SCOPE)
  else()
    set(${out} "${CMAKE_INSTALL_PREFIX}/${rel}" PARENT_SCOPE)
  endif()
endfunction()

set(KVR_PREFIX "${CMAKE_INSTALL_PREFIX}")
kvr_full_dir(KVR_BINDIR "${KVR_REL_BINDIR}")
kvr_full_dir(KVR_LIBDIR "${KVR_REL_LIBDIR}")
kvr_full_dir(KVR_INCLUDEDIR "${KVR_REL_INCLUDEDIR}")
kvr_full_dir(KVR_SYSCONFDIR "${KVR_REL_SYSCONFDIR}")
kvr_full_dir(KVR_UNITDIR "${KVR_REL_UNITDIR}")

set(out "${KVR_BINARY_DIR}/configured")
configure_file("${KVR_SOURCE_DIR}/kvrouter.pc.in" "${out}/kvrouter.pc" @ONLY)
configure_file("${KVR_SOURCE_DIR}/dist/kvrouter.service.in" "${out}/kvrouter.service" @ONLY)
file(INSTALL "${out}/kvrouter.pc" DESTINATION "${KVR_LIBDIR}/pkgconfig")
file(INSTALL "${out}/kvrouter.service" DESTINATION "${KVR_UNITDIR}")

set(config "${KVR_SYSCONFDIR}/kvrouter/kvrouter.json")
if(EXISTS "$ENV{DESTDIR}${config}")
  message(STATUS "Keeping: $ENV{DESTDIR}${config}")
else()
  file(INSTALL "${KVR_SOURCE_DIR}/dist/kvrouter.json" DESTINATION "${KVR_SYSCONFDIR}/kvrouter")
endif()

# Writes OUT, the header src/cli/cmd_version.cpp reports: the commit the tree
# was built from (git describe, "-dirty" with uncommitted changes) and the build
# type. Run at every build; configure_file rewrites OUT only when it changes,
# so a build at the same commit recompiles nothing.
execute_process(COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE DSINFER_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR DSINFER_COMMIT STREQUAL "")
  set(DSINFER_COMMIT "unknown (not built from a git checkout)")
endif()
configure_file("${SOURCE_DIR}/cmake/build_info.h.in" "${OUT}" @ONLY)

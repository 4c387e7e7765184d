# Writes OUT: the commit this tree is built from, as a C++ header -- run at every build
# (cmake -P), so a build after a new commit names it; the header changes only when the
# commit does, so nothing is recompiled otherwise. PFSNET_COMMIT in the environment wins (a
# package built from a tarball, which has no .git); without either: "unknown".
if(DEFINED ENV{PFSNET_COMMIT} AND NOT "$ENV{PFSNET_COMMIT}" STREQUAL "")
  set(commit "$ENV{PFSNET_COMMIT}")
else()
  set(commit "unknown")
  find_program(GIT git)
  if(GIT)
    execute_process(COMMAND ${GIT} -C ${SRC} rev-parse --short=12 HEAD
                    OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc
                    ERROR_QUIET)
    if(rc EQUAL 0 AND NOT head STREQUAL "")
      set(commit "${head}")
      # Tracked files changed since that commit: the build is not of the commit alone.
      execute_process(COMMAND ${GIT} -C ${SRC} status --porcelain --untracked-files=no
                      OUTPUT_VARIABLE changed RESULT_VARIABLE rc ERROR_QUIET)
      if(rc EQUAL 0 AND NOT changed STREQUAL "")
        set(commit "${commit}-dirty")
      endif()
    endif()
  endif()
endif()
string(REGEX REPLACE "[^0-9A-Za-z._-]" "" commit "${commit}")
file(WRITE ${OUT}.tmp "#pragma once\n#define PFSNET_BUILD_COMMIT \"${commit}\"\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)

# Copies the shared libraries an executable resolves to, except those every
# Linux machine with an NVIDIA driver provides (glibc, libstdc++, libgcc, the
# driver), into DEST. Run in script mode after linking build/vpod.
#   cmake -DEXECUTABLE=build/vpod -DDEST=build/lib -P bundle_runtime_deps.cmake
get_filename_component(dest_real ${DEST} REALPATH)
file(GET_RUNTIME_DEPENDENCIES
  EXECUTABLES ${EXECUTABLE}
  RESOLVED_DEPENDENCIES_VAR resolved
  UNRESOLVED_DEPENDENCIES_VAR unresolved
  CONFLICTING_DEPENDENCIES_PREFIX conflict
  PRE_EXCLUDE_REGEXES
    "^ld-linux" "^libc\\.so" "^libm\\.so" "^libdl\\.so" "^libpthread\\.so" "^librt\\.so"
    "^libstdc\\+\\+\\.so" "^libgcc_s\\.so" "^libcuda\\.so" "^linux-vdso"
  POST_EXCLUDE_REGEXES "^/lib64/ld-linux")
if(unresolved)
  message(FATAL_ERROR "unresolved shared libraries of ${EXECUTABLE}: ${unresolved}")
endif()
# A library found both in DEST (an earlier copy, via the $ORIGIN/lib RPATH)
# and on the system: the system one is the source.
foreach(name IN LISTS conflict_FILENAMES)
  foreach(candidate IN LISTS conflict_${name})
    get_filename_component(dir ${candidate} DIRECTORY)
    get_filename_component(dir_real ${dir} REALPATH)
    if(NOT dir_real STREQUAL dest_real)
      list(APPEND resolved ${candidate})
      break()
    endif()
  endforeach()
endforeach()
file(MAKE_DIRECTORY ${DEST})
foreach(lib IN LISTS resolved)
  get_filename_component(dir ${lib} DIRECTORY)
  get_filename_component(dir_real ${dir} REALPATH)
  if(dir_real STREQUAL dest_real)
    continue()  # already in DEST (libvpod.so, earlier copies)
  endif()
  get_filename_component(name ${lib} NAME)
  file(COPY_FILE ${lib} ${DEST}/${name} ONLY_IF_DIFFERENT)
endforeach()

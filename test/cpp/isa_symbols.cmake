# ctest IsaObjectsShareNoSymbols: the objects compiled with ISA flags (file
# names with avx512 / avx2 / amx) must not define weak or unique symbols (inline
# functions or templates with external linkage, e.g. a std:: algorithm or a
# template outside the unnamed namespace). The linker keeps one copy of such
# a symbol for the whole program, possibly the one built with AVX-512
# instructions, which then runs on CPUs without them.
# Usage: cmake -DNM=<nm> -DOBJECTS=<obj1|obj2|...> -P isa_symbols.cmake
string(REPLACE "|" ";" objects "${OBJECTS}")
set(checked 0)
set(bad "")
foreach(obj IN LISTS objects)
  get_filename_component(name "${obj}" NAME)
  if(NOT name MATCHES "avx512|avx2|amx" OR name MATCHES "common")
    continue()
  endif()
  math(EXPR checked "${checked} + 1")
  execute_process(COMMAND "${NM}" -C "${obj}" OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} failed on ${obj}")
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line IN LISTS lines)
    if(line MATCHES "^[0-9a-f]* [WVu] ")
      string(APPEND bad "  ${name}: ${line}\n")
    endif()
  endforeach()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "no ISA object files among: ${OBJECTS}")
endif()
if(bad)
  message(FATAL_ERROR "ISA objects define symbols the linker may share across ISAs:\n${bad}")
endif()
message(STATUS "${checked} ISA object files: no weak or unique symbols")

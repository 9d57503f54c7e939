// Command-line arguments of the C++ micro-benchmarks: a bad value stops the
// run with a message naming it (atoi read "--help" as 0 threads and ran on).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace tct_bench {

// Prints usage and exits 0 when argv[1] is -h or --help.
inline void help_exit(int argc, char** argv, const char* usage) {
  if (argc > 1 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    std::printf("usage: %s\n", usage);
    std::exit(0);
  }
}

// argv[i] as a whole number in [lo, hi] (def when absent); else exits 2
// naming the argument and the value.
inline long int_arg(int argc, char** argv, int i, const char* name, long def, long lo, long hi,
                    const char* usage) {
  if (argc <= i) return def;
  char* end = nullptr;
  const long v = std::strtol(argv[i], &end, 10);
  if (end == argv[i] || *end != '\0' || v < lo || v > hi) {
    std::fprintf(stderr, "error: %s must be a whole number in [%ld, %ld], got '%s'\nusage: %s\n",
                 name, lo, hi, argv[i], usage);
    std::exit(2);
  }
  return v;
}

// argv[i] as a positive number of seconds (def when absent); else exits 2.
inline double seconds_arg(int argc, char** argv, int i, const char* name, double def,
                          const char* usage) {
  if (argc <= i) return def;
  char* end = nullptr;
  const double v = std::strtod(argv[i], &end);
  if (end == argv[i] || *end != '\0' || !(v > 0.0 && v <= 3600.0)) {
    std::fprintf(stderr, "error: %s must be seconds in (0, 3600], got '%s'\nusage: %s\n", name,
                 argv[i], usage);
    std::exit(2);
  }
  return v;
}

// argv[i] as one of the names in choices (def when absent); else exits 2.
inline const char* choice_arg(int argc, char** argv, int i, const char* name, const char* def,
                              std::initializer_list<const char*> choices, const char* usage) {
  if (argc <= i) return def;
  for (const char* c : choices)
    if (std::strcmp(argv[i], c) == 0) return c;
  std::fprintf(stderr, "error: %s must be one of", name);
  for (const char* c : choices) std::fprintf(stderr, " %s", c);
  std::fprintf(stderr, ", got '%s'\nusage: %s\n", argv[i], usage);
  std::exit(2);
}

}  // namespace tct_bench

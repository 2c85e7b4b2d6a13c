/*
** text_fuzz.c: libFuzzer harness for the text functions (csrc/core/text.c):
** clip, label, flatten, bound, repair_utf8. Input: raw bytes, used both as
** remote text as it is and, when it is JSON, as a content array to flatten.
** The checker (fuzz/lua/text_check.lua) requires valid UTF-8 out of every
** function, bound within its limit (the marker included) and cut on a
** character boundary, clip free of control characters and within its limit.
*/
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_open("text_check", NULL);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_run(data, size);
  return 0;
}

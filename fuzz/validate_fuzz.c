/*
** validate_fuzz.c: libFuzzer harness for the output validator (csrc/core/validate.c).
** Input: a schema's JSON text and a value's JSON text, split at the first NUL
** byte (no NUL: the one text is both). The checker (fuzz/lua/validate_check.lua)
** requires validate_output never to raise, to answer in its documented shape,
** to answer the same twice and for the schema written and read again (a
** string is no schema), to agree with a
** Lua model of the subset where the check finished, and to accept the value
** under schemas built from it ({ const = value }, an inferred exact schema).
*/
#include "fuzz_common.h"

/* libFuzzer's setup: the Lua state and the checker, once for the run. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_open("validate_check", NULL);
  return 0;
}

/* One input through the checker; a broken property aborts (fuzz_common.h). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_run(data, size);
  return 0;
}

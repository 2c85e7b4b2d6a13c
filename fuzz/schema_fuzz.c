/*
** schema_fuzz.c: libFuzzer harness for the schema normaliser (csrc/core/schema.c).
** Input: JSON text, decoded with key order as the catalogue decodes a tools/
** list answer. The checker (fuzz/lua/schema_check.lua) runs normalise_schema
** on it (and on its inputSchema, if any), and for every
** accepted schema requires the retained keys only, an ASCII encoding of at
** most 16384 bytes, re-normalisation to the same bytes and a byte-exact round
** trip through the store format (decode_stored_schema).
*/
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_open("schema_check", fz_with_ascii_encode);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_run(data, size);
  return 0;
}

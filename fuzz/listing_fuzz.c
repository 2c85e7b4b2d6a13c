/*
** listing_fuzz.c: differential libFuzzer harness for the text builder
** (csrc/core/decode.c), which writes a listed tool's schemas as JSON text in the
** pass that reads a tools/list page, and for the normaliser's text form
** (csrc/core/schema.c, normalise_schema_text), which reads the kept schema off
** that text. Input: one body as a server might send it, also placed as a
** schema inside a tools/list answer. The checker
** (fuzz/lua/listing_check.lua) holds both to the table paths they replace:
** jansson's decoder, json.encode and the table normaliser.
*/
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_open("listing_check", NULL);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_run(data, size);
  return 0;
}

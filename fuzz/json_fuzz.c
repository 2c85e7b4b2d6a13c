/*
** json_fuzz.c: libFuzzer harness for the JSON codec and the JSON-RPC
** classifier (csrc/core/json.c). Input: one body as a server might send it. The
** checker (fuzz/lua/json_check.lua) decodes it (plain and key-ordered), and
** for anything that decodes requires encode -> decode -> encode to be
** byte-stable in both encodings; rpc_classify must give one of its four
** kinds, agree with decode on what is JSON, and return the same result a
** decode of the whole body holds.
*/
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_open("json_check", fz_with_ascii_encode);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_run(data, size);
  return 0;
}

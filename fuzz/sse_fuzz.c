/*
** sse_fuzz.c: libFuzzer harness for the event-stream decoder (csrc/core/sse.c).
** Input: 4 bytes seeding the chunk sizes, then the stream. The checker
** (fuzz/lua/sse_check.lua) decodes it in one feed, in pseudo-random chunks
** (empty ones included) and with a Lua transcription of the WHATWG rules, and
** requires identical events, last event id and retry from all three.
*/
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_open("sse_check", NULL);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_run(data, size);
  return 0;
}

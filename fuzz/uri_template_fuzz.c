/*
** uri_template_fuzz.c: libFuzzer harness for the URI template expander
** (lua/mcpclient/uri_template.lua, a Lua module the harness's state loads
** from the project's Lua path). Input: a template, then values, separated by
** NUL bytes. The checker (fuzz/lua/uri_template_check.lua) requires expand
** to give a string or a "template" failure and never raise, its output to be
** printable ASCII with every '%' starting a triplet (and only unreserved
** characters, triplets and the operator's own punctuation for the operators
** that do not keep reserved characters), and variables() to name exactly
** the variables expand reads.
*/
#include "fuzz_common.h"

/* libFuzzer's setup: the Lua state and the checker, once for the run. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_open("uri_template_check", NULL);
  return 0;
}

/* One input through the checker; a broken property aborts (fuzz_common.h). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_run(data, size);
  return 0;
}

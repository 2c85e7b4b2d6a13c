/*
** utf8.c: the strict UTF-8 reader (no overlongs, surrogates or code points
** past U+10FFFF) the text rule, the encoder, the schema check and the host
** gate's name check share, and the code points the text rule removes and
** the encoder escapes (mcp_utf8_hidden): here, so that neither text.c nor
** json.c needs the other. It is a file of its own because both C modules
** need it: mcpclient.core (text, JSON) and mcpclient.net (host names), and
** neither can call into the other.
*/
#include <stdint.h>
#include <stddef.h>

#include "core.h"

/*
** Length of the unit starting at s (n > 0 bytes available): a well-formed
** character (*cp set, returns 1-4, *ok = 1) or the maximal invalid subpart
** (returns 1-3, *ok = 0). Maximal subparts are what a conforming decoder
** turns into one U+FFFD each (the Unicode Standard, section 3.9, and the
** WHATWG decoder), so a truncated 4-byte sequence costs one replacement, not
** three; overlongs, surrogates and code points above U+10FFFF are refused at
** the second byte.
*/
size_t mcp_utf8_unit(const unsigned char *s, size_t n, int *ok, uint32_t *cp) {
  unsigned c = s[0], lo = 0x80, hi = 0xBF;
  size_t need, i;
  uint32_t v;
  if (c < 0x80) {
    *ok = 1;
    *cp = c;
    return 1;
  }
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
    v = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    v = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    else if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    v = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    else if (c == 0xF4) hi = 0x8F;
  } else {
    *ok = 0;
    return 1;
  }
  for (i = 1; i <= need; i++) {
    unsigned d;
    if (i >= n) break;
    d = s[i];
    if (d < lo || d > hi) break;
    lo = 0x80;
    hi = 0xBF;
    v = (v << 6) | (d & 0x3F);
  }
  if (i <= need) {
    *ok = 0;
    return i;
  }
  *ok = 1;
  *cp = v;
  return need + 1;
}

/*
** 1 when all n bytes are well-formed UTF-8. ASCII is skipped a byte at a
** time without decoding: results are mostly ASCII.
*/
int mcp_utf8_valid(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    int ok;
    uint32_t cp;
    if (s[i] < 0x80) {
      i++;
      continue;
    }
    i += mcp_utf8_unit(s + i, n - i, &ok, &cp);
    if (!ok) return 0;
  }
  return 1;
}

/*
** Code points that change how a terminal or a reader shows the text around
** them without being visible themselves: C1 controls (U+009B is a CSI that
** terminals obey like ESC [), the bidi embeddings, overrides and isolates
** (a name can be made to read backwards), the Arabic letter mark, the zero
** width characters and the byte order mark. Far-side text never carries them
** to a person or a model, and the JSON encoder escapes them.
*/
int mcp_utf8_hidden(uint32_t cp) {
  if (cp < 0x80) return 0;
  return cp <= 0x9F || cp == 0x061C || (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2060 && cp <= 0x2069) || cp == 0xFEFF;
}

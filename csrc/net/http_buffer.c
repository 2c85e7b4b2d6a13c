/*
** http_buffer.c: the leg's byte buffers. A Buf is malloc'd memory that the
** libcurl callbacks fill, so growing one reports running out of memory and
** never raises. The body callback keeps or queues for the stream consumer
** at most max_bytes (2 MiB unless the send says otherwise) and ends the
** transfer at the cap; an idle leg keeps small buffers for its next send but
** not large ones; a large whole 2xx answer of a hold_body send is handed to
** Lua as a held body (body.c) instead of copied. The credential wipe lives
** here too: memory zeroed so the compiler cannot drop it.
**
** Rule: on_body is a libcurl callback: it touches only C buffers owned by the
** leg userdata, never Lua, so no Lua error can cross libcurl.
*/
#include "http.h"

/*
** Zero memory in a way the compiler may not drop as a dead store: the
** credential copy is about to be freed, which is exactly when a plain memset
** is allowed to vanish.
*/
void mcp_http_wipe(void *p, size_t n) {
  volatile unsigned char *v = p;
  while (n--) *v++ = 0;
}
/*
** Append n bytes; 0 when memory ran out. Called from libcurl callbacks, so it
** reports instead of raising.
*/
int mcp_http_buf_append(Buf *b, const char *s, size_t n) {
  if (n > b->cap - b->len) {
    size_t cap = b->cap ? b->cap : 16384;
    char *p;
    if (n > SIZE_MAX / 2 - b->len) return 0;
    while (cap < b->len + n) cap *= 2;
    p = realloc(b->p, cap);
    if (p == NULL) return 0;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  return 1;
}

/* An idle leg keeps small buffers for the next send but not a 2 MiB one. */
void mcp_http_buf_trim(Buf *b) {
  b->len = 0;
  if (b->cap > KEEP_CAP) {
    free(b->p);
    b->p = NULL;
    b->cap = 0;
  }
}

void mcp_http_buf_free(Buf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}
/*
** Room for a kept body of declared length, taken at its first bytes: a
** catalogue page (~130 KB) would otherwise grow by doubling from 16 KB and
** be copied four times on the way. The declaration is only a hint, bounded
** by max_bytes; a body that outgrows it grows as any other.
*/
static void reserve_declared(Leg *leg) {
  curl_off_t declared = -1;
  Buf *b = &leg->body;
  char *p;
  if (curl_easy_getinfo(leg->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &declared) != CURLE_OK ||
      declared <= 0 || (curl_off_t)b->cap >= declared)
    return;
  if ((curl_off_t)leg->max_bytes < declared) declared = (curl_off_t)leg->max_bytes;
  p = realloc(b->p, (size_t)declared);
  if (p == NULL) return; /* growing by appends will say it */
  b->p = p;
  b->cap = (size_t)declared;
}

/*
** Body bytes. Kept or queued for the stream consumer, up to max_bytes in all.
** Reaching the cap ends the transfer (a short return makes libcurl stop)
** unless the declared length says the body is exactly complete.
*/
size_t mcp_http_on_body(char *data, size_t size, size_t n, void *ud) {
  Leg *leg = ud;
  size_t room = leg->max_bytes - leg->held, take = n < room ? n : room;
  Buf *dst;
  (void)size; /* always 1 */
  if (leg->mode == BODY_UNDECIDED) {
    leg->mode = (leg->want_stream && leg->event_stream) ? BODY_STREAM : BODY_KEEP;
    if (leg->mode == BODY_KEEP) reserve_declared(leg);
  }
  dst = leg->mode == BODY_STREAM ? &leg->stream : &leg->body;
  if (take > 0 && !mcp_http_buf_append(dst, data, take)) {
    leg->out_of_memory = 1;
    return 0;
  }
  leg->held += take;
  if (take < n) {
    leg->truncated = 1;
    return 0;
  }
  if (n > 0 && leg->held == leg->max_bytes) {
    curl_off_t declared = -1;
    if (curl_easy_getinfo(leg->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &declared) != CURLE_OK ||
        declared != (curl_off_t)leg->max_bytes) {
      leg->truncated = 1;
      return 0;
    }
  }
  return n;
}
/*
** The response's body: "" for a streamed one; a held body (body.c) taking
** the buffer itself for a large, whole 2xx answer of a hold_body send (the
** leg starts its next body afresh); otherwise a string copy.
*/
void mcp_http_push_body(lua_State *L, Leg *leg, const Exchange *x) {
  if (leg->mode == BODY_STREAM) lua_pushliteral(L, "");
  else if (leg->hold_body && x->status >= 200 && x->status < 300 && !leg->truncated &&
           leg->body.len >= HOLD_MIN) {
    mcp_body_push(L, leg->body.p, leg->body.len);
    leg->body.p = NULL;
    leg->body.len = leg->body.cap = 0;
  } else lua_pushlstring(L, leg->body.p ? leg->body.p : "", leg->body.len);
}

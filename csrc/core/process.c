/*
** process.c: a local MCP server as a supervised child process.
** core.spawn{ argv, env, cwd } starts a program (never through a shell) in a
** process group of its own, with its stdin and stdout as non-blocking pipes
** and its stderr kept in a bounded ring (the last 64 KiB). Its environment is
** an allow-list of the host's (HOME, LOGNAME, PATH, SHELL, TERM, USER, LANG,
** LC_*) plus what the caller names, so the host's secrets are not inherited;
** every other descriptor of the host is closed in the child. stdout is read
** as lines (one JSON-RPC message each), a line over the read cap refused.
** stdout and stderr are owned by the engine for the child's life: each turn
** of the engine in which one is ready reads it into the handle's buffers, so
** a waiter needs no registration of its own and what it waits for is
** buffered when its turn ends.
** Every wait is bounded by the caller's milliseconds, so a child that stops
** reading or writing never holds a caller past its budget.
** Shutdown is one function for close(), __close, __gc and process exit:
** close stdin, wait up to 0.5 s, SIGTERM the group, wait up to 2 s, SIGKILL the
** group, reap; then what the child started that left its group still
** holding the child's end of one of its pipes (see end_escapees). The handle
** is created closed before anything is acquired.
*/
#define _GNU_SOURCE /* pipe2, posix_spawn's closefrom and chdir actions */
#include "core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROC_MT       "mcpclient.process"
#define LINE_CAP      (2 * 1024 * 1024) /* the read cap of one message */
#define RING_BYTES    (64 * 1024)       /* what is kept of stderr: the newest bytes */
#define READ_CHUNK    65536
#define GRACE_MS      2000 /* after SIGTERM (and the most a caller may pass) */
/*
** After stdin is closed: a server that honours its end of input exits within
** this (a Python or Lua one in tens of milliseconds, Node's server-everything
** in about 0.4 s) and is never signalled; one that ignores it (a timer or a
** task keeps a Node process alive) costs 0.5 s instead of 2 before SIGTERM.
** SIGTERM is the protocol's next step and still a graceful stop: the server
** has GRACE_MS more to exit before SIGKILL, so a slow exit loses nothing.
*/
#define STDIN_MS      500
#define SHUTDOWN_STEP 5   /* ms between two looks at a child that is going */
#define KILLED_MS     200 /* how long SIGKILL is given to empty the group */
#define DEFAULT_PATH  "/usr/local/bin:/usr/bin:/bin"
#define MAX_ENV       4096
#define PROGRAM_SHOWN 200 /* bytes of a program name a message repeats */

/* What the child of a handle is doing, as far as the host knows. */
enum { RUNNING, EXITED, SIGNALLED, NEVER };

typedef struct Proc {
  pid_t pid;        /* the child, leader of its own process group; 0 when none */
  int in, out, err; /* our ends of its stdin, stdout and stderr; -1 when closed */
  int state, code;  /* RUNNING, EXITED (code = status), SIGNALLED (code = signal) */
  int broken;       /* stdout is no longer read: EOF, or a refused line */
  char *line;       /* stdout bytes not yet handed out as lines */
  size_t line_len, line_size;
  size_t line_at;   /* where the bytes not yet handed out start: lines are taken without moving the rest */
  size_t line_seen; /* from line_at up to here no \n: a line arriving in pieces is scanned once */
  char ring[RING_BYTES]; /* stderr, newest bytes, as a circle */
  size_t ring_at, ring_len;
  uint64_t ring_total;       /* every byte stderr ever gave: where proc:stderr_since counts from */
  struct Proc *prev, *next;  /* the live list the exit handler ends */
  pid_t owner;               /* the process that started the child: only it may end it */
  unsigned long generation;  /* fork_generation when it was started: another is a fork's copy */
  struct mcp_engine *engine; /* the engine that owns stdout and stderr while they are open */
  int out_owned;             /* stdout is read by the engine's turns (not at the cap, memory enough) */
  ino_t pipes[3];            /* the inodes of its stdin, stdout and stderr pipes: who holds the child's end */
  int pidfd;     /* the child's pidfd, in the engine until it exits; -1 when none (or it exited) */
  int hold_pipe; /* the host handles SIGPIPE itself: each write blocks it (see pipe_rule) */
} Proc;

/* ==================================================================== */
/* Children still running at process exit                               */
/* ==================================================================== */

/*
** Every handle with a child is on this list, so a host that leaves with
** os.exit (no lua_close, no finalizers) still ends its children; the list is
** process-wide because the children are.
*/
static Proc *live = NULL;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static int exit_hook = 0;
/*
** Bumped in the child of every fork once a child was spawned: a fork of the
** host shares the engine's epoll set and the pipes with its parent, so its
** turns must not read a child's output (the parent's) nor change the set.
*/
static volatile unsigned long fork_generation = 0;
static int fork_hook = 0;
/*
** While a child runs the host is the subreaper of its descendants: one that
** leaves the child's group and is orphaned (a double fork) is re-parented to
** the host, not to init, so the shutdown can find it (see end_escapees).
** subreaper: the host made itself one (and so undoes it once no child is
** left); a host that was one already stays one.
*/
static int subreaper = 0;

static void shutdown_all(Proc **procs, int n, int grace_ms);

/*
** Link p into the live list.
*/
static void live_add(Proc *p) {
  pthread_mutex_lock(&live_lock);
  p->prev = NULL;
  p->next = live;
  if (live) live->prev = p;
  live = p;
  pthread_mutex_unlock(&live_lock);
}

/*
** Unlink p from the live list (a no-op when it is not on it).
*/
static void live_remove(Proc *p) {
  pthread_mutex_lock(&live_lock);
  if (p->prev) p->prev->next = p->next;
  else if (live == p) live = p->next;
  if (p->next) p->next->prev = p->prev;
  p->prev = p->next = NULL;
  if (!live && subreaper && prctl(PR_SET_CHILD_SUBREAPER, 0) == 0) subreaper = 0;
  pthread_mutex_unlock(&live_lock);
}

/*
** Make the host the subreaper of its descendants before a child starts (one
** that double-forks at once is then re-parented to the host already); with
** on false, undo it when no child is left (a spawn that failed).
*/
static void hold_subreaper(int on) {
  int already = 0;
  pthread_mutex_lock(&live_lock);
  if (on && !subreaper && prctl(PR_GET_CHILD_SUBREAPER, &already) == 0 && !already)
    subreaper = prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
  else if (!on && !live && subreaper && prctl(PR_SET_CHILD_SUBREAPER, 0) == 0) subreaper = 0;
  pthread_mutex_unlock(&live_lock);
}

/*
** How writes to a child's stdin keep a closed pipe from ending the host,
** decided when a child is started; 1 when each write must block SIGPIPE.
** A library that writes to pipes must not be killed by one whose reader
** went away: it learns of that from EPIPE. So a SIGPIPE left at its default
** (terminate) is set to ignored, once, for the whole process; one ignored
** already stays so. Each write then costs no signal-mask calls (a pipe has
** no MSG_NOSIGNAL: that flag is send's, and send refuses a pipe). A host
** that installed a handler of its own keeps it: for such a host every write
** blocks SIGPIPE around it (two mask calls), so the handler never sees a
** signal of ours. The child is unaffected: posix_spawn gives it every
** signal at its default (POSIX_SPAWN_SETSIGDEF). Other programs the host
** starts itself (system, popen) inherit the ignored SIGPIPE, as under any
** runtime that ignores it (Python, Node). A handler the host installs after
** a child started is not seen by that child's writes.
*/
static int pipe_rule(void) {
  struct sigaction now;
  int hold = 0;
  pthread_mutex_lock(&live_lock);
  if (sigaction(SIGPIPE, NULL, &now) == 0) {
    if (now.sa_flags & SA_SIGINFO) hold = 1;
    else if (now.sa_handler == SIG_DFL) {
      struct sigaction ignore;
      memset(&ignore, 0, sizeof ignore);
      ignore.sa_handler = SIG_IGN;
      sigemptyset(&ignore.sa_mask);
      hold = sigaction(SIGPIPE, &ignore, NULL) != 0;
    } else hold = now.sa_handler != SIG_IGN;
  } else hold = 1;
  pthread_mutex_unlock(&live_lock);
  return hold;
}

/*
** After EPIPE on a write made with SIGPIPE ignored: a signal blocked when it
** is raised stays pending even though ignored (it is discarded when
** unblocked), so a host that blocks SIGPIPE in this thread would find ours
** pending; take it back. Only on EPIPE: the mask is looked at then.
*/
static void forget_pipe_signal(void) {
  sigset_t mask, pending, pipe_set;
  struct timespec zero = {0, 0};
  if (pthread_sigmask(SIG_BLOCK, NULL, &mask) != 0 || !sigismember(&mask, SIGPIPE)) return;
  if (sigpending(&pending) != 0 || !sigismember(&pending, SIGPIPE)) return;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  sigtimedwait(&pipe_set, NULL, &zero);
}

/*
** In the child of a fork: the handles it inherited are its parent's.
*/
static void forked(void) {
  fork_generation++;
}

/*
** The exit handler: every child still running is shut down, all of them
** together, so the host's exit waits at most the two grace periods once.
*/
static void end_children_at_exit(void) {
  Proc *procs[256];
  int n, skipped;
  pid_t self = getpid();
  do {
    n = skipped = 0;
    pthread_mutex_lock(&live_lock);
    for (Proc *p = live; p && n < 256; p = p->next) {
      if (p->owner == self) procs[n++] = p;
      else skipped = 1; /* a fork of the host leaving: the children are its parent's */
    }
    pthread_mutex_unlock(&live_lock);
    shutdown_all(procs, n, GRACE_MS);
  } while (n == 256 && !skipped);
}

/* ==================================================================== */
/* Small helpers                                                        */
/* ==================================================================== */

/*
** Milliseconds on the monotonic clock.
*/
static int64_t now_ms(void) {
  return (int64_t)(mcp_monotonic_ns() / 1000000u);
}

/*
** Sleep ms milliseconds.
*/
static void pause_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/*
** Close *fd if open and mark it closed.
*/
static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/*
** Close stdout, stderr or the pidfd (*fd, one of p's), first taking it out
** of the engine. Only the process that started the child touches the engine: a
** fork of the host shares its epoll set with its parent.
*/
static void drop_fd(Proc *p, int *fd) {
  if (*fd >= 0 && p->engine != NULL && p->owner == getpid()) mcp_engine_disown(p->engine, *fd);
  if (fd == &p->out) p->out_owned = 0;
  close_fd(fd);
}

/*
** Has the child exited? Reaps it when it has (never blocks); true when it is
** gone (or there never was one).
*/
static int reaped(Proc *p) {
  int status;
  pid_t r;
  if (p->state != RUNNING) return 1;
  do r = waitpid(p->pid, &status, WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == 0) return 0;
  if (r < 0) { /* not ours to wait for any more (a host reaped it): gone all the same */
    p->state = EXITED;
    p->code = -1;
    return 1;
  }
  if (WIFSIGNALED(status)) {
    p->state = SIGNALLED;
    p->code = WTERMSIG(status);
  } else {
    p->state = EXITED;
    p->code = WEXITSTATUS(status);
  }
  return 1;
}

/*
** Is process pid of group pgid a zombie (or gone)? Read from /proc: a killed
** grandchild was handed to init, which may be slow to reap it, and a zombie
** holds the group's id without running anything.
*/
static int zombie_member(const char *pid, pid_t pgid) {
  char path[64], buf[512], state;
  int pgrp;
  const char *close_paren;
  ssize_t n;
  int fd;
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 1;
  n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 1;
  buf[n] = '\0';
  close_paren = strrchr(buf, ')');
  if (!close_paren || sscanf(close_paren + 1, " %c %*d %d", &state, &pgrp) != 2) return 1;
  return pgrp != (int)pgid || state == 'Z' || state == 'X';
}

/*
** Is any process of the child's group still running? The leader is reaped
** first; grandchildren it left in the group keep the group alive, zombies
** do not (they run nothing).
*/
static int group_alive(Proc *p) {
  DIR *dir;
  struct dirent *e;
  int alive = 0;
  if (p->pid <= 0) return 0;
  if (kill(-p->pid, 0) != 0 && errno != EPERM) return 0;
  dir = opendir("/proc");
  if (!dir) return 1;
  while (!alive && (e = readdir(dir)) != NULL)
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9') alive = !zombie_member(e->d_name, p->pid);
  closedir(dir);
  return alive;
}

/*
** Reap the zombies of the child's group that are the host's: with the host
** the subreaper, a grandchild whose parent ended is re-parented to it. Only
** once the leader is reaped, so its own status is never taken here.
*/
static void reap_group(Proc *p) {
  int status;
  if (p->pid > 0 && p->state != RUNNING)
    while (waitpid(-p->pid, &status, WNOHANG) > 0) {}
}

/* ==================================================================== */
/* Descendants that left the group                                      */
/* ==================================================================== */

/* One process as /proc says: its id and its parent's; mark as end_escapees uses it. */
typedef struct {
  pid_t pid, ppid;
  int mark; /* 1: a descendant of the host; 2: one to end */
} Link;

/*
** The parent and state of process `name` (a /proc entry); 0 when it cannot
** be read (it is gone).
*/
static int stat_of(const char *name, pid_t *ppid, char *state) {
  char path[64], buf[512];
  const char *close_paren;
  int parent, fd;
  ssize_t n;
  snprintf(path, sizeof path, "/proc/%s/stat", name);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  close_paren = strrchr(buf, ')');
  if (!close_paren || sscanf(close_paren + 1, " %c %d", state, &parent) != 2) return 0;
  *ppid = (pid_t)parent;
  return 1;
}

/*
** The access mode of descriptor fd of process pid, from
** its fdinfo; -1 when it cannot be read.
*/
static int fd_mode(pid_t pid, int fd) {
  char path[96], buf[256], *flags;
  unsigned long value;
  ssize_t n;
  int f;
  snprintf(path, sizeof path, "/proc/%d/fdinfo/%d", (int)pid, fd);
  f = open(path, O_RDONLY | O_CLOEXEC);
  if (f < 0) return -1;
  n = read(f, buf, sizeof buf - 1);
  close(f);
  if (n <= 0) return -1;
  buf[n] = '\0';
  flags = strstr(buf, "flags:");
  if (!flags || sscanf(flags + 6, "%lo", &value) != 1) return -1;
  return (int)(value & O_ACCMODE);
}

/*
** Does process pid hold the child's end of a pipe of one of procs (the read
** end of stdin, the write end of stdout or stderr)? Only a child and what it
** started can: the host's copies of those ends close on exec and are closed
** once the child is started, and what the host (or a fork of it) holds are
** the other ends, of the other mode.
*/
static int holds_child_end(pid_t pid, Proc **procs, int n) {
  char path[64], link[64];
  struct dirent *e;
  DIR *dir;
  int held = 0;
  snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
  dir = opendir(path);
  if (!dir) return 0; /* gone, or not the host's user's: never the host's descendant */
  while (!held && (e = readdir(dir)) != NULL) {
    unsigned long ino;
    ssize_t len;
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    len = readlinkat(dirfd(dir), e->d_name, link, sizeof link - 1);
    if (len <= 0) continue;
    link[len] = '\0';
    if (sscanf(link, "pipe:[%lu]", &ino) != 1) continue;
    for (int i = 0; i < n && !held; i++)
      for (int k = 0; k < 3 && !held; k++)
        if (procs[i]->pipes[k] != 0 && procs[i]->pipes[k] == (ino_t)ino)
          held = fd_mode(pid, atoi(e->d_name)) == (k == 0 ? O_RDONLY : O_WRONLY);
  }
  closedir(dir);
  return held;
}

static int by_pid(const void *a, const void *b) {
  pid_t x = ((const Link *)a)->pid, y = ((const Link *)b)->pid;
  return (x > y) - (x < y);
}

/*
** The index of pid in the sorted links, or -1.
*/
static long link_of(const Link *links, size_t count, pid_t pid) {
  size_t lo = 0, hi = count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (links[mid].pid == pid) return (long)mid;
    if (links[mid].pid < pid) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

/*
** Has a killed process gone? Reaped here when it is the host's zombie (its
** parent ended: the host is the subreaper); a zombie of another parent (one
** that did not end) runs nothing and counts as gone.
*/
static int ended(pid_t pid) {
  char name[24], state;
  pid_t ppid;
  int status;
  pid_t r;
  do r = waitpid(pid, &status, WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == pid) return 1;
  snprintf(name, sizeof name, "%d", (int)pid);
  if (!stat_of(name, &ppid, &state)) return 1;
  return (state == 'Z' || state == 'X') && ppid != getpid();
}

/*
** After the groups of procs are ended: end what the children started and
** left their groups with (a double fork and setsid, the usual daemon), which
** would otherwise outlive them holding their pipes. The rule: a descendant of
** the host (such an orphan is re-parented to the host, the subreaper) that
** holds a child's end of one of their pipes is killed (SIGKILL: the child
** had its graces), with every process under it, and reaped. One that holds
** none of those pipes (it closed them, or was handed elsewhere) cannot be told
** from the host's own processes and is left alone.
*/
static void end_escapees(Proc **procs, int n) {
  Link *links = NULL;
  size_t count = 0, size = 0;
  pid_t self = getpid();
  struct dirent *e;
  int changed, any = 0;
  DIR *dir = opendir("/proc");
  if (!dir) return;
  while ((e = readdir(dir)) != NULL) {
    pid_t ppid;
    char state;
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    if (!stat_of(e->d_name, &ppid, &state) || state == 'Z' || state == 'X') continue;
    if (count == size) {
      Link *grown = realloc(links, (size ? size * 2 : 256) * sizeof *links);
      if (!grown) break;
      links = grown;
      size = size ? size * 2 : 256;
    }
    links[count++] = (Link){(pid_t)atoi(e->d_name), ppid, 0};
  }
  closedir(dir);
  if (count == 0) {
    free(links);
    return;
  }
  qsort(links, count, sizeof *links, by_pid);
  for (size_t i = 0; i < count; i++) { /* the host's descendants: a parent chain that reaches the host */
    pid_t up = links[i].ppid;
    for (int depth = 0; depth < 64 && up > 1 && links[i].pid != self; depth++) {
      long at;
      if (up == self) {
        links[i].mark = 1;
        break;
      }
      if ((at = link_of(links, count, up)) < 0) break;
      up = links[at].ppid;
    }
  }
  for (size_t i = 0; i < count; i++)
    if (links[i].mark == 1 && holds_child_end(links[i].pid, procs, n)) links[i].mark = 2;
  do { /* and everything under one to end */
    changed = 0;
    for (size_t i = 0; i < count; i++) {
      long at;
      if (links[i].mark == 1 && (at = link_of(links, count, links[i].ppid)) >= 0 && links[at].mark == 2) {
        links[i].mark = 2;
        changed = 1;
      }
    }
  } while (changed);
  for (size_t i = 0; i < count; i++)
    if (links[i].mark == 2 && kill(links[i].pid, SIGKILL) == 0) any = 1;
  if (any) {
    int64_t until = now_ms() + KILLED_MS;
    for (;;) {
      int left = 0;
      for (size_t i = 0; i < count; i++)
        if (links[i].mark == 2) {
          if (ended(links[i].pid)) links[i].mark = 0;
          else left = 1;
        }
      if (!left || now_ms() >= until) break;
      pause_ms(SHUTDOWN_STEP);
    }
  }
  free(links);
}

/* ==================================================================== */
/* Reading                                                              */
/* ==================================================================== */

/*
** Keep n bytes of stderr in the ring, dropping the oldest.
*/
static void ring_put(Proc *p, const char *s, size_t n) {
  p->ring_total += n;
  if (n >= RING_BYTES) {
    s += n - RING_BYTES;
    n = RING_BYTES;
  }
  for (size_t i = 0; i < n; i++) {
    p->ring[(p->ring_at + p->ring_len) % RING_BYTES] = s[i];
    if (p->ring_len < RING_BYTES) p->ring_len++;
    else p->ring_at = (p->ring_at + 1) % RING_BYTES;
  }
}

/*
** Read what stderr holds now into the ring; closes it at EOF. A short read
** emptied the pipe: no second read to hear EAGAIN.
*/
static void drain_err(Proc *p) {
  char buf[4096];
  while (p->err >= 0) {
    ssize_t n = read(p->err, buf, sizeof buf);
    if (n > 0) {
      ring_put(p, buf, (size_t)n);
      if ((size_t)n < sizeof buf) return;
    } else if (n == 0) drop_fd(p, &p->err);
    else if (errno != EINTR) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) drop_fd(p, &p->err);
      return;
    }
  }
}

/*
** Move the bytes not yet handed out to the start of the line buffer: once
** per read or wait, not once per line taken (a buffer of many short lines
** would be moved over and over).
*/
static void compact(Proc *p) {
  if (p->line_at == 0) return;
  memmove(p->line, p->line + p->line_at, p->line_len - p->line_at);
  p->line_len -= p->line_at;
  p->line_seen = p->line_seen > p->line_at ? p->line_seen - p->line_at : 0;
  p->line_at = 0;
}

/*
** Is the line buffer past the read cap? A line not yet ended may hold one
** byte more than the cap when that byte is a CR: its LF may still be on its
** way, and a CR before the LF is no part of the message. Whether a message
** is read must not depend on where the pipe cut its bytes.
*/
static int past_cap(const Proc *p) {
  if (p->line_len <= LINE_CAP) return 0;
  return !(p->line_len - p->line_at == LINE_CAP + 1 && p->line[p->line_len - 1] == '\r');
}

/*
** Read what stdout holds now onto the line buffer, at most one chunk past the
** cap (a line longer than that is refused anyway). 0 when memory ran out.
*/
static int drain_out(Proc *p) {
  compact(p);
  while (p->out >= 0 && !past_cap(p)) {
    ssize_t n;
    if (p->line_size - p->line_len < READ_CHUNK) {
      size_t size = p->line_size ? p->line_size * 2 : READ_CHUNK * 2;
      char *grown = realloc(p->line, size);
      if (!grown) return 0;
      p->line = grown;
      p->line_size = size;
    }
    n = read(p->out, p->line + p->line_len, p->line_size - p->line_len);
    if (n > 0) {
      int emptied = (size_t)n < p->line_size - p->line_len; /* a short read emptied the pipe */
      p->line_len += (size_t)n;
      if (emptied) return 1;
    } else if (n == 0) drop_fd(p, &p->out);
    else if (errno != EINTR) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) drop_fd(p, &p->out);
      return 1;
    }
  }
  return 1;
}

/*
** The engine's handler for stdout and stderr: read what is there. stdout
** left unread (the line buffer past the cap, or no memory to grow it) would
** wake every turn, so the engine stops owning it: read_line reads it
** itself and reports what stopped it, and gives it back (own_out) once the
** lines taken off bring the buffer under the cap.
*/
static void proc_ready(void *owner, int fd, unsigned events) {
  Proc *p = owner;
  (void)events;
  /* a fork's copy: the output is its parent's to read (the fork's turns wake for it until the parent does) */
  if (p->generation != fork_generation) return;
  if (fd == p->err) {
    drain_err(p);
  } else if (fd == p->pidfd) {
    /* the child exited: running() reaps it when next asked (reaped now, its pid could be reused meanwhile) */
    drop_fd(p, &p->pidfd);
  } else if (fd == p->out) {
    if ((!drain_out(p) || past_cap(p)) && p->out >= 0) {
      mcp_engine_disown(p->engine, p->out);
      p->out_owned = 0;
    }
  }
}

/*
** Give stdout back to the engine once the line buffer is under the cap
** again (lines were taken off it), so a waiter is woken by it again. Only
** the process that started the child touches the engine.
*/
static void own_out(Proc *p) {
  if (p->out >= 0 && !p->broken && !past_cap(p) && p->engine != NULL && p->owner == getpid() &&
      mcp_engine_own(p->engine, p->out, EPOLLIN, proc_ready, p) == 0)
    p->out_owned = 1;
}

/*
** Wait up to ms for stdout, stderr (always drained) or, with want_in, room on
** stdin. Returns the poll result (0: nothing within ms).
*/
static int wait_fds(Proc *p, int ms, int want_in) {
  struct pollfd fds[3];
  int n = 0, r;
  compact(p);
  if (p->out >= 0 && !past_cap(p)) fds[n++] = (struct pollfd){p->out, POLLIN, 0};
  if (p->err >= 0) fds[n++] = (struct pollfd){p->err, POLLIN, 0};
  if (want_in && p->in >= 0) fds[n++] = (struct pollfd){p->in, POLLOUT, 0};
  if (n == 0) {
    if (ms > 0) pause_ms(ms > SHUTDOWN_STEP ? SHUTDOWN_STEP : ms);
    return 0;
  }
  do r = poll(fds, (nfds_t)n, ms);
  while (r < 0 && errno == EINTR);
  return r;
}

/* ==================================================================== */
/* Shutdown                                                             */
/* ==================================================================== */

/*
** Wait up to ms for every child in procs to be gone (leader reaped and, with
** group, its group empty), draining their pipes so none is held up writing.
*/
static void wait_gone(Proc **procs, int n, int ms, int group) {
  int64_t until = now_ms() + ms;
  for (;;) {
    int left = 0;
    for (int i = 0; i < n; i++) {
      Proc *p = procs[i];
      if (!reaped(p)) left = 1;
      else if (group) {
        reap_group(p);
        if (group_alive(p)) left = 1;
      }
      drain_err(p);
      if (p->out >= 0) { /* stdout is no longer read as messages: only emptied */
        char buf[4096];
        while (read(p->out, buf, sizeof buf) > 0) {}
      }
    }
    if (!left || now_ms() >= until) return;
    pause_ms(SHUTDOWN_STEP);
  }
}

/*
** Signal the group of every child in procs whose group is still there.
*/
static void signal_groups(Proc **procs, int n, int sig) {
  for (int i = 0; i < n; i++)
    if (procs[i]->pid > 0 && (procs[i]->state == RUNNING || group_alive(procs[i]))) kill(-procs[i]->pid, sig);
}

/*
** The one shutdown, for several children at once: close stdin, wait up to
** STDIN_MS (0.5 s; less when grace_ms is less), SIGTERM the group, wait up
** to grace_ms (2 s), SIGKILL the group,
** reap. A leader that exits at stdin's close may leave children in its
** group: those are ended the same way, so nothing of the server outlives
** it (a killed grandchild is given a moment to be gone before this returns).
** After it every descriptor is closed and the handle holds no child.
*/
static void shutdown_all(Proc **procs, int n, int grace_ms) {
  int pending = 0;
  for (int i = 0; i < n; i++) {
    close_fd(&procs[i]->in);
    if (procs[i]->pid > 0) pending = 1;
  }
  if (pending) {
    wait_gone(procs, n, grace_ms < STDIN_MS ? grace_ms : STDIN_MS, 0);
    signal_groups(procs, n, SIGTERM);
    wait_gone(procs, n, grace_ms, 1);
    signal_groups(procs, n, SIGKILL);
    wait_gone(procs, n, KILLED_MS, 1);
    for (int i = 0; i < n; i++) {
      Proc *p = procs[i];
      int status;
      if (p->state == RUNNING && p->pid > 0) {
        while (waitpid(p->pid, &status, 0) < 0 && errno == EINTR) {}
        p->state = SIGNALLED;
        p->code = SIGKILL;
      }
      reap_group(p);
    }
    end_escapees(procs, n);
  }
  for (int i = 0; i < n; i++) {
    Proc *p = procs[i];
    drop_fd(p, &p->out);
    drop_fd(p, &p->err);
    drop_fd(p, &p->pidfd);
    if (p->pid != 0) live_remove(p);
    p->pid = 0;
  }
}

/* ==================================================================== */
/* Spawning                                                             */
/* ==================================================================== */

/*
** Is name (len bytes, up to '=') one of the host's variables a server is
** given? The allow-list every official SDK client uses, plus the locale.
*/
static int inherited(const char *entry) {
  static const char *const names[] = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", NULL};
  const char *eq = strchr(entry, '=');
  size_t len;
  if (!eq) return 0;
  len = (size_t)(eq - entry);
  if (eq[1] == '(' && eq[2] == ')') return 0; /* an exported shell function */
  if (len > 3 && memcmp(entry, "LC_", 3) == 0) return 1;
  for (int i = 0; names[i]; i++)
    if (strlen(names[i]) == len && memcmp(entry, names[i], len) == 0) return 1;
  return 0;
}

/*
** The child's environment as a NULL-ended array on the Lua stack (strings
** kept alive by a table at the top): the allow-list of environ, then each
** NAME = value of the table at idx, replacing an inherited one.
*/
static const char **child_env(lua_State *L, int idx, const char **list, int *count) {
  int n = 0;
  lua_newtable(L); /* keeps the strings */
  if (idx) {
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      size_t klen, vlen;
      const char *k, *v;
      if (n >= MAX_ENV - 1) luaL_error(L, "spawn: too many environment variables");
      if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "spawn: env maps names to strings");
      k = lua_tolstring(L, -2, &klen);
      v = lua_tolstring(L, -1, &vlen);
      if (klen == 0 || strlen(k) != klen || strchr(k, '=') || strlen(v) != vlen)
        luaL_error(L, "spawn: an env name is empty or holds = or NUL, or a value holds NUL");
      lua_pushvalue(L, -2);
      lua_pushliteral(L, "=");
      lua_pushvalue(L, -3);
      lua_concat(L, 3);
      list[n] = lua_tostring(L, -1);
      lua_rawseti(L, -4, n + 1);
      lua_pop(L, 1);
      n++;
    }
  }
  for (char **e = environ; e && *e && n < MAX_ENV - 1; e++) {
    const char *eq = strchr(*e, '=');
    int named = 0;
    if (!inherited(*e)) continue;
    for (int i = 0; i < n && !named; i++) named = strncmp(list[i], *e, (size_t)(eq - *e) + 1) == 0;
    if (!named) list[n++] = *e;
  }
  list[n] = NULL;
  *count = n;
  return list;
}

/*
** The value of PATH in env (NULL-ended "NAME=value" list), else a default.
*/
static const char *path_of(const char **env) {
  for (int i = 0; env[i]; i++)
    if (strncmp(env[i], "PATH=", 5) == 0) return env[i] + 5;
  return DEFAULT_PATH;
}

/*
** Is file an executable regular file, seen from the directory dir (an open
** descriptor, or AT_FDCWD)? A relative file is looked up where exec will
** look it up: the child chdirs to its cwd before it execs.
*/
static int executable_at(int dir, const char *file) {
  struct stat st;
  return fstatat(dir, file, &st, 0) == 0 && S_ISREG(st.st_mode) && faccessat(dir, file, X_OK, 0) == 0;
}

/*
** The program's file: program itself when it names a path, else the first
** executable regular file of that name on PATH (the child's PATH, as execvp
** would search it). A relative path (the program's, or a PATH entry's) is
** checked from cwd when there is one, since the child enters cwd before it
** execs; the path pushed stays relative, which exec resolves there too.
** Pushes the path; 0 (nothing pushed) when none is found.
*/
static int find_program(lua_State *L, const char *program, const char *path, const char *cwd) {
  int dir = AT_FDCWD, found = 0;
  if (cwd && (dir = open(cwd, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) return 0;
  if (strchr(program, '/')) {
    found = executable_at(dir, program);
    if (found) lua_pushstring(L, program);
  } else {
    while (*path && !found) {
      const char *colon = strchr(path, ':');
      size_t len = colon ? (size_t)(colon - path) : strlen(path);
      if (len == 0) lua_pushliteral(L, ".");
      else lua_pushlstring(L, path, len);
      lua_pushliteral(L, "/");
      lua_pushstring(L, program);
      lua_concat(L, 3);
      found = executable_at(dir, lua_tostring(L, -1));
      if (!found) lua_pop(L, 1);
      path += len + (colon ? 1 : 0);
    }
  }
  if (dir != AT_FDCWD) close(dir);
  return found;
}

/*
** The inode of the pipe fd is an end of (0 when it cannot be read).
*/
static ino_t pipe_inode(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

/*
** Make a pipe whose both ends close on exec; ours non-blocking (the child's
** end is made its stdin/stdout/stderr by dup2, which clears the flag).
*/
static int make_pipe(int fds[2], int ours) {
  if (pipe2(fds, O_CLOEXEC) != 0) return 0;
  fcntl(fds[ours], F_SETFL, fcntl(fds[ours], F_GETFL) | O_NONBLOCK);
  return 1;
}

/*
** Have the engine watch for the child's exit through a pidfd (Linux 5.3
** and later; it closes on exec), so that asking whether the child still
** runs between operations costs no system call (see l_running). Where
** there is none (an older kernel, a seccomp filter) the child is asked
** with waitpid instead. Only once the child is started and before anyone
** could reap it: the pid names this child.
*/
static void watch_exit(Proc *p) {
#ifdef SYS_pidfd_open
  int fd = (int)syscall(SYS_pidfd_open, p->pid, 0);
  if (fd < 0) return;
  if (mcp_engine_own(p->engine, fd, EPOLLIN, proc_ready, p) != 0) {
    close(fd);
    return;
  }
  p->pidfd = fd;
#else
  (void)p;
#endif
}

/*
** Push nil, "transport", a detail naming the program (clipped by the caller's
** message rule: the program comes from the operator, not from a server).
*/
static int spawn_failure(lua_State *L, const char *program, const char *why) {
  lua_pushnil(L);
  lua_pushliteral(L, "transport");
  lua_pushfstring(L, "the program \"%s\" %s", program, why);
  return 3;
}

/*
** Start the child with posix_spawn: its own group, the three pipes on 0-2,
** every other descriptor closed, default signal handling and mask, cwd.
** Returns 0 or an errno.
*/
static int start_child(Proc *p, const char *file, char *const *argv, char *const *env, const char *cwd,
                       int pin[2], int pout[2], int perr[2]) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  sigset_t all, none;
  int rc;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
  posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
  posix_spawn_file_actions_adddup2(&fa, perr[1], 2);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  if (cwd) posix_spawn_file_actions_addchdir_np(&fa, cwd);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setsigmask(&at, &none);
  rc = posix_spawn(&p->pid, file, &fa, &at, argv, env);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0) p->pid = 0;
  return rc;
}

/*
** A list of strings as posix_spawn takes it (it promises not to change them;
** its prototype predates const).
*/
static char *const *spawn_list(const char **list) {
  char *const *as_spawn;
  memcpy(&as_spawn, &list, sizeof as_spawn);
  return as_spawn;
}

/*
** Check the argv list at idx (1 or more non-empty strings without NUL) and
** push it as a C array in a userdata box; returns the array.
*/
static const char **argv_of(lua_State *L, int idx) {
  lua_Integer n = luaL_len(L, idx);
  const char **argv;
  if (n < 1 || n > 4096)
    luaL_error(L, "spawn: argv must list the program and its arguments (1 to 4096 strings)");
  argv = lua_newuserdatauv(L, sizeof(char *) * (size_t)(n + 1), 0);
  for (lua_Integer i = 1; i <= n; i++) {
    size_t len;
    lua_rawgeti(L, idx, i);
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "spawn: argv[%d] must be a string", (int)i);
    argv[i - 1] = lua_tolstring(L, -1, &len);
    if (strlen(argv[i - 1]) != len || (i == 1 && len == 0))
      luaL_error(L, "spawn: argv[%d] holds NUL or is empty", (int)i);
    lua_pop(L, 1); /* the string stays alive in the argv table, which the caller holds */
  }
  argv[n] = NULL;
  return argv;
}

/*
** core.spawn{ argv = {...}, env = { NAME = value }, cwd = dir }: a handle for
** the started child, or nil, "transport", detail when it could not be started
** (a program not found, a cwd that cannot be entered, no resources).
*/
static int l_spawn(lua_State *L) {
  const char *envlist[MAX_ENV], *cwd = NULL, *program;
  const char **argv;
  int n_env, env_idx = 0, pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1}, rc;
  Proc *p;
  struct mcp_engine *e;
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  lua_getfield(L, 1, "argv"); /* 2 */
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_getfield(L, 1, "env"); /* 3 */
  if (!lua_isnil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    env_idx = 3;
  }
  lua_getfield(L, 1, "cwd"); /* 4 */
  if (!lua_isnil(L, 4)) cwd = luaL_checkstring(L, 4);
  lua_rawgeti(L, 2, 1); /* 5: the program, kept alive here */
  argv = argv_of(L, 2); /* 6 */
  program = argv[0];
  child_env(L, env_idx, envlist, &n_env); /* 7 */
  /* the handle exists, closed, before any descriptor or child does */
  p = lua_newuserdatauv(L, sizeof(Proc), 0); /* 8 */
  memset(p, 0, sizeof *p);
  p->in = p->out = p->err = p->pidfd = -1;
  p->state = NEVER;
  p->owner = getpid();
  p->generation = fork_generation;
  luaL_setmetatable(L, PROC_MT);
  e = mcp_engine_of(L);
  if (cwd) {
    struct stat st;
    if (stat(cwd, &st) != 0 || !S_ISDIR(st.st_mode))
      return spawn_failure(L, program, "cannot start: its cwd is not a directory");
  }
  if (!find_program(L, program, path_of(envlist), cwd))
    return spawn_failure(L, program, "was not found on PATH or is not executable");
  if (!make_pipe(pin, 1) || !make_pipe(pout, 0) || !make_pipe(perr, 0)) {
    rc = errno;
    close_fd(&pin[0]), close_fd(&pin[1]), close_fd(&pout[0]), close_fd(&pout[1]), close_fd(&perr[0]);
    close_fd(&perr[1]);
    return spawn_failure(L, program,
                         rc == EMFILE ? "cannot start: no descriptors left" : "cannot start: no pipe");
  }
  /* the engine owns our ends from the start: a failure here has started nothing */
  p->engine = e;
  p->in = pin[1];
  p->out = pout[0];
  p->err = perr[0];
  if (mcp_engine_own(e, p->out, EPOLLIN, proc_ready, p) != 0 ||
      mcp_engine_own(e, p->err, EPOLLIN, proc_ready, p) != 0) {
    rc = errno;
    close_fd(&pin[0]), close_fd(&pout[1]), close_fd(&perr[1]);
    close_fd(&p->in), drop_fd(p, &p->out), drop_fd(p, &p->err);
    lua_pushfstring(L, "cannot start: the engine cannot watch its pipes (%s)", strerror(rc));
    return spawn_failure(L, program, lua_tostring(L, -1));
  }
  p->out_owned = 1;
  p->pipes[0] = pipe_inode(pin[0]);
  p->pipes[1] = pipe_inode(pout[1]);
  p->pipes[2] = pipe_inode(perr[1]);
  hold_subreaper(1);
  rc = start_child(p, lua_tostring(L, -1), spawn_list(argv), spawn_list(envlist), cwd, pin, pout, perr);
  close_fd(&pin[0]);
  close_fd(&pout[1]);
  close_fd(&perr[1]);
  if (rc != 0) {
    close_fd(&p->in), drop_fd(p, &p->out), drop_fd(p, &p->err);
    hold_subreaper(0);
    lua_pushfstring(L, "could not be started: %s", strerror(rc));
    return spawn_failure(L, program, lua_tostring(L, -1));
  }
  p->state = RUNNING;
  p->hold_pipe = pipe_rule();
  watch_exit(p);
  live_add(p);
  pthread_mutex_lock(&live_lock);
  if (!exit_hook) exit_hook = atexit(end_children_at_exit) == 0;
  if (!fork_hook) fork_hook = pthread_atfork(NULL, NULL, forked) == 0;
  pthread_mutex_unlock(&live_lock);
  lua_settop(L, 8);
  return 1;
}

/* ==================================================================== */
/* The handle's methods                                                 */
/* ==================================================================== */

/*
** The handle at index 1; raises when it is not one. The methods carry the
** handle's metatable as their upvalue, so the check is one comparison, not
** a look-up of the metatable by name in the registry on every call (a warm
** stdio call makes six of them).
*/
static Proc *check_proc(lua_State *L) {
  void *p = lua_touserdata(L, 1);
  if (p != NULL && lua_getmetatable(L, 1)) {
    int same = lua_rawequal(L, -1, lua_upvalueindex(1));
    lua_pop(L, 1);
    if (same) return p;
  }
  luaL_typeerror(L, 1, PROC_MT);
  return NULL;
}

/*
** Push how the child ended as one phrase ("exited with status 3", "was
** killed by signal 9"), or "is running".
*/
static void push_ending(lua_State *L, Proc *p) {
  if (p->state == EXITED && p->code >= 0) lua_pushfstring(L, "exited with status %d", p->code);
  else if (p->state == EXITED) lua_pushliteral(L, "exited");
  else if (p->state == SIGNALLED)
    lua_pushfstring(L, "was killed by signal %d (%s)", p->code, strsignal(p->code));
  else if (p->state == NEVER) lua_pushliteral(L, "was never started");
  else lua_pushliteral(L, "is running");
}

/*
** After stdout closed: give the child a moment (up to 100 ms) to be reaped,
** so the failure can name its exit status; push nil, "closed", the ending.
*/
static int closed_failure(lua_State *L, Proc *p) {
  int64_t until = now_ms() + 100;
  while (!reaped(p) && now_ms() < until) {
    drain_err(p);
    pause_ms(1);
  }
  lua_pushnil(L);
  lua_pushliteral(L, "closed");
  push_ending(L, p);
  return 3;
}

/*
** proc:write(text, timeout_ms [, from]): write text (from byte `from`, 0 by
** default: the bytes a previous call reported written) to stdin within
** timeout_ms (0: what goes now), draining stdout and stderr meanwhile (a
** child blocked writing must not block us). true | nil, "timeout", written
** (bytes of text that went, from included: a partial message, so a caller
** that gives up stops the child) | nil, "closed", ending. A child that
** closed stdin must not end the host: SIGPIPE is ignored, or blocked around
** the write where the host handles it (see pipe_rule).
*/
static int l_write(lua_State *L) {
  Proc *p = check_proc(L);
  size_t len, done;
  const char *s = luaL_checklstring(L, 2, &len);
  lua_Integer ms = luaL_checkinteger(L, 3);
  int64_t until = ms > 0 ? now_ms() + ms : 0;
  lua_Integer from = luaL_optinteger(L, 4, 0);
  luaL_argcheck(L, from >= 0 && (size_t)from <= len, 4, "not a position in the text");
  done = (size_t)from;
  sigset_t pipe_set, old, pending;
  int had_pipe = 0, host_blocks = 1; /* host_blocks: the mask is left as it is */
  if (p->in < 0) return closed_failure(L, p);
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  if (p->hold_pipe) {
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    /* a SIGPIPE can only be pending already where the host blocks it itself */
    host_blocks = sigismember(&old, SIGPIPE);
    if (host_blocks) {
      sigpending(&pending);
      had_pipe = sigismember(&pending, SIGPIPE);
    }
  }
  while (done < len) {
    ssize_t n = write(p->in, s + done, len - done);
    if (n > 0) {
      done += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int64_t left = ms > 0 ? until - now_ms() : 0;
      if (left <= 0) break;
      wait_fds(p, (int)(left > 1000 ? 1000 : left), 1);
      drain_err(p);
      if (!drain_out(p)) break;
      continue;
    }
    if (n < 0 && errno == EPIPE && !p->hold_pipe) forget_pipe_signal();
    else if (n < 0 && errno == EPIPE && !had_pipe) {
      struct timespec zero = {0, 0};
      sigtimedwait(&pipe_set, NULL, &zero);
    }
    if (!host_blocks) pthread_sigmask(SIG_SETMASK, &old, NULL);
    close_fd(&p->in);
    return closed_failure(L, p);
  }
  if (!host_blocks) pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (done == len) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushnil(L);
  lua_pushliteral(L, "timeout");
  lua_pushinteger(L, (lua_Integer)done);
  return 3;
}

/*
** The \n that ends the first line not yet handed out, or NULL when that
** line is not whole yet. The bytes looked at without finding one are not
** looked at again: a long line arriving in many pieces is scanned once.
*/
static char *next_newline(Proc *p) {
  size_t from = p->line_seen > p->line_at ? p->line_seen : p->line_at;
  char *nl = from < p->line_len ? memchr(p->line + from, '\n', p->line_len - from) : NULL;
  if (!nl) p->line_seen = p->line_len;
  return nl;
}

/*
** The next whole line of the buffer (without its \n and a \r before it),
** pushed, and taken off the buffer; 0 when there is none. Blank lines are
** passed over.
*/
static int take_line(lua_State *L, Proc *p) {
  for (;;) {
    char *nl = next_newline(p), *start;
    size_t len, used;
    if (!nl) return 0;
    start = p->line + p->line_at;
    len = (size_t)(nl - start);
    used = len + 1;
    if (len > 0 && start[len - 1] == '\r') len--;
    if (len > LINE_CAP) return -1;
    if (len > 0) lua_pushlstring(L, start, len);
    p->line_at += used;
    p->line_seen = p->line_at;
    if (p->line_at == p->line_len) p->line_at = p->line_len = p->line_seen = 0;
    if (len > 0) return 1;
  }
}

/*
** proc:read_line(timeout_ms): the next line of stdout, waiting up to
** timeout_ms (0: only what is there now). line | nil, "timeout" | nil,
** "closed", ending (stdout ended) | nil, "malformed", why (a line over the
** read cap: stdout is no longer read). With 0, while the engine owns stdout,
** "what is there" is what the engine's turns have read: a caller that waits
** for a line waits on the engine (a turn reads stdout as soon as it is
** ready), and this costs no system call.
*/
static int l_read_line(lua_State *L) {
  Proc *p = check_proc(L);
  lua_Integer ms = luaL_checkinteger(L, 2);
  int64_t until = ms > 0 ? now_ms() + ms : 0;
  for (;;) {
    int got = p->broken ? 0 : take_line(L, p);
    if (got == 1) return 1;
    compact(p);
    if (got < 0 || (!p->broken && past_cap(p)) || (p->out < 0 && p->line_len > LINE_CAP)) {
      p->broken = 1;
      lua_pushnil(L);
      lua_pushliteral(L, "malformed");
      lua_pushfstring(L, "a line longer than the read cap of %d bytes", LINE_CAP);
      return 3;
    }
    if (p->broken || p->out < 0) {
      if (p->out < 0 && !p->broken && p->line_len > 0) { /* a last line without its newline */
        lua_pushlstring(L, p->line, p->line_len);
        p->line_len = p->line_seen = 0;
        return 1;
      }
      p->broken = 1;
      return closed_failure(L, p);
    }
    if (!p->out_owned) own_out(p);
    if (ms <= 0 && p->out_owned) {
      lua_pushnil(L);
      lua_pushliteral(L, "timeout");
      return 2;
    }
    drain_err(p);
    if (!drain_out(p)) luaL_error(L, "not enough memory for the child's output");
    if (next_newline(p) || p->out < 0 || past_cap(p)) continue;
    {
      int64_t left = ms > 0 ? until - now_ms() : 0;
      if (left <= 0) {
        lua_pushnil(L);
        lua_pushliteral(L, "timeout");
        return 2;
      }
      wait_fds(p, (int)(left > 1000 ? 1000 : left), 0);
    }
  }
}

/*
** proc:stderr(): the last 64 KiB the child wrote to stderr (raw bytes: the
** caller applies the text rule before they reach anyone).
*/
static int l_stderr(lua_State *L) {
  Proc *p = check_proc(L);
  size_t first;
  drain_err(p); /* first: what it reads moves the ring's start */
  first = RING_BYTES - p->ring_at;
  if (first >= p->ring_len) {
    lua_pushlstring(L, p->ring + p->ring_at, p->ring_len);
  } else {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addlstring(&b, p->ring + p->ring_at, first);
    luaL_addlstring(&b, p->ring, p->ring_len - first);
    luaL_pushresult(&b);
  }
  return 1;
}

/*
** proc:stderr_since(pos): what the child wrote to stderr after the first pos
** bytes it ever wrote, as far as the ring still holds it (raw bytes: the
** caller applies the text rule), the count to ask from next time, and how
** many bytes past pos the ring no longer held (0 unless the reader fell more
** than 64 KiB behind).
*/
static int l_stderr_since(lua_State *L) {
  Proc *p = check_proc(L);
  lua_Integer pos = luaL_checkinteger(L, 2);
  uint64_t from, want, lost = 0;
  size_t skip, start, first;
  luaL_Buffer b;
  drain_err(p);
  from = pos < 0 ? 0 : (uint64_t)pos;
  if (from > p->ring_total) from = p->ring_total;
  want = p->ring_total - from;
  if (want > p->ring_len) {
    lost = want - p->ring_len;
    want = p->ring_len;
  }
  skip = p->ring_len - (size_t)want;
  start = (p->ring_at + skip) % RING_BYTES;
  first = RING_BYTES - start;
  luaL_buffinit(L, &b);
  if (first >= (size_t)want) {
    luaL_addlstring(&b, p->ring + start, (size_t)want);
  } else {
    luaL_addlstring(&b, p->ring + start, first);
    luaL_addlstring(&b, p->ring, (size_t)want - first);
  }
  luaL_pushresult(&b);
  lua_pushinteger(L, (lua_Integer)p->ring_total);
  lua_pushinteger(L, (lua_Integer)lost);
  return 3;
}

/*
** proc:pid(): the child's process id, or nil once it is closed.
*/
static int l_pid(lua_State *L) {
  Proc *p = check_proc(L);
  if (p->pid > 0) lua_pushinteger(L, p->pid);
  else lua_pushnil(L);
  return 1;
}

/*
** proc:fds(): the descriptors to watch (stdout, stderr, stdin; -1 when
** closed), for a caller that waits on several things at once.
*/
static int l_fds(lua_State *L) {
  Proc *p = check_proc(L);
  lua_pushinteger(L, p->out);
  lua_pushinteger(L, p->err);
  lua_pushinteger(L, p->in);
  return 3;
}

/*
** proc:status(): "running", or "exited", status | "signalled", signal; reaps
** a child that has ended (never waits).
*/
static int l_status(lua_State *L) {
  Proc *p = check_proc(L);
  if (p->state == RUNNING && !reaped(p)) {
    lua_pushliteral(L, "running");
    return 1;
  }
  lua_pushstring(L, p->state == SIGNALLED ? "signalled" : p->state == NEVER ? "never" : "exited");
  lua_pushinteger(L, p->code);
  return 2;
}

/*
** proc:running(): false once the child has ended (it is then reaped, and
** status() names how), else true. Where the engine watches the child's
** pidfd this asks the kernel nothing while the child runs: the engine's
** turns learn of its exit (and the next call here reaps it); a child that
** exited since the last turn is still taken for running, and the caller
** learns of it from its pipes (EPIPE at stdin, the end of stdout). Without
** a pidfd, or in a fork of the host, it asks waitpid, as status() does.
*/
static int l_running(lua_State *L) {
  Proc *p = check_proc(L);
  if (p->state == RUNNING && p->pidfd >= 0 && p->generation == fork_generation) lua_pushboolean(L, 1);
  else lua_pushboolean(L, p->state == RUNNING && !reaped(p));
  return 1;
}

/*
** proc:close([grace_ms]): the shutdown (see shutdown_all), each wait up to
** grace_ms (default 2000: a caller inside a budget passes less);
** idempotent; also __close and __gc. Returns the phrase naming how the
** child ended.
*/
static int l_close(lua_State *L) {
  Proc *p = luaL_checkudata(L, 1, PROC_MT);
  lua_Integer grace = lua_isinteger(L, 2) ? lua_tointeger(L, 2) : GRACE_MS;
  if (grace < 0 || grace > GRACE_MS) grace = GRACE_MS;
  if (p->pid > 0 && p->owner != getpid()) p->pid = 0; /* a fork of the host: its parent ends the child */
  if (p->pid != 0 || p->in >= 0 || p->out >= 0 || p->err >= 0) shutdown_all(&p, 1, (int)grace);
  free(p->line);
  p->line = NULL;
  p->line_len = p->line_size = p->line_at = p->line_seen = 0;
  push_ending(L, p);
  return 1;
}

/*
** The module's entries and the handle's metatable (made once per state).
*/
void mcp_register_process(lua_State *L) {
  static const luaL_Reg methods[] = {
    {"write", l_write},   {"read_line", l_read_line},
    {"stderr", l_stderr}, {"stderr_since", l_stderr_since},
    {"pid", l_pid},       {"fds", l_fds},
    {"status", l_status}, {"running", l_running},
    {"close", l_close},   {NULL, NULL},
  };
  if (luaL_newmetatable(L, PROC_MT)) {
    luaL_newlibtable(L, methods);
    lua_pushvalue(L, -2); /* each method's upvalue: the metatable check_proc compares with */
    luaL_setfuncs(L, methods, 1);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, l_close);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_spawn);
  lua_setfield(L, -2, "spawn");
  lua_pushinteger(L, LINE_CAP);
  lua_setfield(L, -2, "process_line_cap");
}

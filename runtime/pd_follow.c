/* Following exec'd children whose parent scrubbed the environment.
 *
 * A child normally inherits LD_PRELOAD and PYDYN_SHM and so loads the module
 * of its own class.  A parent may hand execve a fresh envp (env -i, Python's
 * Popen(env={...}), a daemon's clearenv()): the exec and spawn family is
 * interposed here and pydyn's variables are put back before the real call.
 * Only the variables pydyn owns are touched; a user's own LD_PRELOAD entries
 * are kept, ours goes first.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <limits.h>
#include <unistd.h>

#include "pd_internal.h"

extern char **environ;

static char pd_env_shm[256];     /* "PYDYN_SHM=..." */
static char pd_env_mark[1024];   /* "PYDYN_PRELOAD=..." */
static char pd_preload[1024];    /* our LD_PRELOAD entry */

static void pd_follow_resolve(void);

/* Called by the constructor of an attached process. */
void pd_follow_init(void)
{
    pd_follow_resolve();
    const char *shm = getenv("PYDYN_SHM"), *entry = getenv("PYDYN_PRELOAD");
    if (!shm || !entry || strlen(entry) >= sizeof pd_preload)
        return;
    snprintf(pd_env_shm, sizeof pd_env_shm, "PYDYN_SHM=%s", shm);
    snprintf(pd_env_mark, sizeof pd_env_mark, "PYDYN_PRELOAD=%s", entry);
    snprintf(pd_preload, sizeof pd_preload, "%s", entry);
}

static const char *pd_env_get(char *const envp[], const char *name, size_t len)
{
    for (size_t i = 0; envp && envp[i]; i++)
        if (strncmp(envp[i], name, len) == 0 && envp[i][len] == '=')
            return envp[i] + len + 1;
    return NULL;
}

static int pd_has_entry(const char *list, const char *entry)
{
    size_t n = strlen(entry);
    for (const char *p = list; p && *p;) {
        const char *end = p + strcspn(p, ": ");
        if ((size_t)(end - p) == n && strncmp(p, entry, n) == 0)
            return 1;
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* How many pointers and bytes pd_fixed_env may need for `envp`. */
static size_t pd_env_count(char *const envp[])
{
    size_t n = 0;
    while (envp && envp[n])
        n++;
    return n + 4;
}

static size_t pd_prebuf_len(char *const envp[])
{
    const char *pre = pd_env_get(envp, "LD_PRELOAD", 10);
    return strlen(pd_preload) + (pre ? strlen(pre) : 0) + 16;
}

/* Returns envp itself when nothing is missing, else `out` (room for pd_env_count
 * pointers) filled with pydyn's variables restored, the LD_PRELOAD entry in `prebuf`
 * (pd_prebuf_len bytes).  No malloc: the exec family is async-signal-safe, called
 * from signal handlers and from vfork children (which share the parent's heap, whose
 * lock another thread may hold), and so is this. */
static char **pd_fixed_env(char *const envp[], char **out, char *prebuf, size_t prelen)
{
    if (!pd_preload[0])
        return (char **)envp;
    const char *pre = pd_env_get(envp, "LD_PRELOAD", 10);
    int need_pre = !pd_has_entry(pre, pd_preload);
    int need_shm = pd_env_get(envp, "PYDYN_SHM", 9) == NULL;
    int need_mark = pd_env_get(envp, "PYDYN_PRELOAD", 13) == NULL;
    if (!need_pre && !need_shm && !need_mark)
        return (char **)envp;
    size_t j = 0;
    for (size_t i = 0; envp && envp[i]; i++)
        if (!(need_pre && strncmp(envp[i], "LD_PRELOAD=", 11) == 0))
            out[j++] = envp[i];
    if (need_pre) {
        snprintf(prebuf, prelen, "LD_PRELOAD=%s%s%s", pd_preload, pre && *pre ? ":" : "",
                 pre ? pre : "");
        out[j++] = prebuf;
    }
    if (need_shm)
        out[j++] = pd_env_shm;
    if (need_mark)
        out[j++] = pd_env_mark;
    out[j] = NULL;
    return out;
}

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);
typedef int (*execvpe_fn)(const char *, char *const[], char *const[]);
typedef int (*spawn_fn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
                        const posix_spawnattr_t *, char *const[], char *const[]);

/* The real functions, looked up by pd_follow_init (dlsym takes the loader's lock and
 * may allocate: not in a signal handler or a vfork child), else at the first call. */
static execve_fn real_execve;
static execvpe_fn real_execvpe;
static fexecve_fn real_fexecve;
static spawn_fn real_posix_spawn, real_posix_spawnp;
#define PD_NEXT_FN(name) \
    (real_##name ? real_##name : (real_##name = (__typeof__(real_##name))dlsym(RTLD_NEXT, #name)))

static void pd_follow_resolve(void)
{
    (void)PD_NEXT_FN(execve), (void)PD_NEXT_FN(execvpe), (void)PD_NEXT_FN(fexecve);
    (void)PD_NEXT_FN(posix_spawn), (void)PD_NEXT_FN(posix_spawnp);
}

/* Calls the real `name` with pydyn's variables restored in `envp`; the copy lives on
 * this frame (an environment of more pointers than fit is passed as it is). */
#define PD_ENV_MAX 16384
#define PD_WITH_FIXED_ENV(name, call)                                              \
    do {                                                                           \
        if (!PD_NEXT_FN(name)) {                                                   \
            errno = ENOSYS;                                                        \
            return -1;                                                             \
        }                                                                          \
        size_t n_ = pd_env_count(envp), len_ = pd_prebuf_len(envp);               \
        int fits_ = n_ <= PD_ENV_MAX && len_ <= 65536;                             \
        char *slots_[fits_ ? n_ : 1];                                              \
        char prebuf_[fits_ ? len_ : 1];                                            \
        char **env = fits_ ? pd_fixed_env(envp, slots_, prebuf_, len_) : (char **)envp; \
        return call;                                                               \
    } while (0)

/* process.end of the image an exec replaces is fired before the call (nothing of this
 * image runs after it succeeds), when the exec is bound to succeed as far as can be
 * told: a shell tries execve on each PATH directory in turn, and those that fail must
 * not end the process. */
static int pd_exec_bound(const char *path)
{
    struct stat st;
    return access(path, X_OK) == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static void pd_exec_ends(const char *path)
{
    if (path && pd_exec_bound(path)) /* (a name without a '/' is in the current directory) */
        pd_process_exec();
}

/* execvpe's search of PATH is libc's own, whose execve calls do not come through the
 * one above: the same search (PATH, else confstr's default; an empty entry is the
 * current directory), its first executable regular file ending the image.  On the
 * stack, no malloc: async-signal-safe, as execvp is. */
static void pd_exec_search_ends(const char *file)
{
    if (!file || !*file || strchr(file, '/')) {
        pd_exec_ends(file);
        return;
    }
    const char *path = getenv("PATH");
    char dflt[256];
    if (!path) {
        size_t n = confstr(_CS_PATH, dflt, sizeof dflt);
        path = n > 0 && n <= sizeof dflt ? dflt : "/bin:/usr/bin";
    }
    size_t flen = strlen(file);
    char cand[PATH_MAX];
    for (const char *p = path;; p++) {
        const char *end = strchrnul(p, ':');
        size_t dlen = (size_t)(end - p);
        if (dlen + 1 + flen < sizeof cand) {
            memcpy(cand, p, dlen);
            size_t at = dlen;
            if (dlen)
                cand[at++] = '/';
            memcpy(cand + at, file, flen + 1);
            if (pd_exec_bound(cand)) {
                pd_process_exec();
                return;
            }
        }
        if (!*end)
            return;
        p = end;
    }
}

PD_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    pd_exec_ends(path);
    PD_WITH_FIXED_ENV(execve, real_execve(path, argv, env));
}

PD_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    pd_exec_search_ends(file);
    PD_WITH_FIXED_ENV(execvpe, real_execvpe(file, argv, env));
}

PD_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    pd_process_exec();
    PD_WITH_FIXED_ENV(fexecve, real_fexecve(fd, argv, env));
}

/* execv/execvp use `environ`, which the program may have cleared. */
PD_EXPORT int execv(const char *path, char *const argv[]) { return execve(path, argv, environ); }
PD_EXPORT int execvp(const char *file, char *const argv[]) { return execvpe(file, argv, environ); }

/* execl's arguments (and execle's envp) into `argv`, which has room for pd_count_args. */
static size_t pd_count_args(const char *arg0, va_list ap)
{
    size_t n = 1;
    if (arg0)
        while (va_arg(ap, char *))
            n++;
    return n + 1;
}

static void pd_collect_args(const char *arg0, va_list ap, char **argv, char ***envp_out)
{
    size_t n = 0;
    argv[n++] = (char *)arg0;
    for (;;) {
        char *a = arg0 ? va_arg(ap, char *) : NULL;
        argv[n++] = a;
        if (!a)
            break;
    }
    if (envp_out)
        *envp_out = va_arg(ap, char **);
}

/* On the stack, as glibc's own execl does: async-signal-safe. */
#define PD_EXECL_BODY(call, with_env)                                 \
    va_list ap, count;                                                \
    va_start(ap, arg);                                                \
    va_copy(count, ap);                                               \
    size_t n_ = pd_count_args(arg, count);                            \
    va_end(count);                                                    \
    char *argv[n_];                                                   \
    char **envp = environ;                                            \
    pd_collect_args(arg, ap, argv, with_env ? &envp : NULL);          \
    va_end(ap);                                                       \
    return call

PD_EXPORT int execl(const char *path, const char *arg, ...)
{
    PD_EXECL_BODY(execve(path, argv, envp), 0);
}

PD_EXPORT int execlp(const char *file, const char *arg, ...)
{
    PD_EXECL_BODY(execvpe(file, argv, envp), 0);
}

PD_EXPORT int execle(const char *path, const char *arg, ...)
{
    PD_EXECL_BODY(execve(path, argv, envp), 1);
}

PD_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                          const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    PD_WITH_FIXED_ENV(posix_spawn, real_posix_spawn(pid, path, fa, attr, argv, env));
}

PD_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                           const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    PD_WITH_FIXED_ENV(posix_spawnp, real_posix_spawnp(pid, file, fa, attr, argv, env));
}

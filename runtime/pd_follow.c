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
#include <unistd.h>

#include "pd_runtime.h"

extern char **environ;

static char pd_env_shm[256];     /* "PYDYN_SHM=..." */
static char pd_env_mark[1024];   /* "PYDYN_PRELOAD=..." */
static char pd_preload[1024];    /* our LD_PRELOAD entry */

/* Called by the constructor of an attached process. */
void pd_follow_init(void)
{
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

/* Returns envp itself when nothing is missing, else a malloc'ed copy with
 * pydyn's variables restored (the exec either replaces the image or fails,
 * and a failed exec's copy is freed by the caller). */
static char **pd_fixed_env(char *const envp[], char **freeme)
{
    *freeme = NULL;
    if (!pd_preload[0])
        return (char **)envp;
    const char *pre = pd_env_get(envp, "LD_PRELOAD", 10);
    int need_pre = !pd_has_entry(pre, pd_preload);
    int need_shm = pd_env_get(envp, "PYDYN_SHM", 9) == NULL;
    int need_mark = pd_env_get(envp, "PYDYN_PRELOAD", 13) == NULL;
    if (!need_pre && !need_shm && !need_mark)
        return (char **)envp;
    size_t n = 0;
    while (envp && envp[n])
        n++;
    size_t prelen = strlen(pd_preload) + (pre ? strlen(pre) : 0) + 16;
    char **out = malloc((n + 4) * sizeof *out + prelen);
    if (!out)
        return (char **)envp;
    char *prebuf = (char *)(out + n + 4);
    size_t j = 0;
    for (size_t i = 0; i < n; i++)
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
    *freeme = (char *)out;
    return out;
}

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);
typedef int (*execvpe_fn)(const char *, char *const[], char *const[]);
typedef int (*spawn_fn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
                        const posix_spawnattr_t *, char *const[], char *const[]);

/* Calls the real `call` with pydyn's variables restored in `envp`; keeps the
 * callee's errno across freeing the copy. */
#define PD_WITH_FIXED_ENV(name, type, call)                                        \
    do {                                                                           \
        PD_REAL(name, type);                                                       \
        char *freeme;                                                              \
        char **env = pd_fixed_env(envp, &freeme);                                  \
        int rc = call;                                                             \
        int saved = errno;                                                         \
        free(freeme);                                                              \
        errno = saved;                                                             \
        return rc;                                                                 \
    } while (0)

PD_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    PD_WITH_FIXED_ENV(execve, execve_fn, real_execve(path, argv, env));
}

PD_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    PD_WITH_FIXED_ENV(execvpe, execvpe_fn, real_execvpe(file, argv, env));
}

PD_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    PD_WITH_FIXED_ENV(fexecve, fexecve_fn, real_fexecve(fd, argv, env));
}

/* execv/execvp use `environ`, which the program may have cleared. */
PD_EXPORT int execv(const char *path, char *const argv[]) { return execve(path, argv, environ); }
PD_EXPORT int execvp(const char *file, char *const argv[]) { return execvpe(file, argv, environ); }

static char **pd_collect_args(const char *arg0, va_list ap, char ***envp_out)
{
    size_t cap = 16, n = 0;
    char **argv = malloc(cap * sizeof *argv);
    if (!argv)
        return NULL;
    argv[n++] = (char *)arg0;
    for (;;) {
        char *a = arg0 ? va_arg(ap, char *) : NULL;
        if (n == cap) {
            char **grown = realloc(argv, (cap *= 2) * sizeof *argv);
            if (!grown) {
                free(argv);
                return NULL;
            }
            argv = grown;
        }
        argv[n++] = a;
        if (!a)
            break;
    }
    if (envp_out)
        *envp_out = va_arg(ap, char **);
    return argv;
}

#define PD_EXECL_BODY(call, with_env)                               \
    va_list ap;                                                     \
    va_start(ap, arg);                                              \
    char **envp = environ;                                          \
    char **argv = pd_collect_args(arg, ap, with_env ? &envp : NULL); \
    va_end(ap);                                                     \
    if (!argv) {                                                    \
        errno = ENOMEM;                                             \
        return -1;                                                  \
    }                                                               \
    int rc = call;                                                  \
    int saved = errno;                                              \
    free(argv);                                                     \
    errno = saved;                                                  \
    return rc

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
    PD_WITH_FIXED_ENV(posix_spawn, spawn_fn, real_posix_spawn(pid, path, fa, attr, argv, env));
}

PD_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                           const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    PD_WITH_FIXED_ENV(posix_spawnp, spawn_fn, real_posix_spawnp(pid, file, fa, attr, argv, env));
}

/* Objects loaded later: dlopen/dlmopen arm the probes of a new object when it
 * has loaded, dlclose forgets them once it has really gone.
 *
 * No lock of ours is held across the real dlopen/dlclose.  The loader runs
 * library constructors and destructors inside those calls, with its own lock
 * held, and they may call dlopen/dlclose again (libpam's pam_end dlcloses its
 * modules, a C++ plugin's static destructor dlcloses another); another thread
 * may fork meanwhile.  A lock of ours around the call would be taken in a
 * different order from the loader's by those nested calls, and a process
 * forked while another thread held it would inherit it held by a thread it does
 * not have.  So the wrappers call the real function, then bring the tables up
 * to date (pd_dl_sync): one pass that retires every armed object no longer in
 * the link map and arms every object not armed yet.  A pass touches only this
 * module's tables and the objects' code, and asks the loader nothing but
 * dl_iterate_phdr (its short write lock, never held while a constructor runs),
 * so waiting for another thread's pass cannot close a cycle with the loader's
 * lock.  Arming happens inside dl_iterate_phdr's callback: an object cannot be
 * unmapped under it.  The pass lock is a word owned by its thread (pd_lock.h):
 * a pass re-entered on the same thread (a signal handler's dlopen) leaves the
 * work to the pass it interrupted, which goes round again; fork takes it in its
 * prepare handler, so a child never starts with a half-done pass, and resets it.
 *
 * Arming runs after the real dlopen has returned, so probes in the object's own
 * constructors do not fire (unless another thread's pass runs meanwhile).
 *
 * glibc searches a bare file name with the *caller's* DT_RUNPATH: being the
 * caller now, we repeat that part of the search (pd_caller_path).  Objects
 * loaded by libc itself (NSS, iconv: __libc_dlopen) are armed at the next pass.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_lock.h"
#include "pd_runtime.h"

static uint32_t pd_dl_word; /* the pass lock: its holder's tid, pd_lock.h */
static int pd_dl_dirty;     /* a dlopen/dlclose happened since the last pass began */
static __thread int pd_dl_forking; /* this thread took the pass lock for fork */

/* Brings the armed tables up to date with the link map; returns at once when this
 * thread is inside a pass already (that pass sees pd_dl_dirty and goes round). */
static void pd_dl_sync(void)
{
    __atomic_store_n(&pd_dl_dirty, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&pd_dl_dirty, __ATOMIC_SEQ_CST)) {
        int rc = pd_lock(&pd_dl_word);
        if (rc == PD_LOCK_DEADLOCK || rc == PD_LOCK_TIMEOUT) /* the holder goes round again */
            return;
        while (__atomic_exchange_n(&pd_dl_dirty, 0, __ATOMIC_SEQ_CST)) {
            pd_disarm_unloaded();
            pd_got_forget_unloaded();
            pd_arm_loaded();
            pd_got_redirect_loaded();
        }
        pd_unlock(&pd_dl_word);
    }
}

/* For -x attach and detach, which change the same tables (pd_got.c): 1 if taken.  Not
 * taken when a thread the launcher stopped holds it: the tables are then frozen mid-pass
 * anyway, and waiting would hang the attach. */
int pd_dl_tables_lock(void)
{
    int rc = pd_lock(&pd_dl_word);
    return rc == PD_LOCK_OK || rc == PD_LOCK_RECOVERED;
}
void pd_dl_tables_unlock(int taken)
{
    if (taken)
        pd_unlock(&pd_dl_word);
}

static void pd_dl_prefork(void)
{
    int rc = pd_lock(&pd_dl_word);
    pd_dl_forking = rc == PD_LOCK_OK || rc == PD_LOCK_RECOVERED;
}

static void pd_dl_postfork_parent(void)
{
    if (pd_dl_forking)
        pd_unlock(&pd_dl_word);
    pd_dl_forking = 0;
}

/* The word names a thread of the parent: the child's only thread is the forking one,
 * and any pass it was inside (a fork from a signal handler) it finishes on return. */
static void pd_dl_postfork_child(void)
{
    __atomic_store_n(&pd_dl_word, 0, __ATOMIC_RELEASE);
    pd_dl_forking = 0;
}

__attribute__((constructor)) static void pd_dl_init(void)
{
    pd_lock_setup(); /* its child handler (the cached tid) runs before ours */
    pthread_atfork(pd_dl_prefork, pd_dl_postfork_parent, pd_dl_postfork_child);
}

typedef void *(*dlopen_fn)(const char *, int);
typedef void *(*dlmopen_fn)(Lmid_t, const char *, int);
typedef int (*dlclose_fn)(void *);

/* The library search path of the object containing `addr` (malloc'ed), or NULL. */
static Dl_serinfo *pd_search_path(const void *addr)
{
    Dl_info info;
    struct link_map *lm = NULL;
    Dl_serinfo size;
    if (!dladdr1(addr, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm ||
        dlinfo(lm, RTLD_DI_SERINFOSIZE, &size) != 0)
        return NULL;
    Dl_serinfo *si = malloc(size.dls_size);
    if (!si)
        return NULL;
    *si = size;
    if (dlinfo(lm, RTLD_DI_SERINFO, si) != 0) {
        free(si);
        return NULL;
    }
    return si;
}

static int pd_in_path(const Dl_serinfo *si, const char *dir)
{
    for (unsigned i = 0; si && i < si->dls_cnt; i++)
        if (strcmp(si->dls_serpath[i].dls_name, dir) == 0)
            return 1;
    return 0;
}

/* For a bare `file` not loaded yet: the path the caller's search finds first, when
 * that is in a directory only the caller searches (its RUNPATH/RPATH); else NULL and
 * the real dlopen's own search gives the same answer. */
static char *pd_caller_path(const char *file, const void *caller)
{
    Dl_serinfo *theirs = pd_search_path(caller), *ours = pd_search_path((void *)pd_caller_path);
    char *found = NULL;
    for (unsigned i = 0; theirs && i < theirs->dls_cnt; i++) {
        const char *dir = theirs->dls_serpath[i].dls_name;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path ||
            access(path, F_OK) != 0)
            continue;
        if (!pd_in_path(ours, dir))
            found = strdup(path);
        break;
    }
    free(theirs);
    free(ours);
    return found;
}

static void *pd_open(const char *file, int mode, const void *caller, void *(*open)(const char *, int, void *),
                     void *arg)
{
    char *path = NULL;
    if (caller && file && !strchr(file, '/') && !(mode & RTLD_NOLOAD)) {
        void *loaded = open(file, RTLD_LAZY | RTLD_NOLOAD, arg);
        if (loaded) {
            PD_REAL(dlclose, dlclose_fn);
            real_dlclose(loaded);
        } else {
            path = pd_caller_path(file, caller);
        }
    }
    void *h = path ? open(path, mode, arg) : NULL;
    if (!h)
        h = open(file, mode, arg);
    int saved = errno;
    free(path);
    if (h)
        pd_dl_sync();
    errno = saved;
    return h;
}

static void *pd_real_dlopen(const char *file, int mode, void *arg)
{
    (void)arg;
    PD_REAL(dlopen, dlopen_fn);
    return real_dlopen(file, mode);
}

static void *pd_real_dlmopen(const char *file, int mode, void *arg)
{
    PD_REAL(dlmopen, dlmopen_fn);
    return real_dlmopen(*(Lmid_t *)arg, file, mode);
}

/* A handle on `lib` if it is loaded (for pd_unwind.c), without a new reference. */
void *pd_dlopen_noload(const char *lib)
{
    void *h = pd_real_dlopen(lib, RTLD_LAZY | RTLD_NOLOAD, NULL);
    if (h) {
        PD_REAL(dlclose, dlclose_fn);
        real_dlclose(h); /* still loaded: the caller's frame is in it */
    }
    return h;
}

PD_EXPORT void *dlopen(const char *file, int mode)
{
    return pd_open(file, mode, __builtin_return_address(0), pd_real_dlopen, NULL);
}

PD_EXPORT void *dlmopen(Lmid_t lmid, const char *file, int mode)
{
    /* other namespaces search their own way: no caller path */
    return pd_open(file, mode, lmid == LM_ID_BASE ? __builtin_return_address(0) : NULL,
                   pd_real_dlmopen, &lmid);
}

PD_EXPORT int dlclose(void *handle)
{
    PD_REAL(dlclose, dlclose_fn);
    int rc = real_dlclose(handle);
    if (rc == 0) {
        int saved = errno;
        pd_dl_sync();
        errno = saved;
    }
    return rc;
}

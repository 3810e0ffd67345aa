/* Objects loaded later: dlopen/dlmopen arm the probes of a new object
 * when it has loaded, dlclose forgets them once it has really gone.
 *
 * The calls are serialized by one recursive mutex (a library constructor or
 * destructor may dlopen/dlclose again).  Arming runs after the real dlopen has
 * returned, so probes in the object's own constructors do not fire.  dlclose
 * cannot know beforehand whether the object will unload (other references), so
 * it never touches the object: after the real dlclose, the sites of every
 * armed object whose load address is no longer in the link map are dropped
 * from the table and their stubs unmapped.
 *
 * glibc searches a bare file name with the *caller's* DT_RUNPATH: being the
 * caller now, we repeat that part of the search (pd_caller_path).  Objects
 * loaded by libc itself (NSS, iconv: __libc_dlopen) are not seen, and such an
 * object's constructor calling dlopen while another thread is in ours would
 * deadlock on the mutex (ld.so's lock is taken first there).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_runtime.h"

static pthread_mutex_t pd_dl_mutex = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

/* A fork while another thread is in dlopen must not leave the child's mutex held. */
static void pd_dl_lock(void) { pthread_mutex_lock(&pd_dl_mutex); }
static void pd_dl_unlock(void) { pthread_mutex_unlock(&pd_dl_mutex); }
__attribute__((constructor)) static void pd_dl_init(void)
{
    pthread_atfork(pd_dl_lock, pd_dl_unlock, pd_dl_unlock);
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
    pd_dl_lock();
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
    free(path);
    if (h) {
        pd_arm_loaded();
        pd_got_redirect_loaded();
    }
    pd_dl_unlock();
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
    pd_dl_lock();
    int rc = real_dlclose(handle);
    if (rc == 0) {
        pd_disarm_unloaded();
        pd_got_forget_unloaded();
    }
    pd_dl_unlock();
    return rc;
}

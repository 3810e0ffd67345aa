/* Attaching to a running process (pydyn -x PID, launcher/attach.py).
 *
 * The launcher stops every thread with ptrace, makes one of them call dlopen on
 * this module and then pd_attach_live; later pd_detach_live.  Nothing here runs
 * unless the launcher calls it: the constructor finds no PYDYN_SHM in a -x process.
 *
 * The session's variables reach the module as arguments of pd_attach_live rather
 * than through the environment before dlopen: an injected setenv would be one more
 * call, and the constructor could not tell "not in a session" from "not yet".  The
 * module then puts them into the process's own environment, so children it forks
 * and execs after the attach load their module as under -c.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd_internal.h"
#include "pd_tramp.h"

#define PD_NENV 4
static const char *const pd_env_names[PD_NENV] = {"PYDYN_SHM", "PYDYN_PRELOAD",
                                                  "PYDYN_PROBE_MODE", "LD_PRELOAD"};
static char *pd_env_before[PD_NENV]; /* the process's own values, NULL if unset */
static int pd_env_set;

/* Sets our variables, remembering what the process had; LD_PRELOAD keeps the
 * process's own entries after ours. */
static int pd_env_enter(const char *shm, const char *entry, const char *mode)
{
    for (int i = 0; i < PD_NENV; i++) {
        const char *v = getenv(pd_env_names[i]);
        pd_env_before[i] = v ? strdup(v) : NULL;
    }
    pd_env_set = 1;
    const char *user = pd_env_before[3];
    size_t n = strlen(entry) + (user ? strlen(user) : 0) + 2;
    char *preload = malloc(n);
    if (!preload)
        return -1;
    if (user && *user)
        snprintf(preload, n, "%s:%s", entry, user);
    else
        snprintf(preload, n, "%s", entry);
    const char *values[PD_NENV] = {shm, entry, mode, preload};
    int rc = 0;
    for (int i = 0; i < PD_NENV; i++)
        if (values[i][0] && setenv(pd_env_names[i], values[i], 1) != 0)
            rc = -1;
    free(preload);
    return rc;
}

static void pd_env_leave(void)
{
    if (!pd_env_set)
        return;
    for (int i = 0; i < PD_NENV; i++) {
        if (pd_env_before[i])
            setenv(pd_env_names[i], pd_env_before[i], 1);
        else
            unsetenv(pd_env_names[i]);
        free(pd_env_before[i]);
        pd_env_before[i] = NULL;
    }
    pd_env_set = 0;
}

/* 0 once attached and armed, else a PD_ATTACH_* error (launcher/session.py names them;
 * -7: the environment could not be set).  Every other thread of the process is
 * stopped while this runs. */
PD_EXPORT int pd_attach_live(const char *shm, const char *preload_entry, const char *probe_mode)
{
    if (pd_env_enter(shm, preload_entry, probe_mode) != 0) {
        pd_env_leave();
        return -7;
    }
    pd_xmm_always = 1; /* dlopened: TLS descriptors here may call malloc (pd_runtime.h) */
    pd_ret_live = 1;   /* threads may be inside probed functions: no exit sites */
    pd_patch_deferred = 1; /* the code is written by pd_attach_commit */
    int rc = pd_session_attach(shm);
    if (rc != 0) {
        pd_patch_commit(0);
        pd_env_leave();
    }
    else
        pd_got_redirect_all(); /* nothing interposes by symbol: pd_got.c */
    return rc;
}

/* Called after pd_attach_live with every thread of the process stopped again (other
 * threads may have run while pd_attach_live waited for a lock) and the pcs of all of
 * them (the one that ran the calls with its own pc back): makes the code writes that
 * arming recorded, then gives each thread stopped inside a window a jump now covers the
 * address it must resume at instead.  Returns how many pcs changed; the launcher sets
 * those threads' registers. */
PD_EXPORT uint32_t pd_attach_commit(uintptr_t *pcs, uint32_t n)
{
    pd_patch_commit(1); /* a write that fails is named by pd_patch */
    uint32_t moved = 0;
    for (uint32_t i = 0; i < n; i++) {
        uintptr_t to = pd_tramp_window_pc(pcs[i]);
        moved += to != pcs[i];
        pcs[i] = to;
    }
    return moved;
}

/* Restores the process: GOT entries, sites, semaphores, environment, return addresses;
 * the module stays loaded but inert.  counts[0..5] = sites restored, bytes written
 * back, semaphores decremented, GOT entries restored, GOT entries not redirected or
 * not restored, hooked frames given their return address back. */
PD_EXPORT void pd_detach_live(uint32_t counts[6])
{
    counts[3] = counts[4] = 0;
    pd_got_restore_all(counts + 3);
    uint32_t bytes = 0, semas = 0;
    uint32_t sites = pd_disarm_all(&bytes, &semas);
    pd_env_leave();
    pd_go_inert();
    counts[5] = pd_shadow_unhook_all(); /* inert: no frame is hooked after this */
    counts[0] = sites;
    counts[1] = bytes;
    counts[2] = semas;
}

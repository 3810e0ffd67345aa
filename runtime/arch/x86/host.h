/* How an x86 process sees itself (pd_internal.h): natively, as the kernel says. */
#ifndef PD_ARCH_HOST_H_
#define PD_ARCH_HOST_H_

#include <string.h>

/* The comm pd_execname reports, fixed up in place: nothing to fix. */
static inline void pd_arch_comm(char name[17]) { (void)name; }

/* Whether `resolved` (a loaded object's realpath) is the file `path` names. */
static inline int pd_arch_same_file(const char *resolved, const char *path)
{
    return strcmp(resolved, path) == 0;
}

#endif

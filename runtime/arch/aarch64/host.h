/* How an aarch64 process sees itself (pd_internal.h): natively, or as a qemu-user
 * guest (an aarch64 target on an x86-64 host, tests/test_aarch64.py), whose comm and
 * loader paths are the emulator's until fixed up here. */
#ifndef PD_ARCH_HOST_H_
#define PD_ARCH_HOST_H_

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Under qemu-user the kernel's comm is the emulator's ("qemu-aarch64") until the guest
 * renames itself; report what a native kernel would. */
static inline void pd_arch_comm(char name[17])
{
    if (strncmp(name, "qemu-", 5) == 0 && strncmp(program_invocation_short_name, "qemu-", 5) != 0)
        snprintf(name, 17, "%s", program_invocation_short_name);
}

/* Under qemu-user the loader names sysroot libraries by guest paths (/lib/libc.so.6
 * for the launcher's /usr/aarch64-linux-gnu/lib/libc.so.6); stat sees both through
 * qemu's -L mapping: the same file is the same inode. */
static inline int pd_arch_same_file(const char *resolved, const char *path)
{
    struct stat a, b;
    if (strcmp(resolved, path) != 0)
        return stat(resolved, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
               a.st_ino == b.st_ino;
    return 1;
}

#endif

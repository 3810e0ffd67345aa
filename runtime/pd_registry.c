/* Joining a session (the preloaded module's constructor, or pd_attach.c under -x):
 * the segment mapped and checked, this process registered in its process table, its
 * sites armed; fork, exec and exit kept in the table; going inert at a detach. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pd_internal.h"
#include "pd_lock.h"

/* ---- attaching and the process registry ---------------------------------- */

static char pd_hex_buf[2 * PD_CHECKSUM_LEN + 1];
static const char *pd_hex(const uint8_t *sum)
{
    for (int i = 0; i < 8; i++)
        snprintf(pd_hex_buf + 2 * i, 3, "%02x", sum[i]);
    return pd_hex_buf;
}

/* `name` is NAME or NAME:FD.  A root session's launcher leaves the segment open as FD
 * in its command (0600, root's): a process that has since become another user
 * (runuser, setpriv, a daemon's setuid) cannot open it by name, but maps it through
 * that descriptor, once fstat shows it is the very file NAME names. */
static int pd_open_segment(const char *name)
{
    char base[256];
    const char *colon = strchr(name, ':');
    size_t n = colon ? (size_t)(colon - name) : strlen(name);
    if (n >= sizeof base)
        return -1;
    memcpy(base, name, n);
    base[n] = 0;
    int fd = shm_open(base, O_RDWR, 0);
    if (fd >= 0 || !colon)
        return fd;
    char *end;
    long inherited = strtol(colon + 1, &end, 10);
    char path[sizeof base + 16];
    struct stat by_name, by_fd;
    snprintf(path, sizeof path, "/dev/shm/%s", base + (base[0] == '/'));
    if (*end || inherited < 3 || inherited > INT_MAX || stat(path, &by_name) != 0 ||
        fstat((int)inherited, &by_fd) != 0 || by_fd.st_dev != by_name.st_dev ||
        by_fd.st_ino != by_name.st_ino)
        return -1;
    return fcntl((int)inherited, F_DUPFD_CLOEXEC, 0);
}

int pd_map_segment(const char *name)
{
    int fd = pd_open_segment(name);
    if (fd < 0)
        return PD_ATTACH_NOSHM;
    struct stat st;
    /* A segment of another user is never trusted (it could feed us pointers); root's
     * is (root can change this process anyway). */
    if (fstat(fd, &st) != 0 || (st.st_uid != geteuid() && st.st_uid != 0) ||
        (size_t)st.st_size < sizeof(struct pd_header)) {
        close(fd);
        return PD_ATTACH_BADSEG;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return PD_ATTACH_NOSHM;
    struct pd_header *h = m;
    if (h->magic != PD_MAGIC || h->layout_version != PD_LAYOUT_VERSION ||
        h->segment_size != (uint64_t)st.st_size) {
        munmap(m, (size_t)st.st_size);
        return PD_ATTACH_BADSEG;
    }
    pd_seg = m;
    pd_hdr = h;
    pd_seg_size = (size_t)st.st_size;
    if (memcmp(h->checksum, pd_module.checksum, PD_CHECKSUM_LEN) != 0)
        return PD_ATTACH_MISMATCH;
    return PD_ATTACH_OK;
}

void pd_unmap(void)
{
    pd_fast_env_set(0);
    if (pd_seg)
        munmap(pd_seg, pd_seg_size);
    pd_seg = NULL;
    pd_hdr = NULL;
}

static struct pd_proc *pd_proc_at(uint32_t i)
{
    return (struct pd_proc *)(pd_seg + pd_hdr->proctab_off + (uint64_t)i * pd_hdr->proc_entry_size);
}

static void pd_copy_name(uint8_t *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    memset(dst + n, 0, cap - n);
}

/* This process into a free entry of the table.  The launcher copies out the entry of
 * every process that is gone and frees it (launcher/session.py), so a long session
 * recycles the table; an entry is only ever claimed here, free, under the lock (the
 * launcher stores each state with one store: shmlayout/view.py).  An
 * exec'd image re-registers under the same pid: its old entry is marked EXECED for the
 * launcher's accounting.  With no free entry (more processes alive at once than
 * entries, or the launcher behind a burst) the process waits up to PD_REGISTER_WAIT_MS
 * for one, then runs unlisted: its probes run as ever, and it is counted in
 * procs_unlisted (not as skipped probes: none was skipped).  NULL then. */
#define PD_REGISTER_WAIT_MS 200
static int pd_has_process_probes(uint32_t kind);

static int pd_end_fired; /* this image's process.end probes have run (below) */

static struct pd_proc *pd_register(uint32_t state)
{
    pid_t pid = getpid();
    for (int waited = 0;; waited += 5) {
        int rc = pd_lock(&pd_hdr->proctab_lock);
        if (rc == PD_LOCK_TIMEOUT || rc == PD_LOCK_DEADLOCK) { /* a process stopped in here */
            if (rc == PD_LOCK_TIMEOUT)
                __atomic_add_fetch(&pd_hdr->lock_timeouts, 1, __ATOMIC_RELAXED);
            break;
        }
        if (rc == PD_LOCK_RECOVERED)
            __atomic_add_fetch(&pd_hdr->lock_recoveries, 1, __ATOMIC_RELAXED);
        struct pd_proc *slot = NULL;
        for (uint32_t i = 0; i < pd_hdr->proctab_count; i++) {
            struct pd_proc *p = pd_proc_at(i);
            /* The launcher writes states without this lock (KILLED once it sees the
             * process gone, then FREE): a compare-and-swap, so an entry it has marked
             * and freed meanwhile is never turned back into a used one here. */
            uint32_t st = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
            if (st == PD_PROC_ALIVE && p->pid == pid)
                __atomic_compare_exchange_n(&p->state, &st, PD_PROC_EXECED, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
            else if (!slot && st == PD_PROC_FREE)
                slot = p;
        }
        if (slot) {
            memset(slot, 0, sizeof *slot);
            slot->pid = pid;
            slot->ppid = getppid();
            slot->abi = PD_ARCH_ABI;
            slot->start_ns = pd_now_ns();
            char comm[17] = {0};
            prctl_get_name(comm);
            pd_copy_name(slot->comm, sizeof slot->comm, comm);
            char exe[PATH_MAX];
            ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
            exe[n > 0 ? n : 0] = 0;
            pd_copy_name(slot->exe, sizeof slot->exe, exe);
            if (pd_has_process_probes(PD_PROBE_PROCESS_END))
                slot->flags = PD_PROCF_END_PROBES;
            __atomic_store_n(&slot->state, state, __ATOMIC_RELEASE);
            __atomic_add_fetch(&pd_hdr->attach_count, 1, __ATOMIC_RELAXED);
            pd_unlock(&pd_hdr->proctab_lock);
            return slot;
        }
        pd_unlock(&pd_hdr->proctab_lock);
        if (waited >= PD_REGISTER_WAIT_MS ||
            __atomic_load_n(&pd_hdr->session_state, __ATOMIC_ACQUIRE) != PD_SESSION_RUNNING)
            break; /* (nobody frees entries once the session stops) */
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    __atomic_add_fetch(&pd_hdr->procs_unlisted, 1, __ATOMIC_RELAXED);
    return NULL;
}

/* Whether this image has probes of `kind` (a process("PATH") probe only in PATH's). */
static int pd_has_process_probes(uint32_t kind)
{
    for (uint32_t i = 0; i < pd_module.nprobes; i++) {
        const struct pd_probe *p = &pd_probes[i];
        if (p->kind == kind && (p->object < 0 || pd_object_matches(pd_objects[p->object].path, NULL)))
            return 1;
    }
    return 0;
}

static void pd_fire_process_probes(uint32_t kind)
{
    for (uint32_t i = 0; i < pd_module.nprobes; i++) {
        const struct pd_probe *p = &pd_probes[i];
        if (p->kind != kind)
            continue;
        if (p->object >= 0 && !pd_object_matches(pd_objects[p->object].path, NULL))
            continue;
        /* the object is loaded (for the exit report), also where it has no site for
         * pd_arm.c to arm: a script of process("PATH").begin/.end probes only */
        if (p->object >= 0 && p->object < 64 && pd_hdr)
            __atomic_fetch_or(p->object < 32 ? &pd_hdr->objects_loaded_lo
                                             : &pd_hdr->objects_loaded_hi,
                              1u << (p->object % 32), __ATOMIC_RELAXED);
        pd_run(p, NULL, NULL, 0);
    }
}

/* process.thread.begin/.end, from the start routine pd_altstack.c wraps: in the new
 * thread before its own start routine, and as it ends (returned, pthread_exit or
 * cancelled: a cleanup handler, which runs before the thread's TLS destructors). */
void pd_fire_thread_probes(uint32_t kind)
{
    if (!pd_seg || pd_is_launcher || pd_inert)
        return;
    pd_fire_process_probes(kind);
}

static void pd_atfork_child(void)
{
    if (!pd_seg || pd_is_launcher || pd_inert)
        return;
    pd_end_fired = 0; /* a new process (its parent's failed exec may have fired its end) */
    if (!pd_xmm_always) /* (a child of a pid 1, which has none) */
        pd_sigend_init();
    pd_self = pd_register(PD_PROC_ALIVE);
    if (pd_self)
        pd_self->sites_armed = pd_narmed;
    pd_fire_process_probes(PD_PROBE_PROCESS_BEGIN);
}

/* Whether this process is a qemu-user emulator (qemu-aarch64 ...): it carries the
 * session's environment to its guest, whose own loader preloads the guest's module.
 * The host module loaded into the emulator itself stays out, so the pid
 * is registered once, by the guest. */
static int pd_in_emulator(void)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return 0;
    exe[n] = 0;
    const char *base = strrchr(exe, '/');
    base = base ? base + 1 : exe;
    return strncmp(base, "qemu-", 5) == 0;
}

/* Joins the session of segment `name`: maps and checks it, registers this process and
 * arms its sites.  0 or a PD_ATTACH_* error.  Run by the constructor of a preloaded
 * module, and by pd_attach_live (pd_attach.c) in a process pydyn -x attached to. */
int pd_session_attach(const char *name)
{
    if (pd_seg && !pd_inert)
        return PD_ATTACH_ALREADY;
    if (pd_in_emulator())
        return PD_ATTACH_EMULATOR;
    int rc = pd_map_segment(name);
    if (rc == PD_ATTACH_NOSHM || rc == PD_ATTACH_BADSEG) {
        /* The session is gone (or never was): stay inert, say nothing loud. */
        pd_unmap();
        return rc;
    }
    if (rc == PD_ATTACH_MISMATCH) {
        fprintf(stderr,
                "pydyn: error: probe module %s (" PD_ARCH_NAME ") was built from another "
                "source (checksum %s) than this session's; probes not armed in pid %d\n",
                "for this process", pd_hex(pd_module.checksum), (int)getpid());
        __atomic_add_fetch(&pd_hdr->mismatch_count, 1, __ATOMIC_RELAXED);
        pd_register(PD_PROC_REFUSED);
        pd_unmap();
        return rc;
    }
    if (__atomic_load_n(&pd_hdr->session_state, __ATOMIC_ACQUIRE) > PD_SESSION_RUNNING) {
        pd_unmap();
        return PD_ATTACH_ENDED;
    }
    /* The -c command's process is the launcher's only child: it names itself the
     * target before its first instruction runs, where the launcher learns the pid
     * only once the process is already running. */
    if (pd_hdr->launcher_pid > 0 && getppid() == (pid_t)pd_hdr->launcher_pid) {
        int32_t none = 0;
        __atomic_compare_exchange_n(&pd_hdr->target_pid, &none, (int32_t)getpid(), 0,
                                    __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    }
    /* a later -x session reloading the same module file (dlopen returns the loaded
     * one) finds it inert; the zero pages of the last segment stay mapped */
    __atomic_store_n(&pd_inert, 0, __ATOMIC_RELEASE);
    pd_fast_env_set(1);
    pd_lock_setup();
    pd_pstat_setup();
    pd_quiesce_attach();
    pd_follow_init();
    pd_altstack_init();
    if (!pd_xmm_always) /* preloaded: its sigaction wrappers hide the stand-in */
        pd_sigend_init();
    pd_self = pd_register(PD_PROC_ALIVE);
    pd_arm_all();
    static int atfork_set; /* once, though a -x process may be attached again */
    if (!atfork_set)
        pthread_atfork(NULL, NULL, pd_atfork_child);
    atfork_set = 1;
    pd_fire_process_probes(PD_PROBE_PROCESS_BEGIN);
    return PD_ATTACH_OK;
}

__attribute__((constructor)) static void pd_target_init(void)
{
    const char *name = getenv("PYDYN_SHM");
    if (name && *name) /* else the launcher, a -x process (pd_attach.c) or no session */
        pd_session_attach(name);
}

/* After pd_disarm_all: no probe, fork handler or destructor touches the session again.
 * The segment's pages are replaced by zero pages instead of unmapped: a thread stopped
 * half way into a handler may still hold pointers into them. */
void pd_go_inert(void)
{
    __atomic_store_n(&pd_inert, 1, __ATOMIC_RELEASE);
    pd_fast_env_set(0);
    if (pd_seg)
        mmap(pd_seg, pd_seg_size, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

/* The image's process.end probes, once: at its exit, at a fatal signal, or before an
 * exec replaces it (the next image registers the same pid again).  Not in a vfork
 * child, which shares its parent's memory and has no entry of its own.  Whichever
 * thread comes first runs them (one may exit while another takes a fatal signal);
 * the entry's PD_PROCF_ENDED tells the launcher they ran (pd_end_fired: above). */

static struct pd_proc *pd_ending_self(void)
{
    struct pd_proc *self = __atomic_load_n(&pd_self, __ATOMIC_ACQUIRE);
    if (!pd_seg || pd_is_launcher || pd_inert || !self || self->pid != getpid())
        return NULL;
    return self;
}

static void pd_fire_end(struct pd_proc *self)
{
    if (__atomic_exchange_n(&pd_end_fired, 1, __ATOMIC_ACQ_REL))
        return;
    pd_fire_process_probes(PD_PROBE_PROCESS_END);
    __atomic_fetch_or(&self->flags, PD_PROCF_ENDED, __ATOMIC_RELEASE);
}

void pd_process_exec(void)
{
    struct pd_proc *self = pd_ending_self();
    if (self)
        pd_fire_end(self);
}

/* The process ends: its process.end probes, then its table entry marked `state`
 * (EXITED, or KILLED with the signal as `status`) by one thread; from the destructor
 * (exit, a return from main), _exit/_Exit, or a fatal signal's handler (pd_sigend.c). */
static void pd_process_ending(uint32_t state, int32_t status)
{
    struct pd_proc *self = pd_ending_self();
    if (!self)
        return;
    pd_fire_end(self);
    if (!__atomic_compare_exchange_n(&pd_self, &self, NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return; /* another thread's end marks it */
    /* from here the launcher may free the entry for another process */
    self->exit_status = status;
    self->end_ns = pd_now_ns();
    __atomic_store_n(&self->state, state, __ATOMIC_RELEASE);
}

void pd_process_killed(int sig)
{
    pd_process_ending(PD_PROC_KILLED, sig);
}

void pd_process_reaped(pid_t pid, uint32_t state, int status)
{
    if (!pd_seg || pd_is_launcher || pd_inert)
        return;
    for (uint32_t i = 0; i < pd_hdr->proctab_count; i++) {
        struct pd_proc *p = pd_proc_at(i);
        uint32_t st = PD_PROC_ALIVE;
        if (p->pid != pid || __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != st ||
            __atomic_load_n(&p->flags, __ATOMIC_ACQUIRE) & PD_PROCF_ENDED)
            continue;
        /* the launcher may be marking it KILLED itself meanwhile: the first store stays */
        p->exit_status = status;
        __atomic_compare_exchange_n(&p->state, &st, state, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED);
    }
}

__attribute__((destructor)) static void pd_target_fini(void)
{
    pd_process_ending(PD_PROC_EXITED, 0);
}

/* _exit and _Exit end the process without running destructors (dash's and many
 * daemons' way out, a forked child's after its work): interposed so that the
 * process.end probes still fire.  Calls inside libc (exit's own) do not come here.
 * The system call directly: no lookup of the next definition, which is not
 * async-signal-safe while _exit is. */
PD_EXPORT void _exit(int status)
{
    pd_process_ending(PD_PROC_EXITED, status & 0xff);
    for (;;)
        syscall(SYS_exit_group, status);
}

PD_EXPORT void _Exit(int status)
{
    _exit(status);
}

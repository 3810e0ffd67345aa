/* Function probes (issue 7): entry dispatch and return probes.
 *
 * A function site (pd_site.nentry + nreturn > 0) is entered from its trampoline
 * stub or, on the trap path, from the SIGTRAP handler, with the register context
 * at the function's entry.  pd_func_fire runs the entry probes and, when the site
 * has return probes, replaces the return address at the stack pointer with
 * pd_ret_tramp, remembering the original on a per-thread shadow stack (thread-
 * local storage of this module, not the segment).  pd_ret_tramp saves the
 * registers in struct pd_regs order, calls pd_ret_handler (which pops the shadow
 * stack, runs the return probes with ip = the original return address and
 * returns it), restores and jumps there.
 *
 * Recursion and tail calls are LIFO on the shadow stack.  longjmp (or a signal
 * handler that never returns) skips frames: their entries are discarded, counted
 * as skipped probes, when an outer frame returns.  Limits: C++ exceptions and
 * other unwinding through a frame with a replaced return address fail (the
 * unwinder finds no FDE for pd_ret_tramp), backtraces from inside such a frame
 * stop at pd_ret_tramp, and stack switching (swapcontext) across a pending
 * return is only tolerated when the frame is found on the shadow stack.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pd_runtime.h"

#define PD_SHADOW_MAX 65536u /* frames per thread (the mapping is touched lazily) */

struct pd_shadow {
    uintptr_t ret;                /* the original return address */
    uintptr_t at;                 /* where it was: the stack pointer at entry */
    const struct pd_site *site;
    uintptr_t bias;
};

static __thread struct pd_shadow *pd_stk;
static __thread uint32_t pd_stk_n;
static __thread int pd_stk_failed;
static pthread_key_t pd_stk_key;
static pthread_once_t pd_stk_once = PTHREAD_ONCE_INIT;

#define PD_BARRIER() __asm__ volatile("" ::: "memory")

static void pd_stk_free(void *p)
{
    munmap(p, PD_SHADOW_MAX * sizeof(struct pd_shadow));
    pd_stk = NULL;
    pd_stk_n = 0;
}

static void pd_stk_key_init(void) { pthread_key_create(&pd_stk_key, pd_stk_free); }

static struct pd_shadow *pd_stack(void)
{
    if (PD_LIKELY(pd_stk != NULL))
        return pd_stk;
    if (pd_stk_failed)
        return NULL;
    pd_stk_failed = 1; /* a probed mmap/pthread function reached from here is not hooked */
    void *m = mmap(NULL, PD_SHADOW_MAX * sizeof(struct pd_shadow), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    pthread_once(&pd_stk_once, pd_stk_key_init);
    pthread_setspecific(pd_stk_key, m);
    pd_stk = m;
    pd_stk_failed = 0;
    return pd_stk;
}

extern const char pd_ret_tramp[] __attribute__((visibility("hidden")));

void pd_func_fire(const struct pd_regs *regs, const struct pd_site *site, uintptr_t bias)
{
    for (unsigned i = 0; i < site->nentry; i++)
        pd_run_probe(&pd_probes[site->fprobes[i]], site, regs, bias);
    if (!site->nreturn || !pd_session_running())
        return;
#if !defined(__x86_64__) && !defined(__i386__)
    pd_count_skipped(site->nreturn); /* no return trampoline on this arch yet */
#else
    struct pd_shadow *stk = pd_stack();
    if (!stk || pd_stk_n >= PD_SHADOW_MAX) {
        pd_count_skipped(site->nreturn);
        return;
    }
    pd_ureg *slot = (pd_ureg *)(uintptr_t)regs->r[PD_DWARF_SP];
    /* Frames at or below this return slot were left by longjmp: a live caller's slot
     * is above ours.  The same slot is live only for a tail call from a hooked frame,
     * where it already holds pd_ret_tramp. */
    int tail = *slot == (pd_ureg)(uintptr_t)pd_ret_tramp;
    while (pd_stk_n > 0 && (stk[pd_stk_n - 1].at < (uintptr_t)slot ||
                            (stk[pd_stk_n - 1].at == (uintptr_t)slot && !tail))) {
        pd_count_skipped(stk[pd_stk_n - 1].site->nreturn);
        pd_stk_n--;
    }
    uint32_t i = pd_stk_n++; /* claim the slot first: a signal handler nests above it */
    PD_BARRIER();
    stk[i].ret = (uintptr_t)*slot;
    stk[i].at = (uintptr_t)slot;
    stk[i].site = site;
    stk[i].bias = bias;
    PD_BARRIER();
    *slot = (pd_ureg)(uintptr_t)pd_ret_tramp;
#endif
}

/* Called by pd_ret_tramp with the registers at the return; returns where to go. */
pd_ureg pd_ret_handler(struct pd_regs *regs);
pd_ureg pd_ret_handler(struct pd_regs *regs)
{
    uintptr_t sp = (uintptr_t)(regs + 1) + sizeof(pd_ureg); /* after the slot */
    uintptr_t at = sp - sizeof(pd_ureg);
    regs->r[PD_DWARF_SP] = (pd_ureg)sp;
    struct pd_shadow *stk = pd_stk;
    uint32_t n = pd_stk_n;
    /* frames deeper than this one were left by longjmp: their returns never come */
    while (n > 0 && stk[n - 1].at < at) {
        n--;
        pd_count_skipped(stk[n].site->nreturn);
    }
    uint32_t k = n;
    while (k > 0 && stk[k - 1].at != at)
        k--;
    if (k == 0) {
        static const char msg[] = "pydyn: return probe: no shadow frame for this return "
                                  "(stack switched?); aborting\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        abort();
    }
    struct pd_shadow e = stk[k - 1];
    if (k == n) {
        n--;
    } else { /* another stack's frames sit above it (stack switching): keep them */
        for (uint32_t j = k - 1; j + 1 < n; j++)
            stk[j] = stk[j + 1];
        n--;
    }
    PD_BARRIER();
    pd_stk_n = n;
    regs->r[PD_DWARF_IP] = (pd_ureg)e.ret;
    const struct pd_site *site = e.site;
    for (unsigned i = 0; i < site->nreturn; i++)
        pd_run_probe(&pd_probes[site->fprobes[site->nentry + i]], site, regs, e.bias);
    return (pd_ureg)e.ret;
}

int64_t pd_func_return(struct pd_ctx *c)
{
    if (!c->regs) {
        pd_error(c, "$return not available here");
        return 0;
    }
    return (int64_t)(intptr_t)pd_reg(c->regs, 0); /* rax / eax, as a C long */
}

/* pd_ret_tramp: entered by the `ret` of a hooked function, stack pointer just above
 * where the return address was.  Builds struct pd_regs (DWARF order), keeps the
 * return-value registers (rax/rdx + xmm0/xmm1; eax/edx + the x87 state), calls
 * pd_ret_handler and returns to the address it gives. */
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl pd_ret_tramp\n"
        ".hidden pd_ret_tramp\n"
        ".type pd_ret_tramp,@function\n"
        "pd_ret_tramp:\n"
        "  sub $8,%rsp\n"            /* slot: where we return to */
        "  pushq $0\n"               /* flags (dead at a return) */
        "  pushq $0\n"               /* rip */
        "  push %r15\n  push %r14\n  push %r13\n  push %r12\n"
        "  push %r11\n  push %r10\n  push %r9\n  push %r8\n"
        "  pushq $0\n"               /* rsp: filled in by the handler */
        "  push %rbp\n  push %rdi\n  push %rsi\n  push %rbx\n"
        "  push %rcx\n  push %rdx\n  push %rax\n"
        "  mov %rsp,%rbx\n"
        "  and $-16,%rsp\n"
        "  sub $32,%rsp\n"
        "  movdqa %xmm0,(%rsp)\n"
        "  movdqa %xmm1,16(%rsp)\n"
        "  cld\n"
        "  mov %rbx,%rdi\n"
        "  call pd_ret_handler\n"
        "  mov %rax,144(%rbx)\n"     /* 18 words above: the slot */
        "  movdqa (%rsp),%xmm0\n"
        "  movdqa 16(%rsp),%xmm1\n"
        "  mov %rbx,%rsp\n"
        "  pop %rax\n  pop %rdx\n  pop %rcx\n  pop %rbx\n"
        "  pop %rsi\n  pop %rdi\n  pop %rbp\n"
        "  add $8,%rsp\n"
        "  pop %r8\n  pop %r9\n  pop %r10\n  pop %r11\n"
        "  pop %r12\n  pop %r13\n  pop %r14\n  pop %r15\n"
        "  add $16,%rsp\n"
        "  ret\n"
        ".size pd_ret_tramp,.-pd_ret_tramp\n");
_Static_assert(sizeof(struct pd_regs) == 144, "pd_ret_tramp's frame");
#elif defined(__i386__)
__asm__(".text\n"
        ".globl pd_ret_tramp\n"
        ".hidden pd_ret_tramp\n"
        ".type pd_ret_tramp,@function\n"
        "pd_ret_tramp:\n"
        "  sub $4,%esp\n"            /* slot */
        "  pushl $0\n"               /* flags */
        "  pushl $0\n"               /* eip */
        "  push %edi\n  push %esi\n  push %ebp\n"
        "  pushl $0\n"               /* esp */
        "  push %ebx\n  push %edx\n  push %ecx\n  push %eax\n"
        "  mov %esp,%ebx\n"
        "  and $-16,%esp\n"
        "  sub $112,%esp\n"
        "  fnsave (%esp)\n"          /* st0 may hold a float return value */
        "  sub $12,%esp\n"
        "  push %ebx\n"
        "  cld\n"
        "  call pd_ret_handler\n"
        "  add $16,%esp\n"
        "  frstor (%esp)\n"
        "  mov %eax,40(%ebx)\n"      /* 10 words above: the slot */
        "  mov %ebx,%esp\n"
        "  pop %eax\n  pop %ecx\n  pop %edx\n  pop %ebx\n"
        "  add $4,%esp\n"
        "  pop %ebp\n  pop %esi\n  pop %edi\n"
        "  add $8,%esp\n"
        "  ret\n"
        ".size pd_ret_tramp,.-pd_ret_tramp\n");
_Static_assert(sizeof(struct pd_regs) == 40, "pd_ret_tramp's frame");
#endif

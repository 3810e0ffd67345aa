/* pd_xmm_call on i386: how the general-regs-only trampoline path
 * (PD_FAST_FN, pd_func.c) calls code that may use the vector or x87 registers -- a
 * handler that is not FAST, pd_run, mmap -- now that the i386 stubs save neither.
 *
 * xmm0-7 are saved around the call.  The x87 stack is another matter: the ABI has it
 * empty at every call, but a USDT site sits in the middle of a function, where gcc
 * (-mfpmath=387, i386's default) may keep live values in st(0)..st(7) across the
 * probe's asm.  C code called with a non-empty stack pushes onto it and, past eight
 * entries, overwrites the interrupted code's values with the indefinite NaN.  So when
 * st(0) is not empty, fnsave stores the whole x87 state (and MMX, which aliases it)
 * and re-initialises the unit, which gives the callee the empty stack it expects;
 * frstor puts it back.  fxam + fnstsw make the common case (empty) cheap.  The FAST
 * path itself is compiled general-regs-only, so it touches neither (tests/test_fast_handlers.py
 * checks the object code).
 */
#include "pd_runtime.h"

#if defined(__i386__)
/* pd_xmm_call(fn, a, b, c, d): fn(a, b, c, d) with xmm0-7 and the x87 state kept.
 * Frame (16-aligned): 0 the four arguments, 16 xmm0-7, 144 the fnsave image (108
 * bytes), 252 whether it was taken. */
__asm__(".text\n"
        ".globl pd_xmm_call\n"
        ".hidden pd_xmm_call\n"
        ".type pd_xmm_call,@function\n"
        "pd_xmm_call:\n"
        "  push %ebp\n"
        "  mov %esp,%ebp\n"
        "  and $-16,%esp\n"
        "  sub $256,%esp\n"
        "  movdqa %xmm0,16(%esp)\n"
        "  movdqa %xmm1,32(%esp)\n"
        "  movdqa %xmm2,48(%esp)\n"
        "  movdqa %xmm3,64(%esp)\n"
        "  movdqa %xmm4,80(%esp)\n"
        "  movdqa %xmm5,96(%esp)\n"
        "  movdqa %xmm6,112(%esp)\n"
        "  movdqa %xmm7,128(%esp)\n"
        "  movl $0,252(%esp)\n"
        "  fxam\n"                    /* st(0) empty <=> C3 C2 C0 = 1 0 1 */
        "  fnstsw %ax\n"
        "  and $0x4500,%eax\n"
        "  cmp $0x4100,%eax\n"
        "  je 1f\n"
        "  fnsave 144(%esp)\n"
        "  movl $1,252(%esp)\n"
        "1:\n"
        "  mov 12(%ebp),%eax\n  mov %eax,0(%esp)\n"
        "  mov 16(%ebp),%eax\n  mov %eax,4(%esp)\n"
        "  mov 20(%ebp),%eax\n  mov %eax,8(%esp)\n"
        "  mov 24(%ebp),%eax\n  mov %eax,12(%esp)\n"
        "  call *8(%ebp)\n"
        "  cmpl $0,252(%esp)\n"
        "  je 2f\n"
        "  frstor 144(%esp)\n"
        "2:\n"
        "  movdqa 16(%esp),%xmm0\n"
        "  movdqa 32(%esp),%xmm1\n"
        "  movdqa 48(%esp),%xmm2\n"
        "  movdqa 64(%esp),%xmm3\n"
        "  movdqa 80(%esp),%xmm4\n"
        "  movdqa 96(%esp),%xmm5\n"
        "  movdqa 112(%esp),%xmm6\n"
        "  movdqa 128(%esp),%xmm7\n"
        "  mov %ebp,%esp\n"
        "  pop %ebp\n"
        "  ret\n"
        ".size pd_xmm_call,.-pd_xmm_call\n");
#endif

#if defined(__i386__)
/* A FAST handler's `n++` (a 64-bit __atomic_fetch_add): gcc's i386 expansion loads the
 * old value with x87 (fild) or SSE (movq), which general-regs-only forbids, so it calls
 * libatomic's __atomic_fetch_add_8 instead.  This one, module-local, is a cmpxchg8b loop
 * on general registers (a torn first read only costs another round; lock cmpxchg8b is a
 * full barrier, enough for every memory order).  In asm: gcc's version of the same loop
 * is twice as long. */
__asm__(".text\n"
        ".globl __atomic_fetch_add_8\n"
        ".hidden __atomic_fetch_add_8\n"
        ".type __atomic_fetch_add_8,@function\n"
        "__atomic_fetch_add_8:\n"          /* (ptr, val lo, val hi, order) */
        "  push %ebx\n"
        "  push %esi\n"
        "  push %edi\n"
        "  push %ebp\n"
        "  mov 20(%esp),%esi\n"
        "  mov 24(%esp),%edi\n"
        "  mov 28(%esp),%ebp\n"
        "  mov (%esi),%eax\n"
        "  mov 4(%esi),%edx\n"
        "1:\n"
        "  mov %eax,%ebx\n"
        "  mov %edx,%ecx\n"
        "  add %edi,%ebx\n"
        "  adc %ebp,%ecx\n"
        "  lock cmpxchg8b (%esi)\n"       /* edx:eax = the old value, new or not */
        "  jne 1b\n"
        "  pop %ebp\n"
        "  pop %edi\n"
        "  pop %esi\n"
        "  pop %ebx\n"
        "  ret\n"
        ".size __atomic_fetch_add_8,.-__atomic_fetch_add_8\n");
#endif

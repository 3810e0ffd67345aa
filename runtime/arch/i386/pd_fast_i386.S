/* pd_xmm_call on i386: how the general-regs-only trampoline path
 * (PD_FAST_FN, pd_func.c) calls code that may use the vector or x87 registers -- a
 * handler that is not FAST, pd_run, mmap -- now that the i386 stubs save neither.
 *
 * xmm0-7 are saved around the call.  The x87 stack is another matter: the ABI has it
 * empty at every call, but a USDT site sits in the middle of a function, where gcc
 * (-mfpmath=387, i386's default) may keep live values in st(0)..st(7) across the
 * probe's asm.  C code called with a non-empty stack pushes onto it and, past eight
 * entries, overwrites the interrupted code's values with the indefinite NaN.  So when
 * any x87 register is in use, fnsave stores the whole x87 state (and MMX, which aliases it)
 * and re-initialises the unit, which gives the callee the empty stack it expects;
 * frstor puts it back.  Whether all are empty is read from the tag word, which
 * fnstenv stores (it then masks every exception: fldcw puts the stored control word
 * back).  Not with fxam: on an empty st(0) it takes a microcode assist, several times
 * the cost of fnstenv + fldcw (docs/performance.md, the i386 rows).  The FAST
 * path itself is compiled general-regs-only, so it touches neither (tests/test_fast_handlers.py
 * checks the object code).
 */

/* pd_xmm_call(fn, a, b, c, d): fn(a, b, c, d) with xmm0-7 and the x87 state kept.
 * Frame (16-aligned): 0 the four arguments, 16 xmm0-7, 144 the fnsave image (108
 * bytes), 252 whether it was taken. */
        .text
        .globl pd_xmm_call
        .hidden pd_xmm_call
        .type pd_xmm_call,@function
pd_xmm_call:
        push %ebp
        mov %esp,%ebp
        and $-16,%esp
        sub $256,%esp
        movdqa %xmm0,16(%esp)
        movdqa %xmm1,32(%esp)
        movdqa %xmm2,48(%esp)
        movdqa %xmm3,64(%esp)
        movdqa %xmm4,80(%esp)
        movdqa %xmm5,96(%esp)
        movdqa %xmm6,112(%esp)
        movdqa %xmm7,128(%esp)
        movl $0,252(%esp)
        fnstenv 144(%esp)   /* the environment: control, status, tag word (+8) ... */
        fldcw 144(%esp)     /* the control word as it was (fnstenv masked them all) */
        cmpw $0xffff,152(%esp) /* every register empty */
        je 1f
        fnsave 144(%esp)
        movl $1,252(%esp)
1:
        mov 12(%ebp),%eax
        mov %eax,0(%esp)
        mov 16(%ebp),%eax
        mov %eax,4(%esp)
        mov 20(%ebp),%eax
        mov %eax,8(%esp)
        mov 24(%ebp),%eax
        mov %eax,12(%esp)
        call *8(%ebp)
        cmpl $0,252(%esp)
        je 2f
        frstor 144(%esp)
2:
        movdqa 16(%esp),%xmm0
        movdqa 32(%esp),%xmm1
        movdqa 48(%esp),%xmm2
        movdqa 64(%esp),%xmm3
        movdqa 80(%esp),%xmm4
        movdqa 96(%esp),%xmm5
        movdqa 112(%esp),%xmm6
        movdqa 128(%esp),%xmm7
        mov %ebp,%esp
        pop %ebp
        ret
        .size pd_xmm_call,.-pd_xmm_call

/* A FAST handler's `n++` (a 64-bit __atomic_fetch_add): gcc's i386 expansion loads the
 * old value with x87 (fild) or SSE (movq), which general-regs-only forbids, so it calls
 * libatomic's __atomic_fetch_add_8 instead.  This one, module-local, is a cmpxchg8b loop
 * on general registers (a torn first read only costs another round; lock cmpxchg8b is a
 * full barrier, enough for every memory order).  In asm: gcc's version of the same loop
 * is twice as long. */
        .text
        .globl __atomic_fetch_add_8
        .hidden __atomic_fetch_add_8
        .type __atomic_fetch_add_8,@function
__atomic_fetch_add_8:  /* (ptr, val lo, val hi, order) */
        push %ebx
        push %esi
        push %edi
        push %ebp
        mov 20(%esp),%esi
        mov 24(%esp),%edi
        mov 28(%esp),%ebp
        mov (%esi),%eax
        mov 4(%esi),%edx
1:
        mov %eax,%ebx
        mov %edx,%ecx
        add %edi,%ebx
        adc %ebp,%ecx
        lock cmpxchg8b (%esi)  /* edx:eax = the old value, new or not */
        jne 1b
        pop %ebp
        pop %edi
        pop %esi
        pop %ebx
        ret
        .size __atomic_fetch_add_8,.-__atomic_fetch_add_8

        .section .note.GNU-stack,"",@progbits

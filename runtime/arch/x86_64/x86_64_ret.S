/* x86-64 return probes' trampoline and pd_xmm_call (see pd_func.c for the shadow
 * stack they serve).  struct pd_regs is 18 words here (x86_64_stub.c checks it). */
#include "pd_config.h"

/* pd_ret_tramp: entered by the `ret` of a hooked function, stack pointer just above
 * where the return address was.  Builds struct pd_regs (DWARF order), keeps the
 * return-value registers (rax/rdx + xmm0/xmm1; eax/edx + the x87 state), calls
 * pd_ret_handler and returns to the address it gives.  The other xmm registers are
 * kept too (unless -D PD_TRAMP_SAVE_XMM=0): gcc's IPA-RA lets the caller of a local
 * function keep values in registers that function does not clobber, and a handler's
 * libc calls may -- by pd_xmm_call around such handlers (below), unless
 * pd_xmm_always. */
#if PD_TRAMP_SAVE_XMM
        .macro PD_X64_SAVE_XMM
        movdqa %xmm0,0(%rsp)
        movdqa %xmm1,16(%rsp)
        movdqa %xmm2,32(%rsp)
        movdqa %xmm3,48(%rsp)
        movdqa %xmm4,64(%rsp)
        movdqa %xmm5,80(%rsp)
        movdqa %xmm6,96(%rsp)
        movdqa %xmm7,112(%rsp)
        movdqa %xmm8,128(%rsp)
        movdqa %xmm9,144(%rsp)
        movdqa %xmm10,160(%rsp)
        movdqa %xmm11,176(%rsp)
        movdqa %xmm12,192(%rsp)
        movdqa %xmm13,208(%rsp)
        movdqa %xmm14,224(%rsp)
        movdqa %xmm15,240(%rsp)
        .endm
        .macro PD_X64_LOAD_XMM
        movdqa 0(%rsp),%xmm0
        movdqa 16(%rsp),%xmm1
        movdqa 32(%rsp),%xmm2
        movdqa 48(%rsp),%xmm3
        movdqa 64(%rsp),%xmm4
        movdqa 80(%rsp),%xmm5
        movdqa 96(%rsp),%xmm6
        movdqa 112(%rsp),%xmm7
        movdqa 128(%rsp),%xmm8
        movdqa 144(%rsp),%xmm9
        movdqa 160(%rsp),%xmm10
        movdqa 176(%rsp),%xmm11
        movdqa 192(%rsp),%xmm12
        movdqa 208(%rsp),%xmm13
        movdqa 224(%rsp),%xmm14
        movdqa 240(%rsp),%xmm15
        .endm
#else /* only the return-value registers */
        .macro PD_X64_SAVE_XMM
        movdqa %xmm0,0(%rsp)
        movdqa %xmm1,16(%rsp)
        .endm
        .macro PD_X64_LOAD_XMM
        movdqa 0(%rsp),%xmm0
        movdqa 16(%rsp),%xmm1
        .endm
#endif
/* pd_xmm_call(fn, a, b, c, d): keeps xmm0-15 around fn(a, b, c, d). */
        .text
        .globl pd_xmm_call
        .hidden pd_xmm_call
        .type pd_xmm_call,@function
pd_xmm_call:
        push %rbp
        mov %rsp,%rbp
        and $-16,%rsp
        sub $256,%rsp
        PD_X64_SAVE_XMM
        mov %rdi,%rax
        mov %rsi,%rdi
        mov %rdx,%rsi
        mov %rcx,%rdx
        mov %r8,%rcx
        call *%rax
        PD_X64_LOAD_XMM
        mov %rbp,%rsp
        pop %rbp
        ret
        .size pd_xmm_call,.-pd_xmm_call

/* Leaves pd_ret_tramp for the return address N-8 bytes above the stack pointer: by an
 * indirect jmp, not `ret`, whose prediction would be wrong (the hooked function's ret
 * came here and took the caller's return stack entry), as would every return after
 * it in the caller.  [rsp-8] is safe to read: signals skip the red zone. */
        .macro PD_X64_RET_JMP n
        lea \n(%rsp),%rsp
        jmp *-8(%rsp)
        .endm
/* The return probes' C runs on the thread's private stack (pd_pstack.c), as a stub's
 * does; the registers stay saved on the target's (the ~100-250 bytes below the slot).
 * Flags are dead at a return; rax and rcx are saved already.  Claimed (TOP = 0) right
 * after it is read, as the stubs do; leaves TOP's value and offset at 8(%rsp) and
 * (%rsp), 16-aligned (0 at 8(%rsp): no private stack, aligned in place). */
        .macro PD_X64_TO_PSTACK
#if PD_PRIVATE_STACK
        cmpl $0,pd_ps_enabled(%rip)
#else
        cmp %rsp,%rsp  /* ZF: never */
#endif
        je 7f
        movslq pd_ps_top_off(%rip),%rax
        mov %fs:(%rax),%rcx
        jrcxz 7f
        movq $0,%fs:(%rax)
        lea -16(%rcx),%rsp
        mov %rcx,8(%rsp)
        mov %rax,(%rsp)
        jmp 8f
        7:
        and $-16,%rsp
        sub $16,%rsp
        movq $0,8(%rsp)
        8:
        .endm
/* ... and gives it back: rcx and rdx are reloaded from the frame later; no flag is
 * touched (the fast path's ZF). */
        .macro PD_X64_FROM_PSTACK
        mov 8(%rsp),%rcx
        jrcxz 9f
        mov (%rsp),%rdx
        mov %rcx,%fs:(%rdx)
        9:
        .endm
/* pd_ret_handler is general-regs-only: pd_ret_tramp saves the vector registers only
 * for pd_xmm_always. */
        .text
        .globl pd_ret_tramp
        .hidden pd_ret_tramp
        .type pd_ret_tramp,@function
pd_ret_tramp:
        sub $8,%rsp  /* slot: where we return to */
        cmpl $0,pd_xmm_always(%rip)
        jne 5f
        /* pd_ret_fast: what C may clobber is kept (the caller of a local function may
         * rely on registers that function leaves alone: IPA-RA), flags are dead */
        push %rax
        push %rdx
        push %rcx
        push %rsi
        push %rdi
        push %r8
        push %r9
        push %r10
        push %r11
        push %rbx
        mov %rsp,%rbx
        PD_X64_TO_PSTACK
        lea 80(%rbx),%rdi  /* the slot */
        call pd_ret_fast
        PD_X64_FROM_PSTACK
        test %rax,%rax
        jz 4f
        mov %rax,80(%rbx)
4:
        mov %rbx,%rsp  /* mov and pop keep ZF */
        pop %rbx
        pop %r11
        pop %r10
        pop %r9
        pop %r8
        pop %rdi
        pop %rsi
        pop %rcx
        pop %rdx
        pop %rax
        jz 5f
        PD_X64_RET_JMP 8
5:  /* the full path: pd_regs for pd_ret_handler */
        pushq $0  /* flags (dead at a return) */
        pushq $0  /* rip */
        push %r15
        push %r14
        push %r13
        push %r12
        push %r11
        push %r10
        push %r9
        push %r8
        pushq $0  /* rsp: filled in by the handler */
        push %rbp
        push %rdi
        push %rsi
        push %rbx
        push %rcx
        push %rdx
        push %rax
        mov %rsp,%rbx
        PD_X64_TO_PSTACK
        sub $256,%rsp
        cmpl $0,pd_xmm_always(%rip)
        je 1f
        PD_X64_SAVE_XMM
1:
        cld
        mov %rbx,%rdi
        call pd_ret_handler
        mov %rax,144(%rbx)  /* 18 words above: the slot */
        cmpl $0,pd_xmm_always(%rip)
        je 2f
        PD_X64_LOAD_XMM
2:
        add $256,%rsp
        PD_X64_FROM_PSTACK
        mov %rbx,%rsp
        pop %rax
        pop %rdx
        pop %rcx
        pop %rbx
        pop %rsi
        pop %rdi
        pop %rbp
        add $8,%rsp
        pop %r8
        pop %r9
        pop %r10
        pop %r11
        pop %r12
        pop %r13
        pop %r14
        pop %r15
        PD_X64_RET_JMP 24
        .size pd_ret_tramp,.-pd_ret_tramp

        .section .note.GNU-stack,"",@progbits

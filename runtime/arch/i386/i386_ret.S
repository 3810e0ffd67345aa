/* i386 return probes' trampoline (see pd_func.c for the shadow stack it serves;
 * pd_xmm_call is in pd_fast_i386.S).  struct pd_regs is 10 words here (i386_stub.c
 * checks it). */
#include "pd_config.h"

/* pd_ret_tramp: entered by the `ret` of a hooked function, stack pointer just above
 * where the return address was.  Builds struct pd_regs (DWARF order), keeps the
 * return-value registers (rax/rdx + xmm0/xmm1; eax/edx + the x87 state), calls
 * pd_ret_handler and returns to the address it gives.  The other xmm registers are
 * kept too (unless -D PD_TRAMP_SAVE_XMM=0): gcc's IPA-RA lets the caller of a local
 * function keep values in registers that function does not clobber, and a handler's
 * libc calls may -- on x86-64 by pd_xmm_call around such handlers (below), unless
 * pd_xmm_always. */
#if PD_TRAMP_SAVE_XMM
        .macro PD_I386_SAVE_XMM
        movdqa %xmm0,112(%esp)
        movdqa %xmm1,128(%esp)
        movdqa %xmm2,144(%esp)
        movdqa %xmm3,160(%esp)
        movdqa %xmm4,176(%esp)
        movdqa %xmm5,192(%esp)
        movdqa %xmm6,208(%esp)
        movdqa %xmm7,224(%esp)
        .endm
        .macro PD_I386_LOAD_XMM
        movdqa 112(%esp),%xmm0
        movdqa 128(%esp),%xmm1
        movdqa 144(%esp),%xmm2
        movdqa 160(%esp),%xmm3
        movdqa 176(%esp),%xmm4
        movdqa 192(%esp),%xmm5
        movdqa 208(%esp),%xmm6
        movdqa 224(%esp),%xmm7
        .endm
#else /* only the return-value registers (eax/edx and the x87 state) */
        .macro PD_I386_SAVE_XMM
        .endm
        .macro PD_I386_LOAD_XMM
        .endm
#endif
/* As on x86-64: the C runs on the private stack, the registers stay saved on the
 * target's.  PIC: ecx gets the GOT from pd_ret_pc_cx (a call matched by its ret, which
 * keeps the return stack buffer in step); eax/ecx/edx are saved already and flags are
 * dead at a return.  Leaves TOP's value at 8(%esp) (0: no private stack, aligned in
 * place) and its offset at 4(%esp), 16-aligned. */
#if PD_PRIVATE_STACK
        .macro PD_I386_TO_PSTACK
        call pd_ret_pc_cx
        addl $_GLOBAL_OFFSET_TABLE_, %ecx
        cmpl $0,pd_ps_enabled@GOTOFF(%ecx)
        je 7f
        mov pd_ps_top_off@GOTOFF(%ecx),%eax
        mov %gs:(%eax),%ecx
        jecxz 7f
        movl $0,%gs:(%eax)
        lea -16(%ecx),%esp
        mov %ecx,8(%esp)
        mov %eax,4(%esp)
        jmp 8f
        7:
        and $-16,%esp
        sub $16,%esp
        movl $0,8(%esp)
        8:
        .endm
#else
        .macro PD_I386_TO_PSTACK
        and $-16,%esp
        sub $16,%esp
        movl $0,8(%esp)
        .endm
#endif
/* ... and gives it back (esp at that record; eax, the return address, is kept). */
        .macro PD_I386_FROM_PSTACK
        mov 8(%esp),%ecx
        jecxz 9f
        mov 4(%esp),%edx
        mov %ecx,%gs:(%edx)
        9:
        .endm
        .text
        .hidden pd_ret_pc_cx
        .type pd_ret_pc_cx,@function
pd_ret_pc_cx:
        mov (%esp),%ecx
        ret
        .size pd_ret_pc_cx,.-pd_ret_pc_cx

        .text
        .globl pd_ret_tramp
        .hidden pd_ret_tramp
        .type pd_ret_tramp,@function
pd_ret_tramp:
        sub $4,%esp  /* slot */
        pushl $0  /* flags */
        pushl $0  /* eip */
        push %edi
        push %esi
        push %ebp
        pushl $0  /* esp */
        push %ebx
        push %edx
        push %ecx
        push %eax
        mov %esp,%ebx
        PD_I386_TO_PSTACK
        sub $240,%esp  /* 128 for xmm0-7, 112 for the x87 state */
        /* st0 (st1) hold a float return value, if any: else the x87 stack is empty (the
         * ABI) and the slow fnsave/frstor pair is skipped; the flag lives at 108, after
         * the 108-byte fnsave image */
        fnstsw %ax
        and $0x3800,%eax  /* TOP: 0 = empty */
        mov %eax,108(%esp)
        jz 1f
        fnsave (%esp)
1:
        PD_I386_SAVE_XMM
        sub $12,%esp
        push %ebx
        cld
        call pd_ret_handler
        add $16,%esp
        PD_I386_LOAD_XMM
        cmpl $0,108(%esp)
        je 2f
        frstor (%esp)
2:
        mov %eax,40(%ebx)  /* 10 words above: the slot */
        add $240,%esp
        PD_I386_FROM_PSTACK
        mov %ebx,%esp
        pop %eax
        pop %ecx
        pop %edx
        pop %ebx
        add $4,%esp
        pop %ebp
        pop %esi
        pop %edi
        add $8,%esp
        ret
        .size pd_ret_tramp,.-pd_ret_tramp

        .section .note.GNU-stack,"",@progbits

/* aarch64 stubs (see tramp.h): the template each stub is a copy of, and
 * pd_a64_tramp_common, which every stub and pd_ret_tramp call to save and restore the
 * whole register state around the C entry.  The frame: struct pd_regs at 0 (x0..x30,
 * sp, pc, flags = 34 words), fpsr/fpcr at 272; the stub's three saved registers at
 * 288..311, the site's sp at 320 (aarch64_tramp.c checks pd_regs' size). */

/* op (stp or ldp) of x0-x15 and x18-x29 at their pd_regs offsets: x16, x17 and x30
 * are the stub's. */
        .macro PD_A64_GPRS op
        \op x0, x1, [sp, #0]
        \op x2, x3, [sp, #16]
        \op x4, x5, [sp, #32]
        \op x6, x7, [sp, #48]
        \op x8, x9, [sp, #64]
        \op x10, x11, [sp, #80]
        \op x12, x13, [sp, #96]
        \op x14, x15, [sp, #112]
        \op x18, x19, [sp, #144]
        \op x20, x21, [sp, #160]
        \op x22, x23, [sp, #176]
        \op x24, x25, [sp, #192]
        \op x26, x27, [sp, #208]
        \op x28, x29, [sp, #224]
        .endm

        .text
        .arch_extension sve
        .balign 8
        .globl pd_a64_stub_tmpl, pd_a64_stub_branch, pd_a64_stub_lits, pd_a64_stub_end
        .hidden pd_a64_stub_tmpl, pd_a64_stub_branch, pd_a64_stub_lits, pd_a64_stub_end
pd_a64_stub_tmpl:
        sub sp, sp, #32
        stp x16, x17, [sp]
        str x30, [sp, #16]
        adr x16, pd_a64_stub_lits
        ldr x17, pd_a64_stub_lits + 24
        blr x17
        ldp x16, x17, [sp]
        ldr x30, [sp, #16]
        add sp, sp, #32
pd_a64_stub_branch:
        brk #0xa64  /* replaced by `b site+4` in each copy */
        .balign 8
pd_a64_stub_lits:
        .quad 0, 0, 0, 0, 0  /* site pc, struct pd_site *, bias, common, C entry */
pd_a64_stub_end:
        .globl pd_a64_tramp_common
        .hidden pd_a64_tramp_common
        .type pd_a64_tramp_common,%function
pd_a64_tramp_common:  /* x16: the stub's literals; x30: back into the stub */
        hint #34  /* bti c: the stub's blr may land in a guarded page */
        sub sp, sp, #288
        PD_A64_GPRS stp
        ldp x0, x1, [sp, #288]  /* the site's x16, x17 */
        stp x0, x1, [sp, #128]
        ldr x0, [sp, #304]  /* the site's x30 */
        add x1, sp, #320  /* the site's sp */
        stp x0, x1, [sp, #240]
        ldr x0, [x16]  /* pc = the site */
        mrs x1, nzcv
        stp x0, x1, [sp, #256]
        mrs x0, fpsr
        mrs x1, fpcr
        stp x0, x1, [sp, #272]
        mov x19, sp  /* callee-saved across the call: the frame, */
        mov x20, x30  /* the way back, the literals */
        mov x21, x16
        adrp x9, pd_a64_sve
        ldr w9, [x9, #:lo12:pd_a64_sve]
        cbnz w9, 1f
        sub sp, sp, #512
        .irp n,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
        str q\n, [sp, #\n*16]
        .endr
        b 2f
1:
        addvl sp, sp, #-32  /* z0-z31 at sp + 3 VL, */
        addvl sp, sp, #-3  /* p0-p15 and ffr (17 p-sized slots) at sp */
        addvl x9, sp, #3
        .irp n,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
        str z\n, [x9, #\n, mul vl]
        .endr
        .irp n,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
        str p\n, [sp, #\n, mul vl]
        .endr
        rdffr p0.b
        str p0, [sp, #16, mul vl]
2:
        mov x0, x19
        ldr x1, [x21, #8]
        ldr x2, [x21, #16]
        ldr x9, [x21, #32]
        blr x9
        adrp x9, pd_a64_sve
        ldr w9, [x9, #:lo12:pd_a64_sve]
        cbnz w9, 3f
        .irp n,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
        ldr q\n, [sp, #\n*16]
        .endr
        b 4f
3:
        ldr p0, [sp, #16, mul vl]
        wrffr p0.b
        .irp n,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
        ldr p\n, [sp, #\n, mul vl]
        .endr
        addvl x9, sp, #3
        .irp n,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
        ldr z\n, [x9, #\n, mul vl]
        .endr
4:
        mov sp, x19
        ldr x0, [sp, #240]  /* x30 as the entry left it: the stub restores it */
        str x0, [sp, #304]
        ldp x0, x1, [sp, #272]
        msr fpsr, x0
        msr fpcr, x1
        ldr x0, [sp, #264]
        msr nzcv, x0
        mov x30, x20  /* x16, x17, x30 are the stub's to restore */
        PD_A64_GPRS ldp
        add sp, sp, #288
        ret
        .size pd_a64_tramp_common, .-pd_a64_tramp_common

        .text
        .balign 4
        /* the unwinder looks a return address up at the address - 1: pd_ret_tramp's FDE
         * (pd_unwind.c registers it) starts at this nop, which no other FDE covers */
        .globl pd_ret_tramp_lo
        .hidden pd_ret_tramp_lo
pd_ret_tramp_lo:
        nop
        .globl pd_ret_tramp
        .hidden pd_ret_tramp
        .type pd_ret_tramp,%function
pd_ret_tramp:
        sub sp, sp, #32
        stp x16, x17, [sp]
        str x30, [sp, #16]
        adrp x16, pd_a64_ret_lits
        add x16, x16, :lo12:pd_a64_ret_lits
        ldr x17, [x16, #24]
        blr x17
        ldp x16, x17, [sp]
        ldr x30, [sp, #16]  /* the original return address */
        add sp, sp, #32
        ret
        .globl pd_ret_tramp_end
        .hidden pd_ret_tramp_end
pd_ret_tramp_end:
        .size pd_ret_tramp, .-pd_ret_tramp

        .section .note.GNU-stack,"",%progbits

/* a64_regs_probe(uint64_t out[A64_REGS_WORDS]) (tests/test_aarch64.py): loads
 * x0-x28, NZCV and v0-v31 with known patterns, passes the `regs` mark, then
 * stores what those registers hold after it: x0-x28, nzcv, q0-q31 (low, high).
 * a64_regs.c compares them with the patterns, so a trampoline (or trap) that
 * loses any register the compiler may keep live across a USDT site fails.
 * Callee-saved registers (x19-x29, d8-d15) are restored for the C caller. */
#include <sys/sdt.h>

    .text
    .globl a64_regs_probe
    .type a64_regs_probe, %function
a64_regs_probe:
    stp x29, x30, [sp, #-96]!
    mov x29, sp
    stp x19, x20, [sp, #16]
    stp x21, x22, [sp, #32]
    stp x23, x24, [sp, #48]
    stp x25, x26, [sp, #64]
    stp x27, x28, [sp, #80]
    stp d8, d9, [sp, #-64]!
    stp d10, d11, [sp, #16]
    stp d12, d13, [sp, #32]
    stp d14, d15, [sp, #48]
    str x0, [sp, #-16]!
    /* xN = 0xa640+N in the top half, N*0x101 at the bottom (a64_regs.c: pattern()) */
    .irp n,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28
    movz x\n, #(0xa640 + \n), lsl #48
    movk x\n, #(\n * 0x101)
    .endr
    /* vN = {xN, ~xN} for N < 29; v29-v31 from x0-x2 */
    .irp n,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28
    mvn x\n, x\n
    fmov d\n, x\n
    mvn x\n, x\n
    fmov v\n\().d[1], x\n
    .endr
    mvn x0, x0
    fmov d29, x0
    fmov d30, x0
    fmov d31, x0
    mvn x0, x0
    fmov v29.d[1], x0
    fmov v30.d[1], x0
    fmov v31.d[1], x0
    /* NZCV = N and C (0xa0000000), set last: movz/movk leave the flags alone */
    movz x0, #0xa000, lsl #16
    msr nzcv, x0
    movz x0, #0xa640, lsl #48
    STAP_PROBE(pydyn_a64, regs)
    sub sp, sp, #752          /* 29 x + nzcv + 32 q = 752 bytes; sub keeps the flags */
    stp x0, x1, [sp, #0]
    stp x2, x3, [sp, #16]
    stp x4, x5, [sp, #32]
    stp x6, x7, [sp, #48]
    stp x8, x9, [sp, #64]
    stp x10, x11, [sp, #80]
    stp x12, x13, [sp, #96]
    stp x14, x15, [sp, #112]
    stp x16, x17, [sp, #128]
    stp x18, x19, [sp, #144]
    stp x20, x21, [sp, #160]
    stp x22, x23, [sp, #176]
    stp x24, x25, [sp, #192]
    stp x26, x27, [sp, #208]
    mrs x0, nzcv
    stp x28, x0, [sp, #224]
    .irp n,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    str q\n, [sp, #(240 + \n * 16)]
    .endr
    ldr x1, [sp, #752]        /* out */
    mov x2, #0
1:  ldr x3, [sp, x2, lsl #3]
    str x3, [x1, x2, lsl #3]
    add x2, x2, #1
    cmp x2, #94
    b.ne 1b
    add sp, sp, #768
    ldp d10, d11, [sp, #16]
    ldp d12, d13, [sp, #32]
    ldp d14, d15, [sp, #48]
    ldp d8, d9, [sp], #64
    ldp x19, x20, [sp, #16]
    ldp x21, x22, [sp, #32]
    ldp x23, x24, [sp, #48]
    ldp x25, x26, [sp, #64]
    ldp x27, x28, [sp, #80]
    ldp x29, x30, [sp], #96
    ret
    .size a64_regs_probe, .-a64_regs_probe

/* a64_regs_sve_probe(uint8_t *out) (only with HWCAP_SVE): zN lane i = pattern(N) + i,
 * pN = the first N+1 byte lanes, ffr = p5; after the `regs_sve` mark stores z0-z31
 * (32 VL bytes), then p0-p15 and ffr (VL/8 bytes each).  The trampoline must keep
 * the bits above 128 that a NEON write in the handler would zero. */
    .arch_extension sve
    .globl a64_regs_sve_probe
    .type a64_regs_sve_probe, %function
a64_regs_sve_probe:
    stp x29, x30, [sp, #-16]!
    mov x29, sp
    stp d8, d9, [sp, #-64]!
    stp d10, d11, [sp, #16]
    stp d12, d13, [sp, #32]
    stp d14, d15, [sp, #48]
    str x0, [sp, #-16]!
    .irp n,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    movz x9, #(0xa640 + \n), lsl #48
    movk x9, #(\n * 0x101)
    index z\n\().d, x9, #1
    .endr
    .irp n,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    mov x9, #(\n + 1)
    whilelo p\n\().b, xzr, x9
    .endr
    wrffr p5.b
    STAP_PROBE(pydyn_a64, regs_sve)
    ldr x1, [sp]
    .irp n,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    str z\n, [x1, #\n, mul vl]
    .endr
    addvl x2, x1, #31
    addvl x2, x2, #1
    .irp n,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    str p\n, [x2, #\n, mul vl]
    .endr
    rdffr p0.b
    str p0, [x2, #16, mul vl]
    add sp, sp, #16
    ldp d10, d11, [sp, #16]
    ldp d12, d13, [sp, #32]
    ldp d14, d15, [sp, #48]
    ldp d8, d9, [sp], #64
    ldp x29, x30, [sp], #16
    ret
    .size a64_regs_sve_probe, .-a64_regs_sve_probe
    .section .note.GNU-stack,"",%progbits

/* aarch64 function entries whose first instruction is PC-relative: each
 * must give the same result from the stub's relocated copy as in place
 * (tests/test_aarch64_functions.py; launcher/plan/aarch64.py relocates them).
 * The pac/bti forms are hint-space: they assemble for any -march and run as nops
 * on a CPU without pointer authentication / BTI (qemu's default cpu has both). */
        .text
        .p2align 2
        .globl f_adr, f_adrp, f_ldrx, f_ldrw, f_ldrsw, f_ldrd, f_ldrq, f_prfm
        .globl f_b, f_target, f_bl, call_bl, f_bcond, call_bcond, f_cbz, f_tbz, f_tbnz
        .globl f_pac, f_bti, pac_active
        .type f_adr, %function
f_adr:  adr x0, lit_adr            /* 0x1111 */
        ldr x0, [x0]
        ret
        .size f_adr, .-f_adr
        .type f_adrp, %function
f_adrp: adrp x0, d_adrp            /* 0x2222 */
        add x0, x0, :lo12:d_adrp
        ldr x0, [x0]
        ret
        .size f_adrp, .-f_adrp
        .type f_ldrx, %function
f_ldrx: ldr x0, lit_x              /* 0x3333 */
        ret
        .size f_ldrx, .-f_ldrx
        .type f_ldrw, %function
f_ldrw: ldr w0, lit_w              /* 0x4444 */
        ret
        .size f_ldrw, .-f_ldrw
        .type f_ldrsw, %function
f_ldrsw: ldrsw x0, lit_sw          /* -5 */
        ret
        .size f_ldrsw, .-f_ldrsw
        .type f_ldrd, %function
f_ldrd: ldr d0, lit_d              /* 66.0 -> 66 */
        fcvtzs x0, d0
        ret
        .size f_ldrd, .-f_ldrd
        .type f_ldrq, %function
f_ldrq: ldr q0, lit_q              /* low half 0x7777, high half 0x8888: their sum */
        fmov x0, d0
        mov x1, v0.d[1]
        add x0, x0, x1
        ret
        .size f_ldrq, .-f_ldrq
        .type f_prfm, %function
f_prfm: prfm pldl1keep, lit_x
        mov x0, #8
        ret
        .size f_prfm, .-f_prfm
        .type f_b, %function
f_b:    b f_target                 /* a tail call: x0 + 100 */
        .size f_b, .-f_b
        .type f_target, %function
f_target: add x0, x0, #100
        ret
        .size f_target, .-f_target
        /* f_bl's first instruction is a call whose return address must be f_bl + 4; it
         * keeps its own in x10 (call_bl puts it there) and returns 1 if it was */
        .type call_bl, %function
call_bl: mov x10, x30
        b f_bl
        .size call_bl, .-call_bl
        .type f_bl, %function
f_bl:   bl h_bl
        adr x2, f_bl + 4
        cmp x1, x2
        cset x0, eq
        mov x30, x10               /* ret, not br: a BTI-guarded caller needs no pad */
        ret
        .size f_bl, .-f_bl
h_bl:   mov x1, x30
        ret
        /* the flags at f_bcond's entry are call_bcond's compare: x0 < 5 ? 20 : 10 */
        .type call_bcond, %function
call_bcond: cmp x0, #5
        b f_bcond
        .size call_bcond, .-call_bcond
        .type f_bcond, %function
f_bcond: b.lt 1f
        mov x0, #10
        ret
1:      mov x0, #20
        ret
        .size f_bcond, .-f_bcond
        .type f_cbz, %function
f_cbz:  cbz x0, 1f                 /* x0 == 0 ? 40 : 30 */
        mov x0, #30
        ret
1:      mov x0, #40
        ret
        .size f_cbz, .-f_cbz
        .type f_tbz, %function
f_tbz:  tbz w0, #3, 1f             /* bit 3 clear ? 60 : 50 */
        mov x0, #50
        ret
1:      mov x0, #60
        ret
        .size f_tbz, .-f_tbz
        .type f_tbnz, %function
f_tbnz: tbnz x0, #40, 1f           /* bit 40 set ? 80 : 90 */
        mov x0, #90
        ret
1:      mov x0, #80
        ret
        .size f_tbnz, .-f_tbnz
        /* signs its return address (paciasp = hint #25, autiasp = hint #29): with
         * pointer authentication a return address swapped after the signing would fail
         * the autiasp (a fault, or a poisoned pointer the ret faults on) */
        .type f_pac, %function
f_pac:  hint #25
        stp x29, x30, [sp, #-16]!
        mov x29, sp
        bl f_target
        ldp x29, x30, [sp], #16
        hint #29
        ret
        .size f_pac, .-f_pac
        /* 1 if the CPU authenticates pointers: signing x30 with 4 modifiers changes it
         * at least once (one PAC may equal the bits it replaces: ~1 in 128) */
        .type pac_active, %function
pac_active: mov x3, #0
        mov x16, #0
1:      mov x17, x30
        hint #8                    /* pacia1716: x17 signed with modifier x16 */
        cmp x17, x30
        cinc x3, x3, ne
        add x16, x16, #1
        cmp x16, #4
        b.ne 1b
        cmp x3, #0
        cset x0, ne
        ret
        .size pac_active, .-pac_active
        .type f_bti, %function
f_bti:  hint #34                   /* bti c: the probe goes after it */
        mov x0, #70
        ret
        .size f_bti, .-f_bti

        .p2align 3
lit_adr: .quad 0x1111
lit_x:  .quad 0x3333
lit_w:  .word 0x4444
lit_sw: .word -5
lit_d:  .double 66.0
lit_q:  .quad 0x7777, 0x8888

        .data
        .p2align 3
d_adrp: .quad 0x2222
        .section .note.GNU-stack,"",%progbits

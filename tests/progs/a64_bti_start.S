/* A _start for a program linked -nostartfiles with -z force-bti (the aarch64 BTI
 * test): Debian's crt objects have no BTI landing pads, and under qemu (which enforces
 * BTI on guarded pages) libc's indirect calls into them fault.  This one passes no
 * init/fini (glibc >= 2.34 runs the init arrays itself); main is reached by libc's
 * indirect call, so its first instruction (paciasp or bti c) must stay a landing pad. */
        .text
        .globl _start
        .type _start, %function
_start: hint #34                   /* bti c: ld.so branches here indirectly */
        mov x29, #0
        mov x30, #0
        mov x5, x0                 /* rtld_fini */
        ldr x1, [sp]               /* argc */
        add x2, sp, #8             /* argv */
        mov x6, sp                 /* stack end */
        adrp x0, main
        add x0, x0, :lo12:main
        mov x3, #0
        mov x4, #0
        bl __libc_start_main
        brk #1
        .size _start, .-_start
        .section .note.GNU-stack,"",%progbits

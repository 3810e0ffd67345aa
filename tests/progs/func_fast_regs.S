/* x86-64: leaf_fn and a caller that, as gcc's IPA-RA lets the caller of a local
 * function do, keeps values in every register leaf_fn leaves alone across the call. */
        .text
        .globl leaf_fn
        .type leaf_fn,@function
leaf_fn:                        /* long leaf_fn(long x): x + 1, touching only rax */
        mov %rdi,%rax
        add $1,%rax
        ret
        .size leaf_fn,.-leaf_fn

        .globl regs_check
        .type regs_check,@function
regs_check:                     /* long regs_check(long x): 0 if all survived */
        push %rbx
        mov %rdi,%rbx
        mov $0x1111,%rcx
        mov $0x2222,%rdx
        mov $0x3333,%rsi
        mov $0x4444,%r8
        mov $0x5555,%r9
        mov $0x6666,%r10
        mov $0x7777,%r11
        call leaf_fn
        sub %rbx,%rdi
        sub $0x1111,%rcx
        sub $0x2222,%rdx
        sub $0x3333,%rsi
        sub $0x4444,%r8
        sub $0x5555,%r9
        sub $0x6666,%r10
        sub $0x7777,%r11
        or %rcx,%rdi
        or %rdx,%rdi
        or %rsi,%rdi
        or %r8,%rdi
        or %r9,%rdi
        or %r10,%rdi
        or %r11,%rdi
        lea 1(%rbx),%rcx
        sub %rcx,%rax
        or %rdi,%rax
        pop %rbx
        ret
        .size regs_check,.-regs_check
        .section .note.GNU-stack,"",@progbits

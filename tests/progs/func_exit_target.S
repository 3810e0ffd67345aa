/* exit_target (tests/test_func_exits.py): its `ret` is reached by a rel8 branch and
 * follows another instruction with no padding after it, so the exit's window starts
 * one instruction before the `ret` (the handler runs after it) and the branch is sent
 * to the handler through an island in before_fn's dead padding. */
    .text
    .globl before_fn
    .type before_fn,@function
before_fn:
    mov %rdi,%rax
    ret
    .size before_fn,.-before_fn
    .p2align 5
    .globl exit_target
    .type exit_target,@function
exit_target:                    /* odd x: x; even x: x + 100 */
    mov %rdi,%rax
    test $1,%dil
    jne 1f
    add $100,%rax
1:  ret
    .size exit_target,.-exit_target
    .globl after_fn
    .type after_fn,@function
after_fn:
    lea 1(%rdi),%rax
    ret
    .size after_fn,.-after_fn
    .section .note.GNU-stack,"",@progbits

/* Every general register and the arithmetic flags across a USDT site
 * (tests/test_private_stack.py, gpr_keep_main.c): gpr_keep(seed) loads seed + k into each
 * register but the stack pointer and sets CF PF AF ZF SF OF, fires the mark, and
 * hands what the registers hold after it to gpr_check. */
#include <sys/sdt.h>
    .text
    .globl gpr_keep
    .type gpr_keep, @function
gpr_keep:
#if defined(__x86_64__)
    push %rbx
    push %rbp
    push %r12
    push %r13
    push %r14
    push %r15
    push %rdi                      /* the seed */
    pushq $0x8d5
    popfq
    lea 1(%rdi),%rax
    lea 2(%rdi),%rbx
    lea 3(%rdi),%rcx
    lea 4(%rdi),%rdx
    lea 5(%rdi),%rsi
    lea 6(%rdi),%rbp
    lea 8(%rdi),%r8
    lea 9(%rdi),%r9
    lea 10(%rdi),%r10
    lea 11(%rdi),%r11
    lea 12(%rdi),%r12
    lea 13(%rdi),%r13
    lea 14(%rdi),%r14
    lea 15(%rdi),%r15
    lea 7(%rdi),%rdi
    STAP_PROBE1(pydyn_gpr, all, 8@%rdi)
    pushfq
    push %r15
    push %r14
    push %r13
    push %r12
    push %r11
    push %r10
    push %r9
    push %r8
    push %rbp
    push %rdi
    push %rsi
    push %rdx
    push %rcx
    push %rbx
    push %rax                      /* rax rbx rcx rdx rsi rdi rbp r8-r15 flags */
    mov %rsp,%rdi
    mov 128(%rsp),%rsi
    call gpr_check
    add $136,%rsp
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %rbp
    pop %rbx
    ret
#else
    push %ebx
    push %esi
    push %edi
    push %ebp
    mov 20(%esp),%eax
    push %eax                      /* the seed */
    pushl $0x8d5
    popfl
    lea 2(%eax),%ebx
    lea 3(%eax),%ecx
    lea 4(%eax),%edx
    lea 5(%eax),%esi
    lea 6(%eax),%ebp
    lea 7(%eax),%edi
    lea 1(%eax),%eax
    STAP_PROBE1(pydyn_gpr, all, 4@%eax)
    pushfl
    push %ebp
    push %edi
    push %esi
    push %edx
    push %ecx
    push %ebx
    push %eax                      /* eax ebx ecx edx esi edi ebp flags */
    mov %esp,%eax
    push 32(%eax)
    push %eax
    call gpr_check
    add $44,%esp
    pop %ebp
    pop %edi
    pop %esi
    pop %ebx
    ret
#endif
    .size gpr_keep, .-gpr_keep
    .section .note.GNU-stack,"",@progbits

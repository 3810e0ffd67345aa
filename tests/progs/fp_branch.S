/* A USDT site whose would-be-displaced bytes are a branch target (tests/test_trampolines.py):
 * the loop's back edge jumps to pc+1, past the mark's nop, so displacing the nop and
 * the instruction after it would let the branch land inside the 5-byte jmp.  The
 * patch planner must choose the trap here.  fp_branch(n) hits the mark n-1 times
 * and returns n-1.  A second mark, fp_plain, is followed by safe instructions.  The loop's
 * `jmp 2f` is a rel8 branch the planner can retarget (through dead padding) so
 * "looped" need not trap; a third mark, "indirect", is followed by an address the code
 * takes itself (lea of label 4, or a pointer to it in data), which no retargeting can reach: that one traps. */
#include <sys/sdt.h>

    .text
    .globl fp_branch
    .type fp_branch, @function
fp_branch:
#if defined(__x86_64__)
    mov %edi, %ecx
    xor %eax, %eax
    jmp 2f
1:
    STAP_PROBE(pydyn_fp, looped)
2:
    sub $1, %ecx
    lea 1(%eax), %eax
    jnz 1b
    sub $1, %eax
    STAP_PROBE(pydyn_fp, plain)
    mov %eax, %eax
    mov %eax, %eax
    lea 4f(%rip), %rdx
    STAP_PROBE(pydyn_fp, indirect)
4:
    mov %eax, %eax
    mov %eax, %eax
    ret
#else
    mov 4(%esp), %ecx
    xor %eax, %eax
    jmp 2f
1:
    STAP_PROBE(pydyn_fp, looped)
2:
    sub $1, %ecx
    lea 1(%eax), %eax
    jnz 1b
    sub $1, %eax
    STAP_PROBE(pydyn_fp, plain)
    mov %eax, %eax
    mov %eax, %eax
    STAP_PROBE(pydyn_fp, indirect)
4:  /* named by a code pointer in data (below) */
    mov %eax, %eax
    mov %eax, %eax
    ret
#endif
    .size fp_branch, .-fp_branch
#if !defined(__x86_64__)
    .section .data.rel.ro,"aw"
    .long 4b
#endif
    .section .note.GNU-stack,"",@progbits

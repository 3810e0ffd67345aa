/* A USDT site hit with the stack pointer set to an unmapped address (0x10), its
 * arguments in registers (tests/test_trampolines.py): handlers must not touch the
 * target stack -- trap sites run on the thread's signal stack, and a trampoline whose
 * first push faults is finished from the SIGSEGV handler on it. */
#include <sys/sdt.h>
    .text
    .globl gs_probe
    .type gs_probe, @function
/* gs_probe(a, b): the mark fires with the stack pointer set to an unmapped address. */
gs_probe:
#if defined(__x86_64__)
    mov %rsp, %rax
    mov $0x10, %rsp
    STAP_PROBE2(pydyn_gs, garbage, 8@%rdi, 8@%rsi)
    mov %rax, %rsp
    lea (%rdi,%rsi), %rax
    ret
#else
    mov 4(%esp), %ecx
    mov 8(%esp), %edx
    mov %esp, %eax
    mov $0x10, %esp
    STAP_PROBE2(pydyn_gs, garbage, 4@%ecx, 4@%edx)
    mov %eax, %esp
    lea (%ecx,%edx), %eax
    ret
#endif
    .size gs_probe, .-gs_probe
    .section .note.GNU-stack,"",@progbits

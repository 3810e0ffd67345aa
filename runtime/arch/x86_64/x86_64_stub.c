/* The x86-64 parts of a trampoline stub (the rest: ../x86/x86_tramp.c): saving the
 * registers, the call into C and the way back, emitted as machine code. */
#define _GNU_SOURCE
#include "pd_internal.h"
#include "pd_tramp.h"

/* x86_64_ret.S and the stubs lay the frame out word by word */
_Static_assert(sizeof(struct pd_regs) == 144, "pd_ret_tramp's frame");

/* op reg, %fs:off: the thread's TLS word at `off`. */
void pd_e_tls(struct pd_emit *e, uint8_t rex, uint8_t op, int reg, int32_t off)
{
    pd_e8(e, 0x64);
    if (rex)
        pd_e8(e, rex);
    pd_e8(e, op);
    pd_e8(e, (uint8_t)(((reg & 7) << 3) | 4)); /* SIB, no base or index: absolute disp32 */
    pd_e8(e, 0x25);
    pd_e32(e, (uint32_t)off);
}

/* From the stub's start to just before its relocated code: see ../x86/tramp.h. */
uint8_t *pd_stub_frame(struct pd_emit *e, uint8_t *at, const struct pd_site *site,
                       uintptr_t bias, int ps, uintptr_t target)
{
    uint8_t *body;
    /* DWARF order -> x86 register encoding; rsp (7) is computed. */
    static const int8_t enc[PD_NREGS] = {0, 2, 1, 3, 6, 7, 5, -1, 8, 9, 10, 11, 12, 13, 14, 15, -1};
    const int32_t frame = (int32_t)sizeof(struct pd_regs) + 8; /* + the flags word */
    if (ps)
        pd_switch_stack(e, at);
    else
        pd_e(e, "\x48\x8d\x64\x24\x80", 5);                   /* lea -128(%rsp),%rsp */
    body = e->p;
    pd_e_sp(e, 0x48, 0x8d, 4, -frame);                         /* lea -frame(%rsp),%rsp */
    if (!ps) {
        pd_stub_store_off = (unsigned)(e->p - at);
        pd_stub_sp_delta = (unsigned)frame + 128;
    }
    pd_e_sp(e, 0x48, 0x89, 0, 0);                              /* mov %rax,(%rsp) */
    pd_e(e, "\x9f\x0f\x90\xc0", 4);                            /* lahf; seto %al */
    pd_e_sp(e, 0x48, 0x89, 0, frame - 8);                      /* mov %rax,flagsword */
    for (int i = 1; i < PD_DWARF_IP; i++) {
        if (enc[i] < 0)
            continue;
        pd_e_sp(e, (uint8_t)(0x48 | (enc[i] >= 8 ? 4 : 0)), 0x89, enc[i], 8 * i);
    }
    if (ps)
        pd_e_sp(e, 0x48, 0x8b, 0, frame);                      /* mov saved_sp,%rax */
    else
        pd_e_sp(e, 0x48, 0x8d, 0, frame + 128);                /* lea orig_rsp,%rax */
    pd_e_sp(e, 0x48, 0x89, 0, 8 * PD_DWARF_SP);
    pd_e(e, "\x48\xb8", 2);                                    /* movabs $site,%rax */
    pd_e64(e, (uint64_t)(bias + (uintptr_t)site->pc));
    pd_e_sp(e, 0x48, 0x89, 0, 8 * PD_DWARF_IP);
    pd_e(e, "\x48\x89\xe3", 3);                                /* mov %rsp,%rbx */
    pd_e(e, "\x48\x83\xe4\xf0", 4);                            /* and $-16,%rsp */
    if (PD_TRAMP_SAVE_XMM && pd_xmm_always) {
        pd_e(e, "\x48\x81\xec\x00\x01\x00\x00", 7);            /* sub $256,%rsp */
        for (int n = 0; n < 16; n++)
            pd_e_xmm(e, 1, n, 16 * n);                         /* movdqa %xmmN,16n(%rsp) */
    }
    pd_e8(e, 0xfc);                                            /* cld */
    pd_e(e, "\x48\x89\xdf", 3);                                /* mov %rbx,%rdi */
    pd_e(e, "\x48\xbe", 2);                                    /* movabs $site,%rsi */
    pd_e64(e, (uint64_t)(uintptr_t)site);
    pd_e(e, "\x48\xba", 2);                                    /* movabs $bias,%rdx */
    pd_e64(e, (uint64_t)bias);
    pd_e(e, "\x48\xb8", 2);                                    /* movabs $target,%rax */
    pd_e64(e, (uint64_t)target);
    pd_e(e, "\xff\xd0", 2);                                    /* call *%rax */
    if (PD_TRAMP_SAVE_XMM && pd_xmm_always) {
        for (int n = 0; n < 16; n++)
            pd_e_xmm(e, 0, n, 16 * n);                         /* movdqa 16n(%rsp),%xmmN */
    }
    pd_e(e, "\x48\x89\xdc", 3);                                /* mov %rbx,%rsp */
    if (ps) {                                                  /* release the stack */
        pd_e_sp(e, 0x48, 0x8b, 0, frame + 8);                  /* mov top_or_0,%rax */
        pd_e_tls(e, 0x48, 0x89, 0, pd_ps_top_off);             /* mov %rax,%fs:TOP */
    }
    pd_e_sp(e, 0x48, 0x8b, 0, frame - 8);                      /* mov flagsword,%rax */
    pd_e(e, "\x04\x7f\x9e", 3);                                /* add $0x7f,%al; sahf */
    for (int i = 0; i < PD_DWARF_IP; i++) {                    /* all but rsp: r12-r15 */
        if (enc[i] < 0)                                        /* too, a guru handler */
            continue;                                          /* may write them */
        pd_e_sp(e, (uint8_t)(0x48 | (enc[i] >= 8 ? 4 : 0)), 0x8b, enc[i], 8 * i);
    }
    if (ps) {
        pd_e_sp(e, 0x48, 0x8d, 4, frame);                      /* lea frame(%rsp),%rsp */
        pd_e(e, "\x48\x8b\x24\x24", 4);                        /* mov (%rsp),%rsp */
    } else {
        pd_e_sp(e, 0x48, 0x8d, 4, frame + 128);                /* lea ...(%rsp),%rsp */
    }
    return body;
}

/* A FAST site's body between pd_switch_stack and the jump to the relocated code. */
void pd_fast_frame(struct pd_emit *e, const struct pd_probe *p, const struct pd_site *site,
                   uintptr_t bias, int fn, uintptr_t target, uintptr_t arg2)
{
    /* rax rcx rdx rsi rdi r8-r11, flags at 72; the site's sp at 80, TOP's value at 88.
     * sp stays 16-aligned (pd_switch_stack), so no `and` and no register to undo it. */
    static const int8_t save[9] = {0, 1, 2, 6, 7, 8, 9, 10, 11};
    pd_e(e, "\x48\x8d\x64\x24\xb0", 5);                       /* lea -80(%rsp),%rsp */
    pd_e_sp(e, 0x48, 0x89, 0, 0);                              /* mov %rax,(%rsp) */
    pd_e(e, "\x9f\x0f\x90\xc0", 4);                            /* lahf; seto %al */
    pd_e_sp(e, 0x48, 0x89, 0, 72);                             /* mov %rax,flagsword */
    for (int i = 1; i < 9; i++)
        pd_e_sp(e, (uint8_t)(0x48 | (save[i] >= 8 ? 4 : 0)), 0x89, save[i], 8 * i);
    pd_e8(e, 0xfc);                                            /* cld */
    pd_e(e, "\x48\xbf", 2);                                    /* movabs $probe,%rdi */
    pd_e64(e, (uint64_t)(uintptr_t)p);
    pd_e(e, "\x48\xbe", 2);                                    /* movabs $arg2,%rsi */
    pd_e64(e, (uint64_t)arg2);
    if (fn) { /* pd_func_fire_sp(p, site, the site's sp, bias) */
        pd_e(e, "\x48\x8b\x54\x24\x50\x48\xb9", 7);            /* mov 80(%rsp),%rdx; movabs */
        pd_e64(e, (uint64_t)bias);
    }
    pd_e(e, "\x48\xb8", 2);                                    /* movabs $target,%rax */
    pd_e64(e, (uint64_t)target);
    pd_e(e, "\xff\xd0", 2);                                    /* call *%rax */
    pd_e_sp(e, 0x48, 0x8b, 0, 88);                             /* release the stack */
    pd_e_tls(e, 0x48, 0x89, 0, pd_ps_top_off);
    pd_e_sp(e, 0x48, 0x8b, 0, 72);                             /* flags */
    pd_e(e, "\x04\x7f\x9e", 3);                                /* add $0x7f,%al; sahf */
    for (int i = 0; i < 9; i++)
        pd_e_sp(e, (uint8_t)(0x48 | (save[i] >= 8 ? 4 : 0)), 0x8b, save[i], 8 * i);
    pd_e(e, "\x48\x8d\x64\x24\x50\x48\x8b\x24\x24", 9);         /* lea 80(%rsp),%rsp; mov (%rsp),%rsp */
}

/* The i386 parts of a trampoline stub (the rest: ../x86/x86_tramp.c): saving the
 * registers, the call into C and the way back, emitted as machine code. */
#define _GNU_SOURCE
#include "pd_internal.h"
#include "pd_tramp.h"

/* i386_ret.S and the stubs lay the frame out word by word */
_Static_assert(sizeof(struct pd_regs) == 40, "pd_ret_tramp's frame");

/* op reg, %gs:off: the thread's TLS word at `off`. */
void pd_e_tls(struct pd_emit *e, uint8_t rex, uint8_t op, int reg, int32_t off)
{
    (void)rex;
    pd_e8(e, 0x65);
    pd_e8(e, op);
    pd_e8(e, (uint8_t)(((reg & 7) << 3) | 5)); /* disp32 */
    pd_e32(e, (uint32_t)off);
}

/* From the stub's start to just before its relocated code: see ../x86/tramp.h. */
uint8_t *pd_stub_frame(struct pd_emit *e, uint8_t *at, const struct pd_site *site,
                       uintptr_t bias, int ps, uintptr_t target)
{
    uint8_t *body;
    const int32_t frame = (int32_t)sizeof(struct pd_regs) + 4;
    static const int8_t enc[PD_NREGS] = {0, 1, 2, 3, -1, 5, 6, 7, -1}; /* eax ecx edx ebx . ebp esi edi */
    if (ps)
        pd_switch_stack(e, at);
    body = e->p;
    pd_e_sp(e, 0, 0x8d, 4, -frame);                            /* lea -frame(%esp),%esp */
    if (!ps) {
        pd_stub_store_off = (unsigned)(e->p - at);
        pd_stub_sp_delta = (unsigned)frame;
    }
    pd_e_sp(e, 0, 0x89, 0, 0);                                 /* mov %eax,(%esp) */
    pd_e(e, "\x9f\x0f\x90\xc0", 4);                            /* lahf; seto %al */
    pd_e_sp(e, 0, 0x89, 0, frame - 4);
    for (int i = 1; i < PD_DWARF_IP; i++)
        if (enc[i] >= 0)
            pd_e_sp(e, 0, 0x89, enc[i], 4 * i);
    pd_e_sp(e, 0, ps ? 0x8b : 0x8d, 0, frame);                 /* mov saved_sp / lea orig_esp,%eax */
    pd_e_sp(e, 0, 0x89, 0, 4 * PD_DWARF_SP);
    pd_e_sp(e, 0, 0xc7, 0, 4 * PD_DWARF_IP);                   /* movl $site,ip */
    pd_e32(e, (uint32_t)(bias + (uintptr_t)site->pc));
    pd_e(e, "\x89\xe3", 2);                                    /* mov %esp,%ebx */
    pd_e(e, "\x83\xe4\xf0", 3);                                /* and $-16,%esp */
    if (PD_TRAMP_SAVE_XMM && pd_xmm_always) {
        pd_e(e, "\x81\xec\x80\x00\x00\x00", 6);                /* sub $128,%esp */
        for (int n = 0; n < 8; n++)
            pd_e_xmm(e, 1, n, 16 * n);
    }
    pd_e8(e, 0xfc);                                            /* cld */
    pd_e(e, "\x83\xec\x04", 3);                                /* sub $4,%esp */
    pd_e8(e, 0x68);                                            /* push $bias */
    pd_e32(e, (uint32_t)bias);
    pd_e8(e, 0x68);                                            /* push $site */
    pd_e32(e, (uint32_t)(uintptr_t)site);
    pd_e8(e, 0x53);                                            /* push %ebx */
    pd_e8(e, 0xe8);                                            /* call target */
    uint8_t *call_field = e->p;
    pd_e32(e, 0);
    if (e->p <= e->end)
        pd_put_rel32(call_field, (uintptr_t)e->p, target);
    if (PD_TRAMP_SAVE_XMM && pd_xmm_always) {
        pd_e(e, "\x83\xc4\x10", 3);                            /* add $16,%esp */
        for (int n = 0; n < 8; n++)
            pd_e_xmm(e, 0, n, 16 * n);
    }
    pd_e(e, "\x89\xdc", 2);                                    /* mov %ebx,%esp */
    if (ps) {                                                  /* release the stack */
        pd_e_sp(e, 0, 0x8b, 0, frame + 4);                     /* mov top_or_0,%eax */
        pd_e_tls(e, 0, 0x89, 0, pd_ps_top_off);                /* mov %eax,%gs:TOP */
    }
    pd_e_sp(e, 0, 0x8b, 0, frame - 4);
    pd_e(e, "\x04\x7f\x9e", 3);                                /* add $0x7f,%al; sahf */
    for (int i = 0; i < PD_DWARF_IP; i++)                      /* all but esp: ebp esi */
        if (enc[i] >= 0)                                       /* edi too, a guru */
            pd_e_sp(e, 0, 0x8b, enc[i], 4 * i);                /* handler may write them */
    pd_e_sp(e, 0, 0x8d, 4, frame);                             /* lea frame(%esp),%esp */
    if (ps)
        pd_e(e, "\x8b\x24\x24", 3);                             /* mov (%esp),%esp */
    return body;
}

/* A FAST site's body between pd_switch_stack and the jump to the relocated code. */
void pd_fast_frame(struct pd_emit *e, const struct pd_probe *p, const struct pd_site *site,
                   uintptr_t bias, int fn, uintptr_t target, uintptr_t arg2)
{
    /* eax ecx edx, flags at 12; the site's sp at 16, TOP's value at 20 (sp 16-aligned) */
    pd_e(e, "\x8d\x64\x24\xf0", 4);                            /* lea -16(%esp),%esp */
    pd_e(e, "\x89\x04\x24\x9f\x0f\x90\xc0", 7);                   /* mov %eax,(%esp); lahf; seto */
    pd_e_sp(e, 0, 0x89, 0, 12);
    for (int i = 1; i < 3; i++)
        pd_e_sp(e, 0, 0x89, i, 4 * i);                         /* ecx edx */
    pd_e8(e, 0xfc);                                            /* cld */
    if (fn) {
        pd_e8(e, 0x68);                                        /* push $bias */
        pd_e32(e, (uint32_t)bias);
        pd_e(e, "\xff\x74\x24\x14\x68", 5);                    /* pushl 20(%esp) (sp); push $site */
        pd_e32(e, (uint32_t)(uintptr_t)site);
        pd_e8(e, 0x68);                                        /* push $probe */
    } else {                                                   /* regparm(2): */
        pd_e8(e, 0xba);                                        /* mov $env,%edx */
        pd_e32(e, (uint32_t)arg2);
        pd_e8(e, 0xb8);                                        /* mov $probe,%eax */
    }
    pd_e32(e, (uint32_t)(uintptr_t)p);
    pd_e8(e, 0xe8);                                            /* call target */
    uint8_t *call_field = e->p;
    pd_e32(e, 0);
    if (e->p <= e->end)
        pd_put_rel32(call_field, (uintptr_t)e->p, target);
    if (fn)
        pd_e(e, "\x8d\x64\x24\x10", 4);                        /* lea 16(%esp),%esp */
    pd_e_sp(e, 0, 0x8b, 0, 20);                                /* release the stack */
    pd_e_tls(e, 0, 0x89, 0, pd_ps_top_off);
    pd_e_sp(e, 0, 0x8b, 0, 12);                                /* flags */
    pd_e(e, "\x04\x7f\x9e", 3);                                /* add $0x7f,%al; sahf */
    for (int i = 0; i < 3; i++)
        pd_e_sp(e, 0, 0x8b, i, 4 * i);
    pd_e(e, "\x8d\x64\x24\x10\x8b\x24\x24", 7);                   /* lea 16(%esp),%esp; mov (%esp),%esp */
}

/* register(), u_register(), @uregister, uaddr(), the *_arg() family and regparm(): stap's
 * registers tapset (tapset/<arch>/registers.stp) on the probe's register context.
 *
 * Each arch folder names its registers (pd_regnames[], the names stap's tapset of that
 * arch knows, and those of x86_64's tapset for a 32-bit process on an x86-64 kernel,
 * where stap runs the x86_64 tapset) and how a C function receives its arguments
 * (pd_arg_regs[]).  As stap does: a register narrower than the context's word is
 * sign-extended by register() and zero-extended by u_register(); an argument beyond the
 * registers is read from the stack above the return address (at a function's entry,
 * where pydyn's function probes are); a 32-bit process's arguments are 32-bit words
 * (int_arg sign-extends them, uint_arg and pointer_arg do not, longlong_arg joins two).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "pd_internal.h"

extern const struct pd_regname pd_regnames[];
extern const unsigned pd_nregnames;
extern const int pd_arg_regs[];
extern const unsigned pd_narg_regs;

/* The value of a register that pd_regs does not hold (PD_RN_* < 0). */
extern uint64_t pd_arch_special_reg(const struct pd_regs *regs, int which);

int64_t pd_uregister(struct pd_ctx *c, const char *name, int sign_extend)
{
    if (!c->regs) {
        pd_error(c, "cannot access CPU registers in this context");
        return 0;
    }
    const struct pd_regname *r = NULL;
    for (unsigned i = 0; i < pd_nregnames && !r; i++)
        if (strcmp(pd_regnames[i].name, name) == 0)
            r = &pd_regnames[i];
    if (!r) {
        pd_error(c, "Unknown register: %s", name);
        return 0;
    }
    uint64_t v = r->reg >= 0 ? (uint64_t)pd_reg(c->regs, r->reg)
                             : pd_arch_special_reg(c->regs, r->reg);
    v >>= r->shift;
    if (r->bits >= 64)
        return (int64_t)v;
    uint64_t mask = (UINT64_C(1) << r->bits) - 1;
    v &= mask;
    if (sign_extend && (v >> (r->bits - 1)))
        v |= ~mask;
    return (int64_t)v;
}

/* @uregister(regno): the probed thread's register of that DWARF number (the numbering
 * stap's user_regset table uses: the general registers, then the instruction pointer),
 * unsigned at the process's word size.  @kregister(regno) reads a kernel register, which
 * no pydyn probe context has: as stap's runtime in a context without one, both are the
 * same error where there is no such register. */
int64_t pd_uregno(struct pd_ctx *c, int64_t regno, int user)
{
    if (!user || !c->regs || regno < 0 || regno >= PD_NREGS) {
        pd_error(c, "register access fault [man error::fault]");
        return 0;
    }
    return (int64_t)pd_reg(c->regs, (int)regno);
}

int64_t pd_uaddr(struct pd_ctx *c)
{
    return c->regs ? (int64_t)(uintptr_t)pd_reg(c->regs, PD_DWARF_IP) : 0;
}

/* regparm(n): the next *_arg() calls of this handler take n arguments from registers. */
void pd_regparm(struct pd_ctx *c, int64_t n)
{
#if !defined(PD_ARGS_ON_STACK)
    pd_error(c, "regparm() is not available on %s", PD_ARCH_NAME);
    return;
#endif
    int64_t most = sizeof(long) == 4 ? 3 : (int64_t)pd_narg_regs;
    if (n < 0 || n > most) {
        if (sizeof(long) == 4)
            pd_error(c, "For -m32 programs, regparm value must be in the range 0-3.");
        else
            pd_error(c, "For %s, regparm value must be in the range 0-%d.", PD_ARCH_NAME,
                     (int)most);
        return;
    }
    c->regparm = PD_REGPARM_SET | (int)n;
}

/* stap's _stp_arg2(argnum, sign_extend, truncate): a word of this process's size, then
 * truncated to 32 bits (sign- or zero-extended) if `truncate` or the process is 32-bit. */
int64_t pd_uarg(struct pd_ctx *c, int64_t argnum, int sign_extend, int truncate)
{
    if (!c->regs) {
        pd_error(c, "cannot access function args in this context");
        return 0;
    }
    if (argnum < 1 || argnum > 1024) {
        pd_error(c, "cannot access arg(%lld)", (long long)argnum);
        return 0;
    }
    unsigned n = (unsigned)argnum;
    unsigned nregs = (c->regparm & PD_REGPARM_SET) ? (unsigned)(c->regparm & 0xff)
                                                   : (sizeof(long) == 4 ? 0 : pd_narg_regs);
    uint64_t val = 0;
    if (n > nregs) {
#if defined(PD_ARGS_ON_STACK)
        /* the stack at the function's entry: [0] the return address, then the arguments */
        uintptr_t at = (uintptr_t)pd_reg(c->regs, PD_DWARF_SP) + (n - nregs) * sizeof(long);
        unsigned long word = 0;
        if (pd_read_self(&word, (const void *)at, sizeof word) != (ssize_t)sizeof word) {
            char msg[96];
            snprintf(msg, sizeof msg, "cannot access arg(%u) at user stack address 0x%lx", n,
                     (unsigned long)at);
            pd_warn_probe(c, msg);
            return 0;
        }
        val = word;
#else
        pd_error(c, "Cannot access arg(%lld)", (long long)argnum); /* stap's arm64 tapset */
        return 0;
#endif
    } else {
        val = (uint64_t)pd_reg(c->regs, pd_arg_regs[n - 1]);
    }
    if (truncate || sizeof(long) == 4)
        return sign_extend ? (int64_t)(int32_t)(uint32_t)val : (int64_t)(uint32_t)val;
    return (int64_t)val;
}

/* longlong_arg: a 64-bit process's argument; a 32-bit one's two words, low first. */
int64_t pd_uarg64(struct pd_ctx *c, int64_t argnum)
{
    if (sizeof(long) == 8)
        return pd_uarg(c, argnum, 0, 0);
    uint64_t lo = (uint64_t)pd_uarg(c, argnum, 0, 1);
    if (c->error)
        return 0;
    uint64_t hi = (uint64_t)pd_uarg(c, argnum + 1, 0, 1);
    return (int64_t)(hi << 32 | lo);
}

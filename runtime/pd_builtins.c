/* The context built-ins the translator calls: arguments, user memory, process
 * identity, exit(), checked division. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pd_internal.h"
#include "pd_lock.h"

/* ---- context built-ins --------------------------------------------------- */

static int pd_read_user(struct pd_ctx *c, uintptr_t addr, void *dst, size_t n)
{
    /* process_vm_readv on ourselves: a bad pointer is an error, not a crash. */
    if (pd_read_self(dst, (const void *)addr, n) == (ssize_t)n)
        return 0;
    pd_error(c, "user memory read fault at 0x%lx (%u bytes)", (unsigned long)addr, (unsigned)n);
    return -1;
}

int64_t pd_user_read(struct pd_ctx *c, int64_t addr, unsigned size, int is_signed)
{
    uint64_t raw = 0;
    if (pd_read_user(c, (uintptr_t)addr, &raw, size))
        return 0;
    return pd_extend(raw, size, is_signed);
}

/* stap's user_int(addr) and the others without _error: 0 where addr cannot be read,
 * and no error */
int64_t pd_user_read_or0(int64_t addr, unsigned size, int is_signed)
{
    uint64_t raw = 0;
    if (pd_read_self(&raw, (const void *)(uintptr_t)addr, size) != (ssize_t)size)
        return 0;
    return pd_extend(raw, size, is_signed);
}

void pd_warn_probe(struct pd_ctx *c, const char *msg)
{
    pd_emit_text(c, PD_REC_WARNING, msg);
}

/* system(cmd): the launcher runs it with sh once it drains the record, after the
 * handler (as stap's staprun does, in the background, as the user running pydyn) */
void pd_system(struct pd_ctx *c, const char *cmd)
{
    pd_rec_open(c, PD_REC_SYSTEM, 0, 1);
    pd_rec_str(c, cmd);
    pd_rec_close(c);
}

/* A compiled DWARF location (struct pd_dwop): at most 8 stack values, and the
 * launcher checked the depth of every step; a memory read that faults is the
 * handler's error and the value 0, as for any other probe read. */
#define PD_DW_STACK 8
/* `address`: a location in memory gives its address, unread (pd_store_arg); another
 * kind of location is then an error. */
static int pd_eval_dwarf(struct pd_ctx *c, const struct pd_argdesc *a, uint64_t *out,
                         int address)
{
    uint64_t st[PD_DW_STACK], raw = 0, acc = 0;
    int sp = 0;
    unsigned filled = 0;
    for (const struct pd_dwop *o = a->ops;; o++) {
        uint64_t t = sp > 0 ? st[sp - 1] : 0;
        if (sp >= PD_DW_STACK && (o->op == PD_DW_CONST || o->op == PD_DW_ADDR ||
                                  o->op == PD_DW_REG || o->op == PD_DW_DUP ||
                                  o->op == PD_DW_ENTRY_REG)) {
            pd_error(c, "DWARF location deeper than %d values", PD_DW_STACK);
            return -1;
        }
        switch (o->op) {
        case PD_DW_CONST: st[sp++] = (uint64_t)o->arg; break;
        case PD_DW_ADDR: st[sp++] = (uint64_t)o->arg + c->bias; break;
        case PD_DW_REG: st[sp++] = (uint64_t)pd_reg(c->regs, o->reg); break;
        case PD_DW_DUP: st[sp] = t; sp++; break;
        case PD_DW_ENTRY_REG:
            /* the entry probe did not run for this call (attached inside it, or skipped) */
            if (!c->entry_regs) {
                pd_error(c, "not accessible at this address: the value at the function's "
                            "entry was not kept for this call");
                return -1;
            }
            st[sp++] = (uint64_t)c->entry_regs[o->reg];
            break;
        case PD_DW_DEREF:
            raw = 0;
            if (pd_read_user(c, (uintptr_t)t, &raw, (size_t)o->arg))
                return -1;
            st[sp - 1] = raw;
            break;
        case PD_DW_PLUS_CONST: st[sp - 1] = t + (uint64_t)o->arg; break;
        case PD_DW_NEG: st[sp - 1] = -t; break;
        case PD_DW_NOT: st[sp - 1] = ~t; break;
        case PD_DW_PLUS: case PD_DW_MINUS: case PD_DW_AND: case PD_DW_OR: case PD_DW_XOR:
        case PD_DW_MUL: case PD_DW_SHL: case PD_DW_SHR: case PD_DW_SHRA: {
            uint64_t l = st[sp - 2], r = t;
            sp--;
            switch (o->op) {
            case PD_DW_PLUS: l += r; break;
            case PD_DW_MINUS: l -= r; break;
            case PD_DW_AND: l &= r; break;
            case PD_DW_OR: l |= r; break;
            case PD_DW_XOR: l ^= r; break;
            case PD_DW_MUL: l *= r; break;
            case PD_DW_SHL: l = r < 64 ? l << r : 0; break;
            case PD_DW_SHR: l = r < 64 ? l >> r : 0; break;
            default: l = (uint64_t)((int64_t)l >> (r < 64 ? r : 63)); break;
            }
            st[sp - 1] = l;
            break;
        }
        case PD_DW_PIECE_REG: case PD_DW_PIECE_MEM: case PD_DW_PIECE_VAL: {
            uint64_t part = 0;
            if (o->op == PD_DW_PIECE_REG)
                part = (uint64_t)pd_reg(c->regs, o->reg);
            else if (o->op == PD_DW_PIECE_VAL)
                part = st[--sp];
            else if (pd_read_user(c, (uintptr_t)st[--sp], &part, (size_t)o->arg))
                return -1;
            if (o->arg < 8)
                part &= (1ull << (8 * o->arg)) - 1;
            if (filled < 8) /* an aggregate's later pieces: read by member (narrow()) */
                acc |= part << (8 * filled);   /* x86 and aarch64: little-endian pieces */
            filled += (unsigned)o->arg;
            break;
        }
        case PD_DW_END_MEMORY:
            if (address) {
                *out = t;
                return 0;
            }
            raw = 0;
            if (pd_read_user(c, (uintptr_t)t, &raw, a->size))
                return -1;
            *out = raw;
            return 0;
        case PD_DW_END_VALUE: case PD_DW_END_PIECES:
            if (address) {
                pd_error(c, "cannot write to a %s", o->op == PD_DW_END_VALUE
                                                      ? "computed value" : "noncontiguous object");
                return -1;
            }
            *out = o->op == PD_DW_END_VALUE ? t : acc;
            return 0;
        default:
            pd_error(c, "bad DWARF location step %u", (unsigned)o->op);
            return -1;
        }
    }
}

/* The address of a PD_ARG_MEM operand. */
static uintptr_t pd_arg_address(const struct pd_ctx *c, const struct pd_argdesc *a)
{
    uintptr_t addr = (uintptr_t)a->value;
    if (a->reg >= 0)
        addr += (uintptr_t)pd_reg(c->regs, a->reg);
    if (a->index >= 0)
        addr += (uintptr_t)pd_reg(c->regs, a->index) * a->scale;
    if (a->rel)
        addr += c->bias;
    if (a->seg == PD_SEG_TP)
        addr += pd_thread_pointer();
    return addr;
}

int64_t pd_fetch_arg(struct pd_ctx *c, unsigned index)
{
    if (!c->site || index >= c->site->nargs) {
        pd_error(c, "probe argument %u not available here", index + 1);
        return 0;
    }
    const struct pd_argdesc *a = &c->site->args[index];
    uint64_t raw = 0;
    switch (a->kind) {
    case PD_ARG_CONST:
        return a->rel ? (int64_t)((uint64_t)a->value + c->bias) : a->value;
    case PD_ARG_REG:
        raw = (uint64_t)pd_reg(c->regs, a->reg) >> a->shift;
        break;
    case PD_ARG_MEM:
        if (pd_read_user(c, pd_arg_address(c, a), &raw, a->size))
            return 0;
        break;
    case PD_ARG_EXPR:
        if (pd_eval_dwarf(c, a, &raw, 0))
            return 0;
        break;
    default:
        pd_error(c, "bad argument descriptor");
        return 0;
    }
    return pd_extend(raw, a->size, a->is_signed);
}

/* Guru mode's `$var = v`: the variable slot `index` reads, written where it is -- a
 * register of the probe's saved context, which the trampoline or trap loads back when
 * the probe returns (so the function goes on with the value), or memory (fault-safe:
 * a bad address is the handler's error).  The translator let only such places through
 * (tvars.unwritable); its value is v. */
int64_t pd_store_arg(struct pd_ctx *c, unsigned index, int64_t v)
{
    if (c->error) /* the value may come from a read that faulted */
        return v;
    if (!c->site || !c->regs || index >= c->site->nargs) {
        pd_error(c, "probe argument %u not writable here", index + 1);
        return v;
    }
    const struct pd_argdesc *a = &c->site->args[index];
    uint64_t addr = 0;
    switch (a->kind) {
    case PD_ARG_REG: {
        if (a->reg == PD_DWARF_SP || a->reg == PD_DWARF_IP || (unsigned)a->reg >= PD_NREGS)
            break;
        /* the context is the trampoline's frame or the trap's copy, both writable:
         * handlers only read it, hence the const */
        struct pd_regs *regs = (struct pd_regs *)(uintptr_t)c->regs;
        uint64_t mask = a->size >= 8 ? ~0ull : (1ull << (8 * a->size)) - 1;
        uint64_t old = (uint64_t)pd_reg(regs, a->reg);
        pd_set_reg(regs, a->reg, (pd_ureg)((old & ~(mask << a->shift)) |
                                           (((uint64_t)v & mask) << a->shift)));
        return v;
    }
    case PD_ARG_MEM:
        pd_set_user(c, (int64_t)pd_arg_address(c, a), v, a->size);
        return v;
    case PD_ARG_EXPR:
        if (pd_eval_dwarf(c, a, &addr, 1) == 0)
            pd_set_user(c, (int64_t)addr, v, a->size);
        return v;
    default:
        break;
    }
    pd_error(c, "probe argument %u not writable here", index + 1);
    return v;
}

int64_t pd_pid(void) { return getpid(); }
/* gettid costs a syscall a call (~1 us in some sandboxes); pd_lock.h caches it per
 * thread and forgets it in a forked child. */
int64_t pd_tid(void) { return (int64_t)pd_lock_self(); }
int64_t pd_ppid(void) { return getppid(); }

/* Read each time: a process may rename itself (PR_SET_NAME) at any point. */
const char *pd_execname(void)
{
    static __thread char name[17];
    if (prctl_get_name(name) != 0)
        strcpy(name, "?");
    else
        pd_arch_comm(name);
    return name;
}

int64_t pd_target(struct pd_ctx *c)
{
    (void)c;
    return pd_hdr ? pd_hdr->target_pid : 0;
}

/* exit() stops new probe handlers (session STOPPING); the launcher then runs `end`,
 * its drain thread woken here from a sleep on an idle ring (pd_launcher_idle). */
void pd_request_exit(void)
{
    __atomic_store_n(&pd_hdr->exit_requested, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&pd_hdr->ring_data_seq, 1, __ATOMIC_SEQ_CST);
    pd_futex_wake(&pd_hdr->ring_data_seq);
    uint32_t st = __atomic_load_n(&pd_hdr->session_state, __ATOMIC_ACQUIRE);
    while (st < PD_SESSION_STOPPING &&
           !__atomic_compare_exchange_n(&pd_hdr->session_state, &st, PD_SESSION_STOPPING, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        ;
}

/* Set by exit() in this thread's handler: the request waits until the handler's
 * records are in the ring (pd_run_finish), or the launcher could finish its last
 * drain before they arrive.  stap's exit() does not unwind the handler either. */
__thread int pd_exit_pending;

void pd_exit(struct pd_ctx *c)
{
    if (!pd_hdr)
        return;
    pd_exit_pending = 1;
    pd_rec_open(c, PD_REC_EXIT, 0, 0);
    pd_rec_close(c);
}

/* raise(sig) in this thread's handler: sent to the thread once the handler is done
 * (pd_run), as stap's send_sig is delivered when the probe returns to user space --
 * not while the handler holds the globals lock or its records are unwritten. */
__thread int pd_raise_pending;

void pd_raise(struct pd_ctx *c, int64_t sig)
{
    if (sig <= 0 || sig >= _NSIG) {
        pd_error(c, "raise/send_sig error %d", -EINVAL);
        return;
    }
    pd_raise_pending = (int)sig;
}

void pd_raise_now(void)
{
    int sig = pd_raise_pending;
    pd_raise_pending = 0;
    syscall(SYS_tgkill, (pid_t)pd_pid(), (pid_t)pd_tid(), sig);
}

int64_t pd_div(struct pd_ctx *c, int64_t a, int64_t b, const char *where)
{
    if (b == 0) {
        c->where = where;
        pd_error(c, "division by 0");
        return 0;
    }
    if (b == -1)
        return (int64_t)(0 - (uint64_t)a); /* INT64_MIN / -1 must not trap */
    return a / b;
}

int64_t pd_mod(struct pd_ctx *c, int64_t a, int64_t b, const char *where)
{
    if (b == 0) {
        c->where = where;
        pd_error(c, "division by 0");
        return 0;
    }
    if (b == -1)
        return 0;
    return a % b;
}

struct pd_header *pd_segment_header(void)
{
    return pd_hdr;
}

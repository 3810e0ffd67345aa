/* The aarch64 unhook walk (pd_unwind.c, unhook.h): libgcc walks the thread's stack and,
 * for each frame that returns to pd_ret_tramp, finds the slot where the frame saved x30
 * and the key it signed it with (frames.h's pd_a64_unhook_walk). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unwind.h>

#include "pd_runtime.h"
#include "frames.h"

typedef _Unwind_Reason_Code (*trace_fn)(_Unwind_Trace_Fn, void *);


extern const char pd_ret_tramp[], pd_ret_tramp_lo[], pd_ret_tramp_end[]
    __attribute__((visibility("hidden")));

/* pd_ret_tramp's FDE, for libgcc's __register_frame (a CIE, the FDE, a 0 terminator):
 * the CFA is sp, x30 (the return address) is the value its caller's frame left in its
 * slot -- unless that is pd_ret_tramp itself, signed or not (a hooked frame nobody
 * fixed): then 0, the end of the stack, so that no unwinder goes round in circles or
 * looks for code at a signed address there.  Built at run time: it holds absolute
 * addresses. */
static uint64_t pd_a64_eh[20];

static void pd_a64_eh_build(void)
{
    uint8_t *b = (uint8_t *)pd_a64_eh, *p = b;
    uint32_t u32;
    uint64_t u64;
    /* CIE: id 0, version 1, no augmentation, code align 4, data align -8, ra x30;
     * DW_CFA_def_cfa sp, 0 */
    static const uint8_t cie[] = {0, 0, 0, 0, 1, 0, 4, 0x78, 30, 0x0c, 31, 0};
    p += 4;
    memcpy(p, cie, sizeof cie);
    p += 16 - 4; /* padded with DW_CFA_nop to 8 bytes */
    u32 = 16 - 4;
    memcpy(b, &u32, 4);
    uint8_t *fde = p;
    p += 4;
    u32 = (uint32_t)(p - b); /* back to the CIE */
    memcpy(p, &u32, 4);
    p += 4;
    u64 = (uintptr_t)pd_ret_tramp_lo;
    memcpy(p, &u64, 8);
    p += 8;
    u64 = (uintptr_t)(pd_ret_tramp_end - pd_ret_tramp_lo);
    memcpy(p, &u64, 8);
    p += 8;
    /* DW_CFA_val_expression x30: breg30 0; dup; const8u 2^48-1; and (the signature
     * off: user addresses have 48 bits); const8u pd_ret_tramp; ne; mul */
    static const uint8_t rule[] = {0x16, 30, 24, 0x8e, 0, 0x12, 0x0e};
    memcpy(p, rule, sizeof rule);
    p += sizeof rule;
    u64 = ((uint64_t)1 << 48) - 1;
    memcpy(p, &u64, 8);
    p += 8;
    *p++ = 0x1a;
    *p++ = 0x0e;
    u64 = (uintptr_t)pd_ret_tramp;
    memcpy(p, &u64, 8);
    p += 8;
    *p++ = 0x2e;
    *p++ = 0x1e;
    while ((p - fde) % 8 != 0)
        *p++ = 0; /* DW_CFA_nop: the FDE's length is a multiple of 8 */
    u32 = (uint32_t)(p - fde - 4);
    memcpy(fde, &u32, 4);
    memset(p, 0, 4); /* the terminator */
}

/* ---- which key, if any, a frame signed its return address with --------------------
 * A hooked frame saved pd_ret_tramp signed with its entry sp, or unsigned: the value
 * alone cannot tell which when the signature happens to be 0 (qemu's PAC field is 7
 * bits: 1 frame in ~128), so ask the frame's FDE, as libgcc does when it strips: the
 * CIE's 'B' augmentation names the key, DW_CFA_AARCH64_negate_ra_state toggles the
 * state up to the pc (remember/restore_state keep it). */
struct pd_eh_bases {
    void *tbase, *dbase, *func;
};
typedef const uint8_t *(*find_fde_fn)(void *, struct pd_eh_bases *);
static find_fde_fn pd_a64_find_fde;

static const uint8_t *pd_uleb(const uint8_t *p, uint64_t *v)
{
    unsigned shift = 0;
    *v = 0;
    do
        *v |= (uint64_t)(*p & 0x7f) << (shift < 64 ? shift : 63);
    while ((*p++ & 0x80) && (shift += 7) < 70);
    return p;
}

/* The size of a pointer encoded with `enc` (DW_EH_PE_*), 0 for the LEB128 ones. */
static size_t pd_enc_size(uint8_t enc)
{
    static const uint8_t sizes[16] = {8, 0, 2, 4, 8, 0, 0, 0, 0, 0, 2, 4, 8};
    return sizes[enc & 0x0f];
}

/* PD_PAC_* for the frame whose return address (or, if sig, interrupted pc) is pc; -1 if
 * its CFI says nothing this reader follows. */
static int pd_a64_ra_key(uintptr_t pc, int sig)
{
    struct pd_eh_bases b;
    const uint8_t *fde = pd_a64_find_fde ? pd_a64_find_fde((void *)(pc - !sig), &b) : NULL;
    if (!fde)
        return -1;
    uint32_t len;
    int32_t back;
    memcpy(&len, fde, 4);
    memcpy(&back, fde + 4, 4);
    if (len >= 0xfffffff0u)
        return -1;
    const uint8_t *cie = fde + 4 - back, *end = fde + 4 + len;
    const char *aug = (const char *)cie + 9;
    const uint8_t *p = (const uint8_t *)aug + strlen(aug) + 1;
    uint64_t code_align, u;
    p = pd_uleb(p, &code_align);
    p = pd_uleb(p, &u); /* data alignment (its sign does not matter here) */
    p = cie[8] == 1 ? p + 1 : pd_uleb(p, &u);
    uint8_t fenc = 0; /* DW_EH_PE_absptr */
    if (aug[0] == 'z') {
        p = pd_uleb(p, &u); /* the augmentation data: its length, then by letter */
        const uint8_t *data_end = p + u;
        for (const char *a = aug + 1; *a; a++) {
            if (*a == 'R')
                fenc = *p++;
            else if (*a == 'L')
                p++;
            else if (*a == 'P')
                p += 1 + pd_enc_size(*p);
            else if (!strchr("BGS", *a))
                return -1;
        }
        p = data_end;
    } else if (aug[0]) {
        return -1;
    }
    size_t psize = pd_enc_size(fenc);
    if (!psize || (cie[8] != 1 && cie[8] != 3))
        return -1;
    int key = strchr(aug, 'B') ? PD_PAC_B : PD_PAC_A, state = 0, depth = 0;
    int saved[8];
    uintptr_t loc = (uintptr_t)b.func, stop = pc + (uintptr_t)sig;
    /* the CIE's initial instructions, then the FDE's after its header */
    const uint8_t *spans[2][2] = {{p, cie + 4 + *(const uint32_t *)(const void *)cie},
                                  {fde + 8 + 2 * psize, end}};
    if (aug[0] == 'z')
        spans[1][0] = pd_uleb(spans[1][0], &u) + u;
    for (int k = 0; k < 2; k++) {
        for (p = spans[k][0]; p < spans[k][1];) {
            uint8_t op = *p++;
            uint64_t delta = 0;
            switch (op >> 6) {
            case 1: delta = op & 0x3f; break;
            case 2: p = pd_uleb(p, &u); continue; /* DW_CFA_offset */
            case 3: continue;                      /* DW_CFA_restore */
            default:
                switch (op) {
                case 0x00: continue;
                case 0x02: delta = p[0], p += 1; break;
                case 0x03: delta = (uint64_t)p[0] | (uint64_t)p[1] << 8, p += 2; break;
                case 0x04: {
                    uint32_t d;
                    memcpy(&d, p, 4);
                    delta = d, p += 4;
                    break;
                }
                case 0x0a: /* remember_state */
                    if (depth == 8)
                        return -1;
                    saved[depth++] = state;
                    continue;
                case 0x0b: /* restore_state */
                    if (depth == 0)
                        return -1;
                    state = saved[--depth];
                    continue;
                case 0x2d: /* AARCH64_negate_ra_state */
                    state ^= 1;
                    continue;
                case 0x05: case 0x09: case 0x0c: case 0x14: case 0x2f: /* reg, uleb */
                case 0x11: case 0x12: case 0x15: /* reg, sleb */
                    p = pd_uleb(pd_uleb(p, &u), &u);
                    continue;
                case 0x06: case 0x07: case 0x08: case 0x0d: case 0x0e: case 0x13: case 0x2e:
                    p = pd_uleb(p, &u);
                    continue;
                case 0x0f: /* def_cfa_expression: a block */
                    p = pd_uleb(p, &u);
                    p += u;
                    continue;
                case 0x10: case 0x16: /* reg, block */
                    p = pd_uleb(pd_uleb(p, &u), &u);
                    p += u;
                    continue;
                default: /* set_loc or unknown: not followed */
                    return -1;
                }
            }
            loc += delta * code_align;
            if (loc >= stop) /* as libgcc: rows apply while their pc < the return address */
                break;
        }
    }
    return state ? key : PD_PAC_NONE;
}

typedef void (*register_fn)(void *);
static trace_fn pd_a64_backtrace; /* libgcc's _Unwind_Backtrace, once it is registered */

/* libgcc, loaded if the program has not (a C program's backtrace() loads it too). */
static void pd_a64_eh_init(void)
{
    void *h = pd_dlopen_noload(PD_LIBGCC);
    if (!h)
        h = dlopen(PD_LIBGCC, RTLD_LAZY | RTLD_LOCAL);
    register_fn reg = h ? (register_fn)dlsym(h, "__register_frame") : NULL;
    trace_fn trace = h ? (trace_fn)dlsym(h, "_Unwind_Backtrace") : NULL;
    pd_a64_find_fde = h ? (find_fde_fn)dlsym(h, "_Unwind_Find_FDE") : NULL;
    if (!reg || !trace || !pd_a64_find_fde)
        return;
    pd_a64_eh_build();
    reg(pd_a64_eh);
    pd_a64_backtrace = trace;
}

struct pd_a64_walk {
    uint32_t *cursor;
    uintptr_t below; /* the previous frame's CFA: this frame's sp */
    uintptr_t pc;    /* the previous frame's pc, and whether it was interrupted (a signal) */
    int sig;
};

static _Unwind_Reason_Code pd_a64_walk_frame(struct _Unwind_Context *ctx, void *arg)
{
    struct pd_a64_walk *w = arg;
    uintptr_t cfa = _Unwind_GetCFA(ctx);
    if (_Unwind_GetIP(ctx) == (uintptr_t)pd_ret_tramp) {
        /* The frame below returns here; the unwinder's context begins with the
         * locations it restores each register from (libgcc's struct _Unwind_Context:
         * reg[] first), x30's being that frame's slot.  Used only if it lies in that
         * frame, between its sp and its CFA (else a value, not a location). */
        uintptr_t slot = ((const uintptr_t *)(const void *)ctx)[30];
        int key = pd_a64_ra_key(w->pc, w->sig);
        if (slot >= w->below && slot < cfa && slot % 8 == 0 && key >= 0)
            pd_shadow_a64_fix(w->cursor, cfa, (uintptr_t *)slot, key);
    }
    w->below = cfa;
    w->pc = _Unwind_GetIPInfo(ctx, &w->sig);
    return _URC_NO_REASON;
}

int pd_a64_unhook_walk(uint32_t *cursor)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pd_a64_eh_init);
    if (!pd_a64_backtrace)
        return 0;
    struct pd_a64_walk w = {cursor, (uintptr_t)__builtin_frame_address(0), 0, 0};
    pd_a64_backtrace(pd_a64_walk_frame, &w);
    return 1;
}

/* The interface between generated probe code and the pydyn runtime.
 *
 * One generated C file per script is compiled for every ABI (m64, m32, ...)
 * together with pd_runtime.c.  The generated file defines the tables declared
 * at the bottom (probes, sites, objects, module info); the runtime finds the
 * sites in the loaded objects, arms them, and calls the probe handlers with a
 * struct pd_ctx whose register context was filled by a trap (now) or a
 * trampoline (later) in the same way.
 */
#ifndef PD_RUNTIME_H
#define PD_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pd_shm.h" /* generated from shmlayout/: the arch-neutral segment */

#if defined(__x86_64__)
#include "arch/x86_64/regs.h"
#elif defined(__i386__)
#include "arch/i386/regs.h"
#else
#error "pydyn runtime: unsupported architecture"
#endif

#define PD_EXPORT __attribute__((visibility("default")))
#define PD_LIKELY(x) __builtin_expect(!!(x), 1)
#define PD_UNLIKELY(x) __builtin_expect(!!(x), 0)

#ifndef MAXACTION
#define MAXACTION 1000
#endif
#ifndef MAXERRORS
#define MAXERRORS 0
#endif
#ifndef MAXSTRINGLEN
#define MAXSTRINGLEN 512
#endif
#ifndef PD_OUTBUF_SIZE
#define PD_OUTBUF_SIZE 8192
#endif

/* ---- tables emitted by the translator ---------------------------------- */

enum pd_arg_kind { PD_ARG_CONST = 0, PD_ARG_REG = 1, PD_ARG_MEM = 2 };
enum pd_seg { PD_SEG_NONE = 0, PD_SEG_TP = 1 }; /* %fs / %gs: thread pointer */

/* One sdt.h operand, decoded offline by the launcher (launcher/elf/argspec.py). */
struct pd_argdesc {
    int64_t value;   /* CONST: the value; MEM: the displacement */
    uint8_t kind;    /* enum pd_arg_kind */
    uint8_t size;    /* 1, 2, 4, 8 */
    uint8_t is_signed;
    uint8_t seg;     /* enum pd_seg */
    int8_t reg;      /* REG: the register; MEM: base register or -1 */
    int8_t index;    /* MEM: index register or -1 */
    uint8_t scale;
    uint8_t shift;   /* 8 for %ah-style high-byte registers */
    uint8_t rel;     /* MEM: displacement is a link-time address: add the load bias */
};

enum pd_probe_kind {
    PD_PROBE_BEGIN = 1,
    PD_PROBE_END = 2,
    PD_PROBE_ERROR = 3,
    PD_PROBE_MARK = 4,
    PD_PROBE_PROCESS_BEGIN = 5,
    PD_PROBE_PROCESS_END = 6,
    PD_PROBE_TIMER = 7,
};

struct pd_ctx;
typedef void (*pd_handler_fn)(struct pd_ctx *);

struct pd_probe {
    uint32_t kind;       /* enum pd_probe_kind */
    uint32_t locks;      /* handler touches globals: run it under the globals lock */
    pd_handler_fn handler;
    const char *pp;      /* the probe point as the script wrote it */
    int32_t object;      /* PROCESS_BEGIN/END: pd_objects index, -1 for any process */
    uint32_t period_ns;  /* TIMER */
};

struct pd_object {
    const char *path;    /* realpath, as the launcher resolved it */
    uint32_t abi;        /* PD_ABI_*: only a module of that ABI arms its sites */
};

struct pd_site {
    uint64_t pc;         /* link-time address of the nop */
    uint64_t sema;       /* link-time address of the semaphore, 0 if none */
    const struct pd_argdesc *args;
    const char *provider;
    const char *name;
    uint32_t object;     /* pd_objects index */
    uint32_t probe;      /* pd_probes index */
    uint8_t nop_len;
    uint8_t nargs;
};

struct pd_module_info {
    uint8_t checksum[PD_CHECKSUM_LEN];
    uint64_t globals_size;
    uint32_t nprobes;
    uint32_t nsites;
    uint32_t nobjects;
    uint32_t maxaction;
};

extern const struct pd_probe pd_probes[];
extern const struct pd_site pd_sites[];
extern const struct pd_object pd_objects[];
extern const struct pd_module_info pd_module;
/* Sets globals' initial values; run once by the launcher before `begin`. */
extern void pd_init_globals(uint8_t *globals);

/* ---- the handler context ------------------------------------------------ */

struct pd_ctx {
    const struct pd_probe *probe;
    const struct pd_site *site;   /* NULL outside mark probes */
    const struct pd_regs *regs;   /* NULL outside mark probes */
    uintptr_t bias;               /* load bias of the site's object */
    uint8_t *globals;             /* the segment's globals area */
    int64_t actions;              /* statements left before MAXACTION */
    int error;                    /* set: the handler unwinds to its end */
    uint32_t outlen;
    char errmsg[160];
    uint8_t out[PD_OUTBUF_SIZE];  /* records, written to the ring when the handler ends */
};

/* Errors abort the handler (the generated code checks c->error after each
 * statement); they are counted and reported, and the target runs on. */
void pd_error(struct pd_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Output records (see shmlayout for the encoding). */
void pd_rec_open(struct pd_ctx *c, uint16_t kind, uint32_t fmt_id, uint16_t nargs);
void pd_rec_i64(struct pd_ctx *c, int64_t v);
void pd_rec_str(struct pd_ctx *c, const char *s);
void pd_rec_close(struct pd_ctx *c);

/* Built-ins the translator calls. */
int64_t pd_fetch_arg(struct pd_ctx *c, unsigned index);
int64_t pd_pid(void);
int64_t pd_tid(void);
int64_t pd_ppid(void);
const char *pd_execname(void);
int64_t pd_target(struct pd_ctx *c);
void pd_exit(struct pd_ctx *c);
int64_t pd_div(struct pd_ctx *c, int64_t a, int64_t b, const char *where);
int64_t pd_mod(struct pd_ctx *c, int64_t a, int64_t b, const char *where);

#define PD_G_I64(c, off) (*(volatile int64_t *)((c)->globals + (off)))

/* A statement: count it against MAXACTION. */
#define PD_ACTION(c, where)                                                   \
    do {                                                                      \
        if (PD_UNLIKELY(--(c)->actions < 0)) {                                \
            pd_error((c), "MAXACTION exceeded near %s", (where));             \
        }                                                                     \
    } while (0)

#endif

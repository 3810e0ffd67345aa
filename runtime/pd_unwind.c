/* Unwinding through frames whose return address is pd_ret_tramp.
 *
 * As uftrace does: the unwinder entry points are interposed and, before the
 * real one walks the stack, every live hooked frame of this thread gets its
 * original return address back (pd_shadow_unhook).  A C++ throw (or rethrow,
 * forced unwind, cleanup resume) then unwinds normally; when a catch begins
 * (__cxa_begin_catch) the frames that survived are hooked again and those the
 * exception unwound are dropped, their return probes counted as skipped.  A
 * backtrace (glibc's backtrace(), which calls libgcc through its own handle,
 * or _Unwind_Backtrace) sees the real callers, and the frames are re-hooked
 * when it returns.  The interposers are called by PLT from libstdc++ and
 * programs (in a process pydyn -x attached to, pd_got.c points those GOT entries
 * here); a copy of the unwinder linked statically (-static-libgcc) is not
 * seen.  On aarch64 the hooked return address is wherever the function's prologue
 * saved x30: the unhook is a walk of libgcc's own (arch/aarch64/aarch64_unwind.c, unhook.h).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <unwind.h>

#include "pd_runtime.h"

#define PD_CFA() ((uintptr_t)__builtin_dwarf_cfa())

/* The definition we interpose.  Not in the global scope when `lib` was dlopen'ed
 * RTLD_LOCAL (a C++ plugin of a C program): then from that library's handle,
 * looked up each time (the library may be unloaded later). */
static void *pd_next(const char *name, const char *lib, void **cache)
{
    void *p = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (p)
        return p;
    p = dlsym(RTLD_NEXT, name);
    if (p) {
        __atomic_store_n(cache, p, __ATOMIC_RELAXED);
        return p;
    }
    void *h = pd_dlopen_noload(lib);
    p = h ? dlsym(h, name) : NULL;
    if (!p) {
        static const char msg[] = "pydyn: cannot find the unwinder function it interposes\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        abort();
    }
    return p;
}

#define PD_NEXT(name, type, lib)                                \
    static void *cache_##name;                                  \
    type real_##name = (type)pd_next(#name, lib, &cache_##name)

typedef _Unwind_Reason_Code (*raise_fn)(struct _Unwind_Exception *);
typedef _Unwind_Reason_Code (*forced_fn)(struct _Unwind_Exception *, _Unwind_Stop_Fn, void *);
typedef void (*resume_fn)(struct _Unwind_Exception *);
typedef _Unwind_Reason_Code (*trace_fn)(_Unwind_Trace_Fn, void *);
typedef void *(*begin_catch_fn)(void *);
typedef int (*backtrace_fn)(void **, int);

PD_EXPORT _Unwind_Reason_Code _Unwind_RaiseException(struct _Unwind_Exception *e)
{
    PD_NEXT(_Unwind_RaiseException, raise_fn, PD_LIBGCC);
    pd_shadow_unhook(PD_CFA());
    return real__Unwind_RaiseException(e);
}

PD_EXPORT _Unwind_Reason_Code _Unwind_Resume_or_Rethrow(struct _Unwind_Exception *e)
{
    PD_NEXT(_Unwind_Resume_or_Rethrow, raise_fn, PD_LIBGCC);
    pd_shadow_unhook(PD_CFA());
    return real__Unwind_Resume_or_Rethrow(e);
}

PD_EXPORT _Unwind_Reason_Code _Unwind_ForcedUnwind(struct _Unwind_Exception *e,
                                                   _Unwind_Stop_Fn stop, void *arg)
{
    PD_NEXT(_Unwind_ForcedUnwind, forced_fn, PD_LIBGCC);
    pd_shadow_unhook(PD_CFA());
    return real__Unwind_ForcedUnwind(e, stop, arg);
}

/* A cleanup pad resumes the unwinding; a catch inside its destructors may have
 * re-hooked frames the exception is still unwinding through. */
PD_EXPORT void _Unwind_Resume(struct _Unwind_Exception *e)
{
    PD_NEXT(_Unwind_Resume, resume_fn, PD_LIBGCC);
    pd_shadow_unhook(PD_CFA());
    real__Unwind_Resume(e);
    __builtin_unreachable();
}

PD_EXPORT void *__cxa_begin_catch(void *e)
{
    PD_NEXT(__cxa_begin_catch, begin_catch_fn, "libstdc++.so.6");
    pd_shadow_rehook(PD_CFA());
    return real___cxa_begin_catch(e);
}

PD_EXPORT _Unwind_Reason_Code _Unwind_Backtrace(_Unwind_Trace_Fn fn, void *arg)
{
    PD_NEXT(_Unwind_Backtrace, trace_fn, PD_LIBGCC);
    uintptr_t cfa = PD_CFA();
    pd_shadow_unhook(cfa);
    _Unwind_Reason_Code rc = real__Unwind_Backtrace(fn, arg);
    pd_shadow_rehook(cfa);
    return rc;
}

PD_EXPORT int backtrace(void **buf, int size)
{
    PD_NEXT(backtrace, backtrace_fn, "libc.so.6");
    uintptr_t cfa = PD_CFA();
    pd_shadow_unhook(cfa);
    int n = real_backtrace(buf, size);
    pd_shadow_rehook(cfa);
    return n;
}

/* Frames on a sigaltstack are not ordered against the thread's own (pd_func.c). */
typedef int (*sigaltstack_fn)(const stack_t *, stack_t *);
PD_EXPORT int sigaltstack(const stack_t *ss, stack_t *old)
{
    PD_NEXT(sigaltstack, sigaltstack_fn, "libc.so.6");
    int rc = real_sigaltstack(ss, old);
    if (rc == 0 && ss)
        pd_note_altstack(ss->ss_flags & SS_DISABLE ? 0 : (uintptr_t)ss->ss_sp,
                         ss->ss_flags & SS_DISABLE ? 0 : (uintptr_t)ss->ss_size);
    return rc;
}
